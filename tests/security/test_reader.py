"""The read-only role of a network (qtg_<net>_reader) reads every table and
view of its network and nothing else: nothing of the other network, no write,
no procedure. Operators are members, so an operator reads what its procedures
wrote; a runner is not. The SQL statements printed in the seed document run
for it as printed there, through psql with search_path set to the network:
the stalled-worker query and the observer's advisory ID list. The observer's
locked claim (FOR UPDATE) is the one exception by design: a reader takes no
row locks; the owner runs it as printed."""

from __future__ import annotations

import subprocess
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import bind, claim, create_started, node, node_ids, plan, submit

from qtg_runner.db.embedded import bin_dir

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
        "DELETE FROM testnet.audit_batches",
        "SELECT * FROM testnet.create_movement('x', 1, '{\"nodes\": []}'::jsonb)",
        "SELECT * FROM testnet.claim_ready_nodes('w', 1)",
        "SELECT * FROM qtg_sim.side_effects",
        # what PostgreSQL gives PUBLIC by default (migration 0068_public_privileges)
        "SELECT lo_from_bytea(0, 'a large object that outlives the session')",
        "SELECT lo_create(0)",
        "SELECT pg_notify('qtg_testnet_work', 'ready')",
        "SELECT pg_try_advisory_lock('testnet.worker_heartbeats'::regclass::oid::bigint)",
        "SELECT pg_advisory_xact_lock(1)",
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
    runner = bind(db.connect(db.runner_dsn("testnet")))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runner.execute("SELECT * FROM movement_requests")
    # the audit trail is a view ('access: reader'), kept from runners as the table was
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runner.execute("SELECT * FROM audit_outbox")


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


# the seed document's observer claim, both stages, as printed there (psql variables)
SEED_OBSERVER_IDS = """
-- advisory, unlocked ID list
SELECT movement_request_nodes.id
FROM movement_request_nodes
JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
WHERE node_state IN ('SUBMITTED', 'OBSERVING')
  AND movement_requests.request_state = 'EXECUTING'
  AND (next_observe_at IS NULL OR next_observe_at <= NOW())
ORDER BY movement_requests.created_at
LIMIT :max_nodes;
"""
SEED_OBSERVER_CLAIM = """
-- per-ID locked claim repeats the predicates
SELECT ...
FROM movement_request_nodes
JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
WHERE movement_request_nodes.id = :node_id
  AND node_state IN ('SUBMITTED', 'OBSERVING')
  AND movement_requests.request_state = 'EXECUTING'
  AND (next_observe_at IS NULL OR next_observe_at <= NOW())
FOR UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED;
"""


def psql(dsn: str, statement: str, **variables: object) -> subprocess.CompletedProcess[str]:
    """``statement`` run by the psql client, as an operator would paste it, with
    search_path set to the network and the psql variables given."""
    args = [str(bin_dir() / "psql"), dsn, "-X", "-At", "-v", "ON_ERROR_STOP=1"]
    for name, value in variables.items():
        args += ["-v", f"{name}={value}"]
    script = "SET search_path = testnet, qtg;\n" + statement
    return subprocess.run(args, input=script, capture_output=True, text=True, timeout=30)


def test_the_seeds_observer_statements_run_as_printed(
    db: TestDatabase, conn: Conn, dashboard: Conn
) -> None:
    movement = create_started(conn, plan(node("a")), "seed-1")
    (claimed,) = claim(conn)
    submit(conn, claimed)  # SUBMITTED, due at once for a clock as late as NOW()
    node_id = node_ids(conn, movement)["a"]
    reader_dsn = dashboard.info.dsn + " password=" + (dashboard.info.password or "")

    # the advisory list: verbatim, for the read-only role
    listed = psql(reader_dsn, SEED_OBSERVER_IDS, max_nodes=10)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["SET", str(node_id)]

    # the locked claim (its "SELECT ..." given a column): a reader takes no row
    # locks, so a dashboard can never hold one a runner waits on ...
    claim_sql = SEED_OBSERVER_CLAIM.replace("SELECT ...", "SELECT movement_request_nodes.id")
    refused = psql(reader_dsn, claim_sql, node_id=node_id)
    assert refused.returncode != 0 and "permission denied" in refused.stderr
    # ... and the owner, whose claim_observe runs these predicates, gets the node
    owned = psql(db.dsn, claim_sql, node_id=node_id)
    assert owned.returncode == 0, owned.stderr
    assert owned.stdout.split() == ["SET", str(node_id)]
