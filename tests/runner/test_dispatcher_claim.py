"""The dispatcher's claim commits without waiting for its WAL flush, and only it.

node_dispatcher.asynchronous_commit wraps the claim in one statement that sets
synchronous_commit off for that statement's own transaction: the claim is made
and committed as before (another session sees it at once), and the connection
goes back to the pool with synchronous_commit as it was, so the intent's call
that follows commits synchronously (its flush carries the claim's WAL with it
before any side effect).
"""

from __future__ import annotations

from typing import Any

import psycopg
from engine import bind, create_started, node, plan

from qtg_runner.db import procs
from qtg_runner.workers.node_dispatcher import asynchronous_commit


def test_the_claim_commits_asynchronously_and_only_the_claim(
    db: Any, conn: psycopg.Connection[Any]
) -> None:
    movement = create_started(conn, plan(node("a")), "m1")
    with psycopg.connect(db.runner_dsn("testnet"), autocommit=True) as runner:
        bind(runner)
        runner.execute("SELECT set_config('qtg.now', %s, false)", ["2026-01-01 00:00:00+00"])
        runner.execute("SET synchronous_commit = on")  # the test server may run without
        claimed = asynchronous_commit(procs.claim_ready_nodes("dispatcher", 10)).all(runner)
        assert [c.request_id for c in claimed] == [movement]
        # set for the claim's transaction only: the session's next commit waits for its flush
        assert runner.execute("SHOW synchronous_commit").fetchone() == ("on",)
    # committed: another session sees the node claimed
    row = conn.execute(
        "SELECT node_state::text FROM movement_request_nodes WHERE id = %s", [claimed[0].node_id]
    ).fetchone()
    assert row == ("SUBMITTING",)
