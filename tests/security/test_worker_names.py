"""A worker's name is the actor of the audit rows a runner's calls write (and
the claimer a claim records, the worker a heartbeat reports), and the runner
login chooses it. Played with a runner's own login: a name that is a person's,
the login of an operator (as it is, in another case, or before an '@'), of a
reader, of an operator of the other network, or of a superuser, is refused
with QT002 by every call that takes one, as is a name that is not a worker's
(blanks, a newline, a look-alike letter); nothing changes. The names the
runners send (WorkerContext.worker_id: node_dispatcher@host:pid:id, the
worker's own name for a claim) and the tests' own pass.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import bind, create_started, node, plan, snapshot

from qtg_runner.loop import WorkerContext
from qtg_runner.runtime import new_instance_id

Conn = psycopg.Connection[Any]

CALLS = {
    "claim_ready_nodes": "SELECT * FROM claim_ready_nodes(%s, 10)",
    "start_approved_movements": "SELECT start_approved_movements(10, %s)",
    "expire_movements": "SELECT expire_movements(10, %s)",
    "promote_audit": "SELECT promote_audit(%s, 10)",
    "claim_callbacks": "SELECT * FROM claim_callbacks(%s, 10)",
    "heartbeat": "SELECT heartbeat(%s, 'i-1', 'core', 1)",
    "report_executor_health": "SELECT report_executor_health('sim', 'HEALTHY', '{}', %s)",
}


@pytest.fixture
def runner(db: TestDatabase) -> Conn:
    return bind(db.connect(db.runner_dsn("testnet")))


def refused(conn: Conn, runner: Conn, query: str, worker: str) -> str:
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as caught:
        runner.execute(query, (worker,))
    assert caught.value.sqlstate == "QT002", caught.value
    assert snapshot(conn) == before
    return str(caught.value)


def test_a_runner_cannot_name_a_person_as_its_worker(
    db: TestDatabase, conn: Conn, runner: Conn
) -> None:
    create_started(conn, plan(node("a")), "named-1")  # work to claim, and audit to promote
    operator = db.login("olga", "qtg_testnet_operator").name
    reader = db.login("rita", "qtg_testnet_reader").name
    other = db.login("mark", "qtg_mainnet_operator").name
    row = conn.execute("SELECT session_user").fetchone()
    assert row is not None
    superuser = row[0]
    people = [
        operator,
        operator.upper(),
        f"{operator}@host:4242:1a2b3c",
        reader,
        other,
        superuser,
        "alice",  # the tests' operators (engine.PEOPLE), roles without a login
    ]
    for name, query in CALLS.items():
        for person in people:
            message = refused(conn, runner, query, person)
            assert "is the name of a person's login" in message, (name, message)


@pytest.mark.parametrize(
    "worker",
    ["node dispatcher", "node_dispatcher\n", "\u0430lice", "@host:1", "w1@", "w1@host 1", "-w"],
)
def test_a_worker_name_has_a_worker_s_shape(conn: Conn, runner: Conn, worker: str) -> None:
    for query in CALLS.values():
        assert "is not a worker's name" in refused(conn, runner, query, worker)


def test_the_names_the_runners_send_pass(conn: Conn, runner: Conn) -> None:
    ctx = WorkerContext("testnet", None, {}, new_instance_id())  # type: ignore[arg-type]
    names = [
        ctx.worker_id("node_dispatcher"),
        "node_dispatcher",
        "w1",
        "dispatcher-7",
        "owner",
        "verify_drift_worker@test",
    ]
    for name in names:
        for query in CALLS.values():
            runner.execute(query, (name,))
