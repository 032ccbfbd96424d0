"""The batch intake (create_movements, approve_movements) played with real logins:
a runner login may call neither, and an operator batch-approving movements it
created itself approves none of them; an amount written as a string is read
only when written plainly (digits and an optional fraction: "1e3", " 7", "+7"
and the like are refused, QT002, naming the item); each refusal leaves every
table as it was (apart from the audited four-eyes refusals)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import assert_rejected, bind, fingerprint
from rows import ONE

from qtg_runner.db import procs

Conn = psycopg.Connection[Any]
ITEMS = [
    {
        "external_id": f"intake-attack-{i}",
        "amount": "100",
        "plan": ONE,
    }
    for i in range(3)
]


def login(db: TestDatabase, person: str, group: str) -> Conn:
    return bind(db.connect(db.login(person, group).dsn))


def test_a_runner_login_can_neither_create_nor_approve_a_batch(
    db: TestDatabase, conn: Conn
) -> None:
    runner = bind(db.connect(db.runner_dsn("testnet")))
    alice = login(db, "alice", "qtg_testnet_operator")
    made = procs.create_movements(ITEMS).all(alice)
    before = fingerprint(conn)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        procs.create_movements([{**ITEMS[0], "external_id": "by-runner"}]).all(runner)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        procs.approve_movements([m.movement_id for m in made]).all(runner)
    assert fingerprint(conn) == before


def test_an_operator_cannot_approve_its_own_batch(db: TestDatabase, conn: Conn) -> None:
    alice = login(db, "alice", "qtg_testnet_operator")
    bob = login(db, "bob", "qtg_testnet_operator")
    ids = [m.movement_id for m in procs.create_movements(ITEMS).all(alice)]

    refused = procs.approve_movements(ids).all(alice)
    assert {(r.request_state, r.error_code) for r in refused} == {("PENDING_APPROVAL", "QT022")}
    states = conn.execute(
        "SELECT DISTINCT request_state::text, approved_by FROM movement_requests"
        " WHERE id = ANY(%s)",
        (ids,),
    ).fetchall()
    assert states == [("PENDING_APPROVAL", None)]

    approved = procs.approve_movements(ids).all(bob)
    assert {(r.request_state, r.error_code) for r in approved} == {("APPROVED", None)}


@pytest.mark.parametrize(
    "amount",
    [
        "1e3",  # PostgreSQL reads 1000; a system that reads the digits, 1
        "1E3",
        "2.5e-1",
        " 7",
        "7 ",
        "\t7",
        "7\n",
        "+7",
        "-7",
        "07 ",
        "7.",
        ".5",
        "1_000",
        "1,000",
        "0x10",
        "\u0667",  # an Arabic-Indic seven
        "NaN",
        "Infinity",
        "",
    ],
)
def test_an_amount_string_is_read_only_when_written_plainly(
    db: TestDatabase, conn: Conn, amount: str
) -> None:
    alice = login(db, "alice", "qtg_testnet_operator")
    items = [ITEMS[0], {**ITEMS[1], "amount": amount}, ITEMS[2]]
    error = assert_rejected(
        alice, "QT002", "SELECT * FROM create_movements(%s::jsonb)", (json.dumps(items),)
    )
    assert str(error).startswith(
        "create_movements: items[1] (external id 'intake-attack-1'): amount must be a number"
        " or a numeric string written plainly"
    ), error
    assert conn.execute("SELECT count(*) FROM movement_requests").fetchone() == (0,)


def test_plain_amount_strings_are_read_as_written(db: TestDatabase, conn: Conn) -> None:
    alice = login(db, "alice", "qtg_testnet_operator")
    plain = ["7", "250000.5", "0.000001"]
    items = [{**ITEMS[0], "external_id": f"plain-{a}", "amount": a} for a in plain]
    procs.create_movements(items).all(alice)
    amounts = conn.execute("SELECT amount FROM movement_requests ORDER BY id").fetchall()
    assert [a for (a,) in amounts] == [Decimal(a) for a in plain]
