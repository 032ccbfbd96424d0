"""The read-only role of a network (qtg_<net>_reader) reads every table and
view of its network and nothing else: nothing of the other network, no write,
no procedure. Operators are members, so an operator reads what its procedures
wrote; a runner is not. The seed document's stalled-worker query runs for it
as printed there."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import bind, create_started, node, plan

Conn = psycopg.Connection[Any]


@pytest.fixture
def dashboard(db: TestDatabase) -> Conn:
    """A login that is only a member of qtg_testnet_reader."""
    return bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn))


def test_a_reader_reads_every_table_and_view_of_its_network(conn: Conn, dashboard: Conn) -> None:
    create_started(conn, plan(node("a")), "read-1")
    relations = conn.execute(
        """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'testnet' AND c.relkind IN ('r', 'v') ORDER BY 1"""
    ).fetchall()
    assert len(relations) > 15
    for (relation,) in relations:
        dashboard.execute(f"SELECT * FROM testnet.{relation} LIMIT 1").fetchall()
    assert dashboard.execute("SELECT count(*) FROM movement_requests").fetchone() == (1,)


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM mainnet.movement_requests",
        "SELECT * FROM mainnet.pipeline_counts",
        "INSERT INTO testnet.lane_baselines (lane, baseline_seconds) VALUES ('x', 1)",
        "UPDATE testnet.movement_requests SET priority = 9",
        "DELETE FROM testnet.audit_outbox",
        "SELECT * FROM testnet.create_movement('x', 1, '{\"nodes\": []}'::jsonb)",
        "SELECT * FROM testnet.claim_ready_nodes('w', 1)",
        "SELECT * FROM qtg_sim.side_effects",
    ],
)
def test_a_reader_writes_nothing_calls_nothing_and_sees_nothing_of_the_other_network(
    conn: Conn, dashboard: Conn, statement: str
) -> None:
    create_started(conn, plan(node("a")), "read-2")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        dashboard.execute(statement)


def test_an_operator_reads_its_network_and_a_runner_does_not(db: TestDatabase, conn: Conn) -> None:
    create_started(conn, plan(node("a")), "read-3")
    operator = bind(db.connect(db.operator_dsn("testnet")))
    assert operator.execute("SELECT count(*) FROM audit_outbox").fetchone() is not None
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        bind(db.connect(db.operator_dsn("mainnet")), "mainnet").execute(
            "SELECT * FROM testnet.movement_requests"
        )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        bind(db.connect(db.runner_dsn("testnet"))).execute("SELECT * FROM movement_requests")


# the seed document's stalled-worker query, as printed there
SEED_STALLED_WORKERS = """
SELECT worker_name, last_tick_at, expected_interval_seconds
FROM worker_heartbeats
WHERE NOW() - last_tick_at > expected_interval_seconds * 2
"""


def test_the_seeds_stalled_worker_query_runs_as_printed_for_a_reader(
    db: TestDatabase, dashboard: Conn
) -> None:
    runner = bind(db.connect(db.runner_dsn("testnet")))
    runner.execute("SELECT heartbeat('node_dispatcher', 'alive', 'core', 60)")
    # an instance that last ticked long ago (the test database's pinned clock)
    runner.execute("SELECT set_config('qtg.now', '2026-01-01 00:00:00+00', false)")
    runner.execute("SELECT heartbeat('node_observer', 'gone', 'core', 1)")
    rows = dashboard.execute(SEED_STALLED_WORKERS).fetchall()
    assert [r[0] for r in rows] == ["node_observer"]
