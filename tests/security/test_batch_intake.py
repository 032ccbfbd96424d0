"""The batch intake (create_movements, approve_movements) played with real logins:
a runner login may call neither, and an operator batch-approving movements it
created itself approves none of them; each refusal leaves every table as it was
(apart from the audited four-eyes refusals)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import bind, fingerprint
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
