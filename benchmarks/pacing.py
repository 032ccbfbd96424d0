"""Case 4: pacing efficiency, today's phases beside the learned schedule.

2,000 one-step movements on a lane whose baseline is 60 s (the engine's
default pacing parameters), submitted through the procedures in 20 groups one
second apart. Each node's real completion time is drawn around the baseline
(log-normal, median 60 s, sigma 0.2; seeded). Time is pinned: a simulation
loop sets qtg.now to the next moment any node is due (the smallest
next_observe_at), then does what the observer does, with the real procedures:
observe_candidates, then for each candidate claim_observe and
complete_observe, PENDING until the node's completion time has passed,
COMPLETED after. The observer is never late, so each schedule is measured as
it is drawn.

Four runs, each on 2,000 new nodes of the same database:
  phases    the lane has learned nothing: today's phases. Its completions are
            the lane's samples; refresh_lane_pacing then draws its schedule.
  learned   the same completion times on the same lane, now paced by its
            learned schedule.
  degraded  completions twice as slow as learned (the first 500 durations
            x2), on the learned lane, beside
  degraded phases  the same slow completions on a twin lane with the same
            settings that has learned nothing (today's phases).
The degraded runs are a quarter of the size: a slow node costs three times
the polls, and the comparison is node by node.

Figures: observation polls per node (observe_count at completion) and the
detection lag (finished_at minus the completion time). Beside the phases:
polling at a fixed interval chosen so its mean lag equals the phases' (how
many polls that needs for the same completion times).
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
SLOWDOWN = 2.0
DEGRADED_SHARE = 4  # the degraded runs take the first quarter of the durations (500 nodes)
T0 = datetime(2026, 3, 1, tzinfo=UTC)
LANE = "pace60"
TWIN = "pace60-twin"  # the same settings, never refreshed: today's phases
LANE_SETTINGS = (
    "first_poll_fraction",
    "poll_fraction",
    "over_factor",
    "fatal_factor",
    "min_poll_seconds",
    "max_poll_seconds",
)


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


def simulate(
    conn: psycopg.Connection[Any], lane: str, durations: list[float], start: datetime, prefix: str
) -> dict[str, Any]:
    """``len(durations)`` nodes on ``lane`` submitted from ``start``, observed to
    completion; node i completes durations[i] seconds after its submit."""
    _pin(conn, start)
    plan = {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": lane}}]}
    engine.create_movements(conn, len(durations), plan, prefix)
    procs.start_approved_movements(10000).one(conn)
    completes_at: dict[int, datetime] = {}
    order: list[int] = []
    per_group = math.ceil(len(durations) / GROUPS)
    for g in range(GROUPS):
        at = start + timedelta(seconds=g)
        _pin(conn, at)
        claimed = procs.claim_ready_nodes("bench-dispatcher", per_group, 3600).all(conn)
        for c in claimed:
            procs.complete_submit(c.node_id, c.claim_secret, f"tx-{c.node_id}").one(conn)
            completes_at[c.node_id] = at + timedelta(seconds=durations[len(order)])
            order.append(c.node_id)
    if len(order) != len(durations):
        raise RuntimeError(f"pacing: {len(order)} of {len(durations)} nodes submitted")
    engine.vacuum_analyze(conn)

    ticks = 0
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
        if ticks > 100_000:
            raise RuntimeError("pacing simulation does not converge")

    rows = {
        int(r[0]): r
        for r in conn.execute(
            "SELECT id, node_state::text, observe_count, finished_at, submitted_at"
            " FROM movement_request_nodes WHERE id = ANY(%s)",
            [order],
        ).fetchall()
    }
    states = {r[1] for r in rows.values()}
    if states != {"COMPLETED"}:
        raise RuntimeError(f"pacing: {lane} nodes ended in {states}")
    return {
        "polls": [int(rows[i][2]) for i in order],
        "lags": [(rows[i][3] - completes_at[i]).total_seconds() for i in order],
        "durations": [(completes_at[i] - rows[i][4]).total_seconds() for i in order],
        "ticks": ticks,
    }


def summary(p: list[int], lag: list[float]) -> dict[str, float]:
    ordered = sorted(lag)
    p95 = ordered[int(0.95 * len(ordered))]
    return {
        "polls_mean": round(statistics.fmean(p), 2),
        "polls_p95": sorted(p)[int(0.95 * len(p))],
        "polls_max": max(p),
        "lag_mean_s": round(statistics.fmean(lag), 2),
        "lag_p95_s": round(p95, 2),
        "lag_max_s": round(ordered[-1], 2),
        "lag_mean_pct_of_baseline": round(100 * statistics.fmean(lag) / BASELINE_S, 2),
        "lag_p95_pct_of_baseline": round(100 * p95 / BASELINE_S, 2),
    }


def run(cluster: Cluster, nodes: int = NODES) -> dict[str, Any]:
    name = "qtg_bench_pacing"
    dsn = engine.clone(cluster, name)
    rng = random.Random(60)
    durations = [BASELINE_S * math.exp(rng.gauss(0.0, SIGMA)) for _ in range(nodes)]
    slow = [SLOWDOWN * d for d in durations[: max(1, nodes // DEGRADED_SHARE)]]
    day = timedelta(days=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        # the figures are counts on the pinned clock, not time: no commit waits for its flush
        conn.execute("SET synchronous_commit = off")
        _pin(conn, T0)
        lane = procs.upsert_lane_baseline(LANE, BASELINE_S).one(conn)
        procs.upsert_lane_baseline(TWIN, BASELINE_S).one(conn)

        phases = simulate(conn, LANE, durations, T0, "pace-phases-")
        _pin(conn, T0 + day - timedelta(minutes=1))
        refreshed = {r.lane: r for r in procs.refresh_lane_pacing().all(conn)}
        learned_row = conn.execute(
            "SELECT samples, quantile_levels, quantile_seconds, poll_at"
            " FROM lane_pacing_learned WHERE lane = %s",
            [LANE],
        ).fetchone()
        if learned_row is None or not refreshed[LANE].learned:
            raise RuntimeError("pacing: the lane learned no schedule from its first run")
        learned = simulate(conn, LANE, durations, T0 + day, "pace-learned-")
        degraded = simulate(conn, LANE, slow, T0 + 2 * day, "pace-slow-learned-")
        degraded_phases = simulate(conn, TWIN, slow, T0 + 3 * day, "pace-slow-phases-")
    cluster.drop_db(name)

    mean_lag = statistics.fmean(phases["lags"])
    interval = matched_interval(phases["durations"], mean_lag)
    f_polls, f_lags = fixed_interval(phases["durations"], interval)
    more = [
        a - b for a, b in zip(degraded["polls"], degraded_phases["polls"], strict=True) if a > b
    ]

    return {
        "nodes": nodes,
        "baseline_s": BASELINE_S,
        "lane": {name: float(getattr(lane, name)) for name in LANE_SETTINGS},
        "completion_s": {
            "median": round(statistics.median(durations), 1),
            "p5": round(sorted(durations)[int(0.05 * nodes)], 1),
            "p95": round(sorted(durations)[int(0.95 * nodes)], 1),
        },
        "learned_schedule": {
            "samples": int(learned_row[0]),
            "quantile_levels": [float(x) for x in learned_row[1]],
            "quantile_s": [float(x) for x in learned_row[2]],
            "poll_at_s": [float(x) for x in learned_row[3]],
        },
        "simulation": {
            "ticks": {
                "phases": phases["ticks"],
                "learned": learned["ticks"],
                "degraded": degraded["ticks"],
                "degraded_phases": degraded_phases["ticks"],
            }
        },
        # today's phases (the key the table has always read as "engine")
        "engine": summary(phases["polls"], phases["lags"]),
        "learned": summary(learned["polls"], learned["lags"]),
        "degraded": {
            "nodes": len(slow),
            "slowdown": SLOWDOWN,
            "learned": summary(degraded["polls"], degraded["lags"]),
            "phases": summary(degraded_phases["polls"], degraded_phases["lags"]),
            "nodes_polled_more_than_phases": len(more),
            "most_extra_polls": max(more, default=0),
        },
        "fixed_interval_s": round(interval, 2),
        "fixed": summary(f_polls, f_lags),
        "polls_hist": {"engine": phases["polls"], "learned": learned["polls"], "fixed": f_polls},
        "lags_s": {
            "engine": [round(x, 3) for x in phases["lags"]],
            "learned": [round(x, 3) for x in learned["lags"]],
            "fixed": [round(x, 3) for x in f_lags],
        },
    }
