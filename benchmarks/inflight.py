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
                           movement's settle);
  a chunk of CHUNK         as the runner's observer claims and reports its
                           nodes (claim_observe_batch, complete_observe_batch
                           PENDING), per node: each call's time / CHUNK.
And what a poll that finds nothing writes (it does not depend on the machine):
a chunk of CHUNK due nodes claimed and reported PENDING in one transaction, the
row versions of the nodes, the row writes of every table and the WAL it
inserted, per node (goal: at most one version of the node; before the
observer's claim wrote nothing, two, and 1.65 KB of WAL).
Each figure is the server-side execution time of one call (EXPLAIN ANALYZE, as
case 3), the median of REPS calls, every call rolled back so each level
measures the same state; the claims rotate over the due nodes. Each level is a
database of its own (the first copied off before the next load), and the
levels are timed in turn, round after round on new connections, as case 3's.
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
REPS = 300  # calls of each kind at each level
ROUNDS = 10
WARMUP = 10  # calls on each new connection before those timed
WORKER = "bench-observer"
CHUNK = 8  # the observer's chunk with its default max_concurrency
CALLS = (
    "observe_candidates",
    "claim_observe",
    "complete_observe_pending",
    "complete_observe_completed",
    "chunk_claim_per_node",
    "chunk_complete_pending_per_node",
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


def _due(conn: psycopg.Connection[Any]) -> list[int]:
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
    return due


def _sample(
    conn: psycopg.Connection[Any], due: list[int], start: int, calls: int
) -> tuple[dict[str, list[float]], int]:
    """``calls`` rounds of the four calls (server ms each), on the due nodes from
    ``start`` on; and how many candidates the list returned."""
    samples: dict[str, list[float]] = {c: [] for c in CALLS}
    candidates = procs.observe_candidates(50)
    rows = 0
    for i in range(start, start + calls):
        node = due[i % len(due)]
        with conn.transaction(force_rollback=True):
            rows = len(candidates.all(conn))
            samples["observe_candidates"].append(_exec_ms(conn, candidates))
        with conn.transaction(force_rollback=True):
            samples["claim_observe"].append(_exec_ms(conn, procs.claim_observe(node, WORKER)))
        for outcome in ("PENDING", "COMPLETED"):
            with conn.transaction(force_rollback=True):
                claim = procs.claim_observe(node, WORKER).one_or_none(conn)
                if claim is None:
                    raise RuntimeError(f"node {node} could not be claimed for observation")
                samples[f"complete_observe_{outcome.lower()}"].append(
                    _exec_ms(
                        conn,
                        procs.complete_observe(node, claim.claim_secret, outcome, worker=WORKER),
                    )
                )
        chunk = [due[(i * CHUNK + k) % len(due)] for k in range(CHUNK)]
        with conn.transaction(force_rollback=True):
            claim_chunk = procs.claim_observe_batch(chunk, WORKER)
            samples["chunk_claim_per_node"].append(_exec_ms(conn, claim_chunk) / CHUNK)
        with conn.transaction(force_rollback=True):
            claims = claim_chunk.all(conn)
            if len(claims) != len(set(chunk)):
                raise RuntimeError(f"a chunk of {chunk} could not be claimed for observation")
            report = procs.complete_observe_batch(
                [c.node_id for c in claims],
                [c.claim_secret for c in claims],
                ["PENDING"] * len(claims),
                worker=WORKER,
            )
            samples["chunk_complete_pending_per_node"].append(_exec_ms(conn, report) / len(claims))
        if rows == 0:
            raise RuntimeError("observe_candidates returned nothing")
    return samples, rows


_WRITES = """SELECT coalesce(sum(pg_stat_get_xact_tuples_inserted(c.oid)
                               + pg_stat_get_xact_tuples_updated(c.oid)
                               + pg_stat_get_xact_tuples_deleted(c.oid)), 0)::bigint,
                     coalesce(sum(pg_stat_get_xact_tuples_updated(c.oid))
                                  FILTER (WHERE c.relname = 'movement_request_nodes'), 0)::bigint,
                     pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint
                FROM pg_class c
               WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'"""


def _poll_writes(conn: psycopg.Connection[Any], due: list[int]) -> dict[str, float]:
    """What a poll that finds nothing writes, per node: CHUNK due nodes claimed and
    reported PENDING in one transaction (rolled back; its WAL is written all the
    same). The counters are this backend's, read before and after: a change."""
    chunk = due[:CHUNK]
    with conn.transaction(force_rollback=True):
        rows0, nodes0, wal0 = conn.execute(_WRITES).fetchone()  # type: ignore[misc]
        claims = procs.claim_observe_batch(chunk, WORKER).all(conn)
        _, claimed_nodes, _ = conn.execute(_WRITES).fetchone()  # type: ignore[misc]
        procs.complete_observe_batch(
            [c.node_id for c in claims],
            [c.claim_secret for c in claims],
            ["PENDING"] * len(claims),
            worker=WORKER,
        ).all(conn)
        rows1, nodes1, wal1 = conn.execute(_WRITES).fetchone()  # type: ignore[misc]
    n = len(claims)
    return {
        "claim_node_versions": (claimed_nodes - nodes0) / n,
        "node_versions": (nodes1 - nodes0) / n,
        "row_writes": (rows1 - rows0) / n,
        "wal_bytes": round((wal1 - wal0) / n),
    }


def _time(dsns: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The levels side by side: ROUNDS rounds, each timing REPS / ROUNDS calls of
    each kind at every level in turn, on a new connection after WARMUP calls
    (plans cached, pages in memory), every call rolled back. Timed one level
    after the other, the first level timed paid for the machine's warming up."""
    samples: dict[str, dict[str, list[float]]] = {lv: {c: [] for c in CALLS} for lv in dsns}
    dues: dict[str, list[int]] = {}
    rows: dict[str, int] = {}
    writes: dict[str, dict[str, float]] = {}
    for r in range(ROUNDS):
        for level, dsn in dsns.items():
            with psycopg.connect(dsn, autocommit=True) as conn:
                engine.bind(conn)
                _pin(conn, AT)
                due = dues.setdefault(level, _due(conn))
                if r == 0:
                    writes[level] = _poll_writes(conn, due)
                _sample(conn, due, 0, WARMUP)
                taken, rows[level] = _sample(conn, due, r * (REPS // ROUNDS), REPS // ROUNDS)
            for call in CALLS:
                samples[level][call] += taken[call]
    out: dict[str, dict[str, Any]] = {}
    for level in dsns:
        out[level] = {c: _median_ms(samples[level][c]) for c in CALLS}
        out[level]["candidates_returned"] = rows[level]
        out[level]["poll_writes"] = writes[level]
    return out


def run(cluster: Cluster) -> dict[str, Any]:
    loaded = 0

    def set_up(conn: psycopg.Connection[Any]) -> None:
        procs.upsert_lane_baseline(LANE, BASELINE_S).one(conn)

    def load(conn: psycopg.Connection[Any], level: int) -> dict[str, Any]:
        nonlocal loaded
        _load(conn, loaded, level - loaded)
        loaded = level
        in_flight, due = conn.execute(
            """SELECT count(*), count(*) FILTER (WHERE next_observe_at <= %s::timestamptz)
                 FROM movement_request_nodes WHERE node_state = 'OBSERVING'""",
            [AT],
        ).fetchone()  # type: ignore[misc]
        return {"in_flight": int(in_flight), "due": int(due)}

    levels = engine.levels_side_by_side(cluster, "qtg_bench_inflight", LEVELS, set_up, load, _time)
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
