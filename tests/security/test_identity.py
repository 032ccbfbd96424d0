"""Identity is the login: every operator procedure takes its actor from
session_user, so four-eyes holds between people, not between names typed into
a parameter. Played with two real logins, alice and bob, members of the
testnet operator role."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import Login, TestDatabase
from engine import bind, create, node, plan, request_state
from psycopg.types.json import Jsonb
from rows import audit_rows, request_row

from qtg_runner.db import procs

Conn = psycopg.Connection[Any]


@pytest.fixture
def alice(db: TestDatabase) -> Login:
    return db.login("alice", "qtg_testnet_operator")


@pytest.fixture
def bob(db: TestDatabase) -> Login:
    return db.login("bob", "qtg_testnet_operator")


def as_login(db: TestDatabase, login: Login) -> Conn:
    return bind(db.connect(login.dsn))


def test_the_creator_and_the_approver_are_the_logins_that_called(
    db: TestDatabase, conn: Conn, alice: Login, bob: Login
) -> None:
    movement = create(as_login(db, alice), plan(node("a")), "id-1", actor=None)
    procs.approve_movement(movement).one(as_login(db, bob))
    request = request_row(conn, movement)
    assert (request["created_by"], request["approved_by"]) == (alice.name, bob.name)
    assert [(r["actor"], r["login"], r["action"]) for r in audit_rows(conn, movement)] == [
        (alice.name, alice.name, "created"),
        (bob.name, bob.name, "state_changed"),
    ]


def test_one_login_cannot_approve_its_own_movement_and_the_refusal_is_audited(
    db: TestDatabase, conn: Conn, alice: Login
) -> None:
    desk = as_login(db, alice)
    movement = create(desk, plan(node("a")), "id-2", actor=None)
    # a second connection of the same person is the same person
    for session in (desk, as_login(db, alice)):
        with pytest.raises(procs.Refused) as refused:
            procs.approve_movement(movement).one(session)
        assert refused.value.sqlstate == "QT022"
    assert request_state(conn, movement) == "PENDING_APPROVAL"
    refusals = [r for r in audit_rows(conn, movement) if r["action"] == "approval_refused"]
    assert (
        refusals
        == [
            {
                "actor": alice.name,
                "login": alice.name,
                "action": "approval_refused",
                "from_state": "PENDING_APPROVAL",
                "to_state": "PENDING_APPROVAL",
            }
        ]
        * 2
    )


def test_psql_shows_the_refusal_as_a_warning_with_its_sqlstate(
    db: TestDatabase, conn: Conn, alice: Login
) -> None:
    desk = as_login(db, alice)
    movement = create(desk, plan(node("a")), "id-3", actor=None)
    seen: list[tuple[str | None, str | None]] = []
    desk.add_notice_handler(lambda d: seen.append((d.severity_nonlocalized, d.sqlstate)))
    row = desk.execute("SELECT approve_movement(%s)::text", (movement,)).fetchone()
    assert row == ("PENDING_APPROVAL",)
    assert seen == [("WARNING", "QT022")]


@pytest.mark.parametrize(
    "attempt",
    [
        # naming someone else: no procedure takes an actor any more
        "SELECT approve_movement(%(m)s, 'bob')",
        "SELECT cancel_movement(%(m)s, 'bob', 'why')",
        "SELECT * FROM create_movement('id-x', 1, %(plan)s, p_actor => 'bob')",
        # becoming someone else
        "SET SESSION AUTHORIZATION {bob}",
        "SET ROLE {bob}",
        "SET ROLE qtg_owner",
    ],
)
def test_a_login_cannot_act_as_another_person(
    db: TestDatabase, conn: Conn, alice: Login, bob: Login, attempt: str
) -> None:
    desk = as_login(db, alice)
    movement = create(desk, plan(node("a")), "id-4", actor=None)
    with pytest.raises((psycopg.errors.UndefinedFunction, psycopg.errors.InsufficientPrivilege)):
        desk.execute(
            attempt.replace("{bob}", f'"{bob.name}"'),
            {"m": movement, "plan": Jsonb(plan(node("a")))},
        )
    assert request_state(conn, movement) == "PENDING_APPROVAL"


def test_a_role_switch_does_not_change_who_approves(
    db: TestDatabase, conn: Conn, alice: Login
) -> None:
    desk = as_login(db, alice)
    movement = create(desk, plan(node("a")), "id-5", actor=None)
    # alice may become the group role she is a member of; she is still alice
    desk.execute("SET ROLE qtg_testnet_operator")
    with pytest.raises(procs.Refused, match="QT022"):
        procs.approve_movement(movement).one(desk)


def test_the_canceller_is_the_login(db: TestDatabase, conn: Conn, alice: Login, bob: Login) -> None:
    movement = create(as_login(db, alice), plan(node("a")), "id-6", actor=None)
    procs.cancel_movement(movement, "duplicate").one(as_login(db, bob))
    assert request_row(conn, movement)["request_state"] == "CANCELLED"
    last = audit_rows(conn, movement)[-1]
    assert (last["actor"], last["login"], last["to_state"]) == (bob.name, bob.name, "CANCELLED")
