"""Case 3: history flatness.

claim_ready_nodes and observe_candidates (the observer's candidate query)
timed with 0, 100,000 and 1,000,000 finished nodes in the tables. The live
work is the same at every level (READY nodes to claim, SUBMITTED nodes due for
observation); finished history is bulk-loaded set-based between levels (as
tests/scenarios/test_query_plans.py does), then VACUUM ANALYZE.

Each figure is the server-side execution time of one call (EXPLAIN ANALYZE of
`SELECT * FROM <procedure>(...)`, which runs the procedure's statements), the
median of many calls; a claim is rolled back after each call so every call
claims the same rows. The client round trip is reported beside it. Each level
is a database of its own (a copy made before the next load), and the levels
are timed in turn, round after round, so the machine's own load weighs on
each alike.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import psycopg

from benchmarks import engine
from benchmarks.cluster import Cluster
from qtg_runner.db import procs

LEVELS = (0, 100_000, 1_000_000)
NODES_PER_MOVEMENT = 4
LIVE = 400  # started one-node movements
CLAIMED = 200  # of which claimed, then submitted (observable)
SETUP_AT = "2026-01-01 00:00:00+00"
LATER = "2026-01-01 01:00:00+00"  # every observation due
REPS = 300  # calls of each procedure at each level
ROUNDS = 10
WARM_UP = 10  # calls on each new connection before those timed

ONE_NODE = {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": "default"}}]}


def _pin(conn: psycopg.Connection[Any], at: str) -> None:
    conn.execute("SELECT set_config('qtg.now', %s, false)", [at])


def _load_history(conn: psycopg.Connection[Any], start: int, movements: int) -> None:
    with conn.transaction():
        # consistent by construction: skip the per-row foreign key triggers
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            """
            WITH r AS (
                INSERT INTO movement_requests (external_id, request_state, plan, amount, asset,
                                               created_by, approved_by, open_nodes, created_at,
                                               approved_at, started_at, finished_at, updated_at)
                SELECT 'history-' || g, 'COMPLETED', '{"nodes": []}', 100, 'USDC', 'alice',
                       'bob', 0, t, t, t, t + interval '5 minutes', t + interval '5 minutes'
                  FROM generate_series(%(a)s::int, %(b)s::int) g
                 CROSS JOIN LATERAL (SELECT timestamptz '2025-01-01'
                                            + g * interval '1 second' AS t) at
                RETURNING id, created_at, started_at, finished_at
            )
            INSERT INTO movement_request_nodes (request_id, node_key, executor_key, has_side_effect,
                                                node_config, lane, node_state, pending_parents,
                                                claim_token, submit_attempts, external_ref,
                                                submitted_at, observe_started_at, observe_count,
                                                created_at, updated_at, finished_at)
            SELECT r.id, 'n' || k, 'sim', true, '{"lane": "default"}', 'default', 'COMPLETED', 0,
                   1, 1, 'ref-' || r.id || '-' || k, r.started_at, r.started_at, 1,
                   r.created_at, r.finished_at, r.finished_at
              FROM r CROSS JOIN generate_series(1, %(k)s) k
            """,
            {"a": start + 1, "b": start + movements, "k": NODES_PER_MOVEMENT},
        )


def _create_live(conn: psycopg.Connection[Any]) -> None:
    _pin(conn, SETUP_AT)
    engine.create_movements(conn, LIVE, ONE_NODE, "live-")
    procs.start_approved_movements(10000).one(conn)
    claimed = procs.claim_ready_nodes("bench-dispatcher", CLAIMED, 3600).all(conn)
    procs.complete_submit_batch(
        [c.node_id for c in claimed],
        [c.claim_secret for c in claimed],
        [f"tx-{c.node_id}" for c in claimed],
    ).all(conn)


def _exec_ms(conn: psycopg.Connection[Any], call: procs.Call[Any]) -> float:
    explain = f"EXPLAIN (ANALYZE, FORMAT JSON) {call.query}"
    plan = conn.execute(explain, call.params).fetchone()[0]  # type: ignore[index]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return float(plan[0]["Execution Time"])


def _calls() -> dict[str, tuple[procs.Call[Any], bool]]:
    return {
        "claim_ready_nodes": (procs.claim_ready_nodes("bench-w", 10), True),
        "observe_candidates": (procs.observe_candidates(50), False),
    }


def _sample(
    conn: psycopg.Connection[Any], call: procs.Call[Any], rollback: bool, reps: int
) -> list[tuple[float, float, int]]:
    """``reps`` calls: (server ms, client ms, rows) each."""
    out = []
    for _ in range(reps):
        with conn.transaction(force_rollback=rollback):
            t = time.perf_counter()
            rows = call.all(conn)
            client = (time.perf_counter() - t) * 1000
        if not rows:
            raise RuntimeError(f"{call} returned nothing")
        with conn.transaction(force_rollback=rollback):
            server = _exec_ms(conn, call)
        out.append((server, client, len(rows)))
    return out


def _time(dsns: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Every level's calls, interleaved: ROUNDS rounds, each timing REPS /
    ROUNDS calls of each procedure at every level in turn, on a connection
    of its own (after WARM_UP calls: plans cached, pages in memory). So the
    machine's own load weighs on every level alike, as does the luck of one
    server process: measured one level after the other, on one connection
    each, the same flat query came out 0.9x-1.2x from run to run."""
    samples: dict[str, dict[str, list[tuple[float, float, int]]]] = {
        level: {name: [] for name in _calls()} for level in dsns
    }
    for _ in range(ROUNDS):
        for level, dsn in dsns.items():
            with psycopg.connect(dsn, autocommit=True) as conn:
                engine.bind(conn)
                _pin(conn, LATER)
                for name, (call, rollback) in _calls().items():
                    _sample(conn, call, rollback, WARM_UP)
                    samples[level][name] += _sample(conn, call, rollback, REPS // ROUNDS)
    out: dict[str, dict[str, Any]] = {}
    for level, by_call in samples.items():
        out[level] = {}
        for name, taken in by_call.items():
            server = sorted(s for s, _, _ in taken)
            out[level][name] = {
                "server_ms_median": round(statistics.median(server), 4),
                "server_ms_p95": round(server[int(0.95 * len(server))], 4),
                "client_ms_median": round(statistics.median(c for _, c, _ in taken), 4),
                "rows": taken[-1][2],
            }
    return out


def run(cluster: Cluster) -> dict[str, Any]:
    loaded = 0

    def load(conn: psycopg.Connection[Any], level: int) -> dict[str, Any]:
        nonlocal loaded
        movements = level // NODES_PER_MOVEMENT
        t = time.monotonic()
        if movements > loaded:
            _load_history(conn, loaded, movements - loaded)
            loaded = movements
        load_s = time.monotonic() - t
        finished = conn.execute(
            "SELECT count(*) FROM movement_request_nodes WHERE node_state = 'COMPLETED'"
        ).fetchone()[0]  # type: ignore[index]
        return {"finished_nodes": int(finished), "load_s": round(load_s, 1)}

    levels = engine.levels_side_by_side(
        cluster, "qtg_bench_history", LEVELS, _create_live, load, _time
    )
    base = levels[str(LEVELS[0])]
    top = levels[str(LEVELS[-1])]
    ratios = {
        proc: round(top[proc]["server_ms_median"] / base[proc]["server_ms_median"], 3)
        for proc in ("claim_ready_nodes", "observe_candidates")
    }
    return {"levels": levels, "ratio_1m_vs_0": ratios}
