"""Case 7: in-flight scale, the observer's costs with 1,000 and 100,000 movements
in flight.

Each movement is EXECUTING with one node OBSERVING on a paced lane (a ten-minute
baseline): submitted, its intent SUBMITTED, observed twice. Their
next_observe_at is spread over the future (up to an hour ahead) except for a
tenth, which are due (spread over the last ten minutes), so the observer always
has work and most of the table is waiting. Both levels are bulk-loaded
set-based (as case 3 and tests/scenarios/test_query_plans.py load history),
the second on top of the first, then VACUUM ANALYZE.

What is timed is what one observer round costs the database:
  observe_candidates(50)   the advisory list (stage one of the claim);
  claim_observe            the locked claim of one due node (stage two);
  complete_observe         that node's report: PENDING (observed again later,
                           the common case) and COMPLETED (the DAG step and the
                           movement's settle).
Each figure is the server-side execution time of one call (EXPLAIN ANALYZE, as
case 3), the median of REPS calls after WARMUP, every call rolled back so each
level measures the same state; the claims rotate over the due nodes.
"""

from __future__ import annotations

import statistics
from typing import Any

import psycopg

from benchmarks import engine
from benchmarks.cluster import Cluster
from benchmarks.history import _exec_ms
from qtg_runner.db import procs

LEVELS = (1_000, 100_000)
DUE_EVERY = 10  # one movement in ten is due
LANE = "bench_inflight"
BASELINE_S = 600
AT = "2026-01-01 12:00:00+00"  # the measured moment (the pinned clock)
REPS = 300
WARMUP = 20
WORKER = "bench-observer"
CALLS = (
    "observe_candidates",
    "claim_observe",
    "complete_observe_pending",
    "complete_observe_completed",
)


def _pin(conn: psycopg.Connection[Any], at: str) -> None:
    conn.execute("SELECT set_config('qtg.now', %s, false)", [at])


def _load(conn: psycopg.Connection[Any], start: int, movements: int) -> None:
    """Movements start+1 .. start+movements: EXECUTING, one OBSERVING node each
    with its SUBMITTED intent; one in DUE_EVERY due at AT, the rest later."""
    with conn.transaction():
        # consistent by construction: skip the per-row foreign key triggers
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            """
            WITH r AS (
                INSERT INTO movement_requests (external_id, request_state, plan, amount, asset,
                                               created_by, approved_by, open_nodes, created_at,
                                               approved_at, started_at, updated_at)
                SELECT 'inflight-' || g, 'EXECUTING',
                       jsonb_build_object('nodes', jsonb_build_array(jsonb_build_object(
                           'key', 'hop', 'executor', 'sim',
                           'config', jsonb_build_object('lane', %(lane)s::text)))),
                       100, 'USDC', 'alice', 'bob', 1, t, t, t, t
                  FROM generate_series(%(a)s::int, %(b)s::int) g
                 CROSS JOIN LATERAL (SELECT %(at)s::timestamptz - interval '2 hours'
                                            + (g %% 3600) * interval '1 second' AS t) at
                RETURNING id, started_at
            ), n AS (
                INSERT INTO movement_request_nodes (request_id, node_key, executor_key,
                                                    has_side_effect, node_config, lane, node_state,
                                                    pending_parents, claim_token, claimed_by,
                                                    claimed_at, submit_attempts, external_ref,
                                                    submitted_at, observe_started_at,
                                                    next_observe_at, observe_phase, observe_count,
                                                    last_observed_at, created_at, updated_at)
                SELECT r.id, 'hop', 'sim', true,
                       jsonb_build_object('lane', %(lane)s::text), %(lane)s,
                       'OBSERVING', 0, 3, %(worker)s, s, 1, 'ref-' || r.id, s, s,
                       CASE WHEN r.id %% %(due)s = 0
                            THEN %(at)s::timestamptz - (r.id %% 600) * interval '1 second'
                            ELSE %(at)s::timestamptz + (1 + r.id %% 3600) * interval '1 second'
                       END,
                       'pre_baseline', 2, s, r.started_at, s
                  FROM r
                 CROSS JOIN LATERAL (SELECT %(at)s::timestamptz - interval '5 minutes' AS s) sub
                RETURNING id, request_id, submitted_at
            )
            INSERT INTO node_intents (node_id, claim_token, idempotency_key, claimed_by,
                                      intent_state, external_ref, created_at, prepared_at,
                                      finished_at)
            SELECT n.id, 1, 'inflight-' || n.id || '-1', 'bench-dispatcher', 'SUBMITTED',
                   'ref-' || n.request_id, n.submitted_at, n.submitted_at, n.submitted_at
              FROM n
            """,
            {
                "a": start + 1,
                "b": start + movements,
                "lane": LANE,
                "worker": WORKER,
                "due": DUE_EVERY,
                "at": AT,
            },
        )


def _median_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "server_ms_median": round(statistics.median(ordered), 4),
        "server_ms_p95": round(ordered[int(0.95 * len(ordered))], 4),
    }


def _time(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    _pin(conn, AT)
    due = [
        r[0]
        for r in conn.execute(
            """SELECT id FROM movement_request_nodes
                WHERE node_state = 'OBSERVING' AND next_observe_at <= %s::timestamptz
                ORDER BY id LIMIT %s""",
            [AT, REPS + WARMUP],
        ).fetchall()
    ]
    if not due:
        raise RuntimeError("no node is due for observation")
    samples: dict[str, list[float]] = {c: [] for c in CALLS}
    candidates = procs.observe_candidates(50)
    rows = 0
    for i in range(REPS + WARMUP):
        node = due[i % len(due)]
        with conn.transaction(force_rollback=True):
            rows = len(candidates.all(conn))
            t_candidates = _exec_ms(conn, candidates)
        with conn.transaction(force_rollback=True):
            t_claim = _exec_ms(conn, procs.claim_observe(node, WORKER))
        timed: dict[str, float] = {}
        for outcome in ("PENDING", "COMPLETED"):
            with conn.transaction(force_rollback=True):
                claim = procs.claim_observe(node, WORKER).one_or_none(conn)
                if claim is None:
                    raise RuntimeError(f"node {node} could not be claimed for observation")
                timed[outcome] = _exec_ms(
                    conn, procs.complete_observe(node, claim.claim_secret, outcome)
                )
        if rows == 0:
            raise RuntimeError("observe_candidates returned nothing")
        if i >= WARMUP:  # plans cached, pages in memory
            samples["observe_candidates"].append(t_candidates)
            samples["claim_observe"].append(t_claim)
            samples["complete_observe_pending"].append(timed["PENDING"])
            samples["complete_observe_completed"].append(timed["COMPLETED"])
    out: dict[str, Any] = {c: _median_ms(samples[c]) for c in CALLS}
    out["candidates_returned"] = rows
    return out


def run(cluster: Cluster) -> dict[str, Any]:
    name = "qtg_bench_inflight"
    dsn = engine.clone(cluster, name)
    levels: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        procs.upsert_lane_baseline(LANE, BASELINE_S).one(conn)
        loaded = 0
        for level in LEVELS:
            _load(conn, loaded, level - loaded)
            loaded = level
            conn.execute("VACUUM ANALYZE")
            in_flight, due = conn.execute(
                """SELECT count(*), count(*) FILTER (WHERE next_observe_at <= %s::timestamptz)
                     FROM movement_request_nodes WHERE node_state = 'OBSERVING'""",
                [AT],
            ).fetchone()  # type: ignore[misc]
            levels[str(level)] = {"in_flight": int(in_flight), "due": int(due), **_time(conn)}
    cluster.drop_db(name)
    lo, hi = levels[str(LEVELS[0])], levels[str(LEVELS[-1])]
    ratios = {c: round(hi[c]["server_ms_median"] / lo[c]["server_ms_median"], 3) for c in CALLS}
    claim = {
        str(level): round(
            levels[str(level)]["observe_candidates"]["server_ms_median"]
            + levels[str(level)]["claim_observe"]["server_ms_median"],
            4,
        )
        for level in LEVELS
    }
    ratios["claim"] = round(claim[str(LEVELS[-1])] / claim[str(LEVELS[0])], 3)
    return {"levels": levels, "claim_ms": claim, "ratio_100k_vs_1k": ratios}
