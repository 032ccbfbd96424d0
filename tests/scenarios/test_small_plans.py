"""A new network's hot calls read their rows by key, as a big one's do.

With a thousand nodes in compact tables, PostgreSQL's default costs (a random
page four times a sequential one) made the generic plans of the completion
guard and of the settle read whole tables and hash-join them where one
primary-key probe answers: an observation cost twice what it cost with 100,000
nodes in flight. The installer sets the planner's costs on every routine
(PLANNER_SETTINGS in qtg_runner/db/migrate.py); this plays each call of a
runner's round at that size and reads the plans PostgreSQL chose inside the
procedures. The DAG step (finish_nodes) read the node table whole at this
size, filtering the PENDING rows before it joined the completed node's edges,
whatever the costs; it now reads the children from the edges first and
reaches each by its key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from engine import bind, node, plan
from plans import create_movements, explained, plans_database, seq_scanned

SETUP_AT = "2026-01-01 00:00:00+00"
FINISHED = 250  # finished movements of 4 nodes: a thousand nodes of history
LIVE = 40  # started two-step movements; of their first steps, claimed and submitted:
SUBMITTED = 20
KEYED = {"movement_requests", "movement_request_nodes", "node_intents"}


@pytest.fixture(scope="module")
def small_dsn(pg_server: str, template_db: str) -> Iterator[str]:
    with plans_database(pg_server, template_db, "qtg_small_plans", SETUP_AT) as (dsn, conn):

        def started(prefix: str, count: int, the_plan: dict[str, Any]) -> None:
            create_movements(conn, prefix, count, json.dumps(the_plan))
            conn.execute("SELECT start_approved_movements(1000)")

        # the history: movements of four nodes in a row, each node settled at submit
        started(
            "done-",
            FINISHED,
            plan(node("a"), node("b", ["a"]), node("c", ["b"]), node("d", ["c"])),
        )
        for _ in range(4):
            claimed = conn.execute(
                "SELECT node_id, claim_secret FROM claim_ready_nodes('dispatcher', 1000, 3600)"
            ).fetchall()
            conn.execute(
                "SELECT count(*) FROM complete_submit_batch(%s::bigint[], %s::text[],"
                " %s::text[], NULL, %s::boolean[])",
                (
                    [n for n, _ in claimed],
                    [s for _, s in claimed],
                    [f"tx-{n}" for n, _ in claimed],
                    [True] * len(claimed),
                ),
            )
        # the live work: two steps each, the second waiting on the first
        started("live-", LIVE, plan(node("a"), node("b", ["a"])))
        live = conn.execute(
            "SELECT node_id, claim_secret FROM claim_ready_nodes('dispatcher', %s, 3600)",
            (SUBMITTED,),
        ).fetchall()
        conn.execute(
            "SELECT count(*) FROM complete_submit_batch(%s::bigint[], %s::text[], %s::text[])",
            ([n for n, _ in live], [s for _, s in live], [f"tx-{n}" for n, _ in live]),
        )
        # compact, as after a restore, a bulk load or VACUUM FULL: the fewer the
        # pages, the cheaper a whole-table read looks to the planner
        conn.execute("VACUUM FULL ANALYZE movement_requests, movement_request_nodes, node_intents")
        counts = dict(
            conn.execute(
                "SELECT node_state::text, count(*) FROM movement_request_nodes GROUP BY 1"
            ).fetchall()
        )
        assert counts == {
            "COMPLETED": FINISHED * 4,
            "SUBMITTED": SUBMITTED,
            "READY": LIVE - SUBMITTED,
            "PENDING": LIVE,
        }, counts
        yield dsn


def _node(dsn: str, state: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        bind(conn)
        row = conn.execute(
            "SELECT min(id) FROM movement_request_nodes WHERE node_state = %s", (state,)
        ).fetchone()
    assert row is not None and row[0] is not None, state
    return int(row[0])


CALLS = {
    "claim_ready_nodes": "SELECT * FROM claim_ready_nodes('w1', 10)",
    "observe_candidates": "SELECT * FROM observe_candidates(50)",
    "claim_observe": "SELECT * FROM claim_observe({submitted}, 'observer')",
    "complete_observe PENDING": (
        "SELECT * FROM complete_observe({submitted},"
        " (SELECT claim_secret FROM claim_observe({submitted}, 'observer')), 'PENDING')"
    ),
    "complete_observe COMPLETED (the DAG step)": (
        "SELECT * FROM complete_observe({submitted},"
        " (SELECT claim_secret FROM claim_observe({submitted}, 'observer')), 'COMPLETED')"
    ),
    "complete_submit_batch": (
        "SELECT s.* FROM (SELECT * FROM claim_ready_nodes('w1', 1)) c"
        " CROSS JOIN LATERAL complete_submit_batch(ARRAY[c.node_id], ARRAY[c.claim_secret],"
        " ARRAY['tx-new']) s"
    ),
}


@pytest.mark.parametrize("call", CALLS)
def test_a_small_networks_calls_read_their_rows_by_key(small_dsn: str, call: str) -> None:
    query = CALLS[call].format(submitted=_node(small_dsn, "SUBMITTED"))
    nodes = explained(small_dsn, query)

    assert not KEYED & seq_scanned(nodes), [
        (n["Node Type"], n.get("Relation Name")) for n in nodes if "Relation Name" in n
    ]
