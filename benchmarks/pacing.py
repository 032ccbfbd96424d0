"""Case 4: pacing efficiency.

2,000 one-step movements on a lane whose baseline is 60 s (the engine's
default pacing parameters), submitted through the procedures. Each node's
real completion time is drawn around the baseline (log-normal, median 60 s,
sigma 0.2; seeded). Time is pinned: a simulation loop sets qtg.now to the
next moment any node is due (the smallest next_observe_at), then does what
the observer does, with the real procedures: observe_candidates, then for
each candidate claim_observe and complete_observe, PENDING until the node's
completion time has passed, COMPLETED after.

Figures: observation polls per node (observe_count at completion) and the
detection lag (finished_at minus the completion time). Beside them, polling at
a fixed interval chosen so its mean lag equals the engine's: how many polls
that needs for the same completion times.
"""

from __future__ import annotations

import math
import random
import statistics
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from benchmarks import engine
from benchmarks.cluster import Cluster
from qtg_runner.db import procs

NODES = 2000
BASELINE_S = 60.0
GROUPS = 20  # submitted in 20 groups, one second apart
SIGMA = 0.2
T0 = datetime(2026, 3, 1, tzinfo=UTC)
LANE = "pace60"


def _pin(conn: psycopg.Connection[Any], at: datetime) -> None:
    conn.execute("SELECT set_config('qtg.now', %s, false)", [at.isoformat()])


def fixed_interval(durations: list[float], interval: float) -> tuple[list[int], list[float]]:
    """Polls and lags when polling every ``interval`` seconds from the submit."""
    polls = [max(1, math.ceil(d / interval)) for d in durations]
    lags = [p * interval - d for p, d in zip(polls, durations, strict=True)]
    return polls, lags


def matched_interval(durations: list[float], target_mean_lag: float) -> float:
    """The fixed interval whose mean lag equals ``target_mean_lag`` (bisection)."""
    lo, hi = 1e-3, 4 * max(target_mean_lag, 1e-3) + 1
    for _ in range(80):
        mid = (lo + hi) / 2
        if statistics.fmean(fixed_interval(durations, mid)[1]) < target_mean_lag:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def run(cluster: Cluster) -> dict[str, Any]:
    name = "qtg_bench_pacing"
    dsn = engine.clone(cluster, name)
    rng = random.Random(60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        _pin(conn, T0)
        lane = procs.upsert_lane_baseline(LANE, BASELINE_S).one(conn)
        plan = {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": LANE}}]}
        engine.create_movements(conn, NODES, plan, "pace-")
        procs.start_approved_movements(10000).one(conn)
        completes_at: dict[int, datetime] = {}
        per_group = NODES // GROUPS
        for g in range(GROUPS):
            at = T0 + timedelta(seconds=g)
            _pin(conn, at)
            claimed = procs.claim_ready_nodes("bench-dispatcher", per_group, 3600).all(conn)
            for c in claimed:
                procs.complete_submit(c.node_id, c.claim_secret, f"tx-{c.node_id}").one(conn)
                duration = BASELINE_S * math.exp(rng.gauss(0.0, SIGMA))
                completes_at[c.node_id] = at + timedelta(seconds=duration)
        engine.vacuum_analyze(conn)

        ticks = 0
        polls = 0
        while True:
            row = conn.execute(
                "SELECT min(next_observe_at) FROM movement_request_nodes"
                " WHERE node_state IN ('SUBMITTED', 'OBSERVING')"
            ).fetchone()
            if row is None or row[0] is None:
                break
            now: datetime = row[0]
            _pin(conn, now)
            ticks += 1
            while True:
                candidates = procs.observe_candidates(1000).all(conn)
                if not candidates:
                    break
                for node_id in candidates:
                    with conn.transaction():
                        claim = procs.claim_observe(node_id, "bench-observer").one_or_none(conn)
                        if claim is None:
                            continue
                        outcome = "COMPLETED" if now >= completes_at[node_id] else "PENDING"
                        procs.complete_observe(node_id, claim.claim_secret, outcome).one(conn)
                        polls += 1
            if ticks > 100_000:
                raise RuntimeError("pacing simulation does not converge")

        rows = conn.execute(
            """SELECT id, node_state::text, observe_count, finished_at, submitted_at
                 FROM movement_request_nodes ORDER BY id"""
        ).fetchall()
    cluster.drop_db(name)

    states = {r[1] for r in rows}
    if states != {"COMPLETED"}:
        raise RuntimeError(f"pacing: nodes ended in {states}")
    node_polls = [int(r[2]) for r in rows]
    lags = [(r[3] - completes_at[int(r[0])]).total_seconds() for r in rows]
    durations = [(completes_at[int(r[0])] - r[4]).total_seconds() for r in rows]
    mean_lag = statistics.fmean(lags)
    interval = matched_interval(durations, mean_lag)
    f_polls, f_lags = fixed_interval(durations, interval)

    def summary(p: list[int], lag: list[float]) -> dict[str, float]:
        ordered = sorted(lag)
        return {
            "polls_mean": round(statistics.fmean(p), 2),
            "polls_p95": sorted(p)[int(0.95 * len(p))],
            "polls_max": max(p),
            "lag_mean_s": round(statistics.fmean(lag), 2),
            "lag_p95_s": round(ordered[int(0.95 * len(ordered))], 2),
            "lag_max_s": round(ordered[-1], 2),
            "lag_mean_pct_of_baseline": round(100 * statistics.fmean(lag) / BASELINE_S, 2),
            "lag_p95_pct_of_baseline": round(
                100 * ordered[int(0.95 * len(ordered))] / BASELINE_S, 2
            ),
        }

    return {
        "nodes": len(rows),
        "baseline_s": BASELINE_S,
        "lane": {
            name: float(getattr(lane, name))
            for name in (
                "first_poll_fraction",
                "poll_fraction",
                "over_factor",
                "fatal_factor",
                "min_poll_seconds",
                "max_poll_seconds",
            )
        },
        "completion_s": {
            "median": round(statistics.median(durations), 1),
            "p5": round(sorted(durations)[int(0.05 * len(durations))], 1),
            "p95": round(sorted(durations)[int(0.95 * len(durations))], 1),
        },
        "simulation": {"ticks": ticks, "polls": polls},
        "engine": summary(node_polls, lags),
        "fixed_interval_s": round(interval, 2),
        "fixed": summary(f_polls, f_lags),
        "polls_hist": {"engine": node_polls, "fixed": f_polls},
        "lags_s": {"engine": [round(x, 3) for x in lags], "fixed": [round(x, 3) for x in f_lags]},
    }
