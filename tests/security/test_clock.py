"""A clock no caller moves.

Leases, expiry, approvals and audit timestamps read qtg.clock(). A session may
pin it (SET qtg.now) only in a database its owner marked as a test database;
in any other, every attempt below, made with the runner's or an operator's own
login, is refused with QT040 and changes nothing, and neither login can mark
the database itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import bind, create, create_started, node, node_ids, plan, register_sim, snapshot
from psycopg.conninfo import make_conninfo
from rows import iso_at

from qtg_runner.db.migrate import mark_test_database

Conn = psycopg.Connection[Any]
PAST = "2019-01-01 00:00:00+00"
FUTURE = "9999-01-01 00:00:00+00"


@pytest.fixture
def production(db: TestDatabase) -> TestDatabase:
    """This test's database, unmarked: as a production database is."""
    mark_test_database(db.dsn, marked=False)
    return db


def login(db: TestDatabase, role: str, pinned: str | None = None) -> Conn:
    """A connection as the network's ``role`` login, its clock pinned at login
    (as a drill's PGOPTIONS would) when ``pinned`` is given."""
    dsn = db.runner_dsn("testnet") if role == "runner" else db.operator_dsn("testnet")
    if pinned is not None:
        dsn = make_conninfo(dsn, options=f"-c qtg.now={pinned.replace(' ', 'T')}")
    return bind(db.connect(dsn))


def pin(conn: Conn, at: str) -> Conn:
    conn.execute("SELECT set_config('qtg.now', %s, false)", (at,))
    return conn


def refused(admin: Conn, attack: Callable[[], Any]) -> None:
    """``attack`` fails with QT040 and every table is as it was."""
    before = snapshot(admin)
    with pytest.raises(psycopg.Error) as caught:
        attack()
    assert caught.value.sqlstate == "QT040", caught.value
    assert "not a test database" in str(caught.value)
    assert snapshot(admin) == before


@pytest.fixture
def admin(production: TestDatabase) -> Conn:
    conn = bind(production.connect())
    register_sim(conn)
    return conn


def test_a_runner_cannot_claim_with_a_lease_in_the_far_future(
    production: TestDatabase, admin: Conn
) -> None:
    create_started(admin, plan(node("a")), "clock-1")
    runner = pin(login(production, "runner"), PAST)
    refused(admin, lambda: runner.execute("SELECT * FROM claim_ready_nodes('thief', 10, 60)"))


def test_a_runner_cannot_take_a_live_claim_by_moving_the_clock_past_its_lease(
    production: TestDatabase, admin: Conn
) -> None:
    movement = create_started(admin, plan(node("a")), "clock-2")
    claimed = admin.execute("SELECT node_id FROM claim_ready_nodes('owner', 10, 300)").fetchall()
    assert claimed == [(node_ids(admin, movement)["a"],)]
    # at login, as a drill's PGOPTIONS would pin it
    thief = login(production, "runner", pinned=FUTURE)
    refused(admin, lambda: thief.execute("SELECT * FROM claim_recovery_nodes('thief', 10, 60)"))


def test_a_runner_cannot_expire_a_movement_before_its_time(
    production: TestDatabase, admin: Conn
) -> None:
    create(admin, plan(node("a")), "clock-3", expires_at="2099-01-01 00:00:00+00")
    runner = pin(login(production, "runner"), "2100-01-01 00:00:00+00")
    refused(admin, lambda: runner.execute("SELECT expire_movements(10)"))


def test_an_operator_cannot_approve_an_expired_movement_by_moving_the_clock_back(
    production: TestDatabase, admin: Conn
) -> None:
    # a movement that expired on 2026-01-01 (made while the database was marked)
    mark_test_database(production.dsn)
    pin(admin, iso_at(0))
    movement = create(admin, plan(node("a")), "clock-4", expires_at=iso_at(60))
    admin.execute("RESET qtg.now")
    mark_test_database(production.dsn, marked=False)
    operator = pin(login(production, "operator"), "2025-12-31 00:00:00+00")
    refused(admin, lambda: operator.execute("SELECT approve_movement(%s)", (movement,)))


def test_an_operator_cannot_backdate_the_audit_trail(production: TestDatabase, admin: Conn) -> None:
    operator = pin(login(production, "operator"), PAST)
    refused(
        admin,
        lambda: operator.execute(
            "SELECT * FROM create_movement('clock-5', 10, %s::jsonb)",
            ('{"nodes": [{"key": "a", "executor": "sim", "config": {"lane": "l"}}]}',),
        ),
    )


def test_a_pinned_clock_cannot_hide_a_node_from_the_dashboards(
    production: TestDatabase, admin: Conn
) -> None:
    create_started(admin, plan(node("a")), "clock-6")
    runner = pin(login(production, "runner"), PAST)
    refused(admin, lambda: runner.execute("SELECT * FROM stuck_nodes").fetchall())


@pytest.mark.parametrize("role", ["runner", "operator"])
@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO qtg.test_database DEFAULT VALUES",
        "UPDATE qtg.test_database SET marked_by = 'me'",
        "DELETE FROM qtg.test_database",
    ],
)
def test_neither_login_can_mark_or_unmark_the_database(
    db: TestDatabase, role: str, statement: str
) -> None:
    conn = login(db, role)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)
    # the template's mark is still there: tests pin their clocks
    assert bind(db.connect()).execute("SELECT count(*) FROM qtg.test_database").fetchone() == (1,)


def test_a_marked_database_honours_a_pinned_clock_and_real_time_is_the_default(
    production: TestDatabase, admin: Conn
) -> None:
    runner = login(production, "runner")
    (real,) = runner.execute("SELECT qtg.clock() > '2026-01-01'").fetchone() or (None,)
    assert real is True
    mark_test_database(production.dsn)
    assert pin(runner, PAST).execute("SELECT qtg.clock()::text").fetchone() == (
        "2019-01-01 00:00:00+00",
    )
