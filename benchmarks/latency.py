"""Case 2: DAG step latency, a parent's COMPLETED to its child's SUBMITTED.

Two-step movements (parent -> child), both on sim lanes that stay in flight
for an hour, so each step ends SUBMITTED. A dispatcher process (the runner's
own code, see benchmarks/dispatcher.py) submits every parent, then sits idle.
The bench then plays the observer of the parents: for one parent at a time it
calls claim_observe and complete_observe(COMPLETED) — the real procedures —
and the engine readies the child; the dispatcher claims and submits it.

The latency is read from the engine's own timestamps, on the database clock:
the child's submitted_at minus the parent's finished_at.

  on   the dispatcher LISTENs (qtg_runner.wakeup): completions are sequential,
       each waits for its child, so the runner is idle when the parent completes.
  off  no LISTEN: the dispatcher only polls every 1 s (+-0.2 s). Waiting for
       each child would take half a second a step, so parents are completed at
       a steady pace instead (one every PACE_OFF_S) and the children measured
       the same way.
"""

from __future__ import annotations

import random
import statistics
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import engine
from benchmarks.cluster import Cluster
from benchmarks.procs import PYTHON, runner_env, spawn, wait_for
from qtg_runner.db import procs

IN_FLIGHT = {"min_latency_s": 3600, "max_latency_s": 3600}
PACE_OFF_S = 0.025


def two_step_plan() -> dict[str, Any]:
    return {
        "nodes": [
            {"key": "parent", "executor": "sim", "config": {"lane": "bench_parent", **IN_FLIGHT}},
            {
                "key": "child",
                "executor": "sim",
                "config": {"lane": "bench_child", **IN_FLIGHT},
                "depends_on": ["parent"],
            },
        ]
    }


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(p: float) -> float:
        if not ordered:
            return float("nan")
        k = (len(ordered) - 1) * p
        lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)

    return {
        "n": len(ordered),
        "p50_ms": round(pct(0.50), 2),
        "p95_ms": round(pct(0.95), 2),
        "p99_ms": round(pct(0.99), 2),
        "mean_ms": round(statistics.fmean(ordered), 2) if ordered else float("nan"),
        "max_ms": round(ordered[-1], 2) if ordered else float("nan"),
    }


def _complete_parent(conn: psycopg.Connection[Any], parent: int) -> None:
    claimed = procs.claim_observe(parent, "bench-observer").one_or_none(conn)
    if claimed is None:
        raise RuntimeError(f"parent {parent} could not be claimed for observation")
    procs.complete_observe(parent, claimed.claim_secret, "COMPLETED").one(conn)


def _measure(conn: psycopg.Connection[Any], pairs: list[tuple[int, int]]) -> list[float]:
    rows = conn.execute(
        """SELECT extract(epoch FROM child.submitted_at - parent.finished_at) * 1000
             FROM unnest(%s::bigint[], %s::bigint[]) AS pair(parent_id, child_id)
             JOIN movement_request_nodes parent ON parent.id = pair.parent_id
             JOIN movement_request_nodes child ON child.id = pair.child_id""",
        [[p for p, _ in pairs], [c for _, c in pairs]],
    ).fetchall()
    return [float(r[0]) for r in rows]


def run(cluster: Cluster, steps: int, log_dir: Path) -> dict[str, Any]:
    dsn = engine.clone(cluster, "qtg_bench_latency")
    result: dict[str, Any] = {"steps": steps}
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        # the parents become observable at once (a 50 ms baseline, no poll floor)
        procs.upsert_lane_baseline(
            "bench_parent", Decimal("0.05"), min_poll_seconds=0, max_poll_seconds=1
        ).one(conn)
        procs.upsert_lane_baseline("bench_child", 60).one(
            conn
        )  # a plan names only lanes with a row
        engine.create_movements(conn, 2 * steps, two_step_plan(), "lat-")
        engine.vacuum_analyze(conn)
        pairs = conn.execute(
            """SELECT parent.id, child.id
                 FROM movement_request_nodes parent
                 JOIN movement_plan_edges edge ON edge.parent_node_id = parent.id
                 JOIN movement_request_nodes child ON child.id = edge.child_node_id
                ORDER BY parent.id"""
        ).fetchall()
        halves = {"on": pairs[:steps], "off": pairs[steps:]}
        for mode in ("on", "off"):
            child = spawn(
                f"latency-dispatcher-{mode}",
                [PYTHON, "-m", "benchmarks.dispatcher", cluster.runner_dsn(dsn), mode],
                runner_env(cluster.runner_dsn(dsn)),
                log_dir,
            )
            try:
                # every parent is submitted, and nothing is left to dispatch: the runner idles
                wait_for(
                    lambda: conn.execute(
                        """SELECT count(*) = 0 FROM movement_request_nodes
                            WHERE node_key = 'parent'
                              AND node_state IN ('PENDING', 'READY', 'SUBMITTING')"""
                    ).fetchone()[0],  # type: ignore[index]
                    300,
                    "every parent to be submitted",
                    0.1,
                    [child],
                )
                time.sleep(1.5)  # let the dispatcher finish its last tick and sleep
                todo = halves[mode]
                rng = random.Random(4)
                t0 = time.monotonic()
                for parent, kid in todo:
                    _complete_parent(conn, parent)
                    if mode == "on":
                        time.sleep(0.002)  # polling too eagerly would take a core from the runner
                        wait_for(
                            lambda kid=kid: conn.execute(
                                "SELECT node_state = 'SUBMITTED'"
                                " FROM movement_request_nodes WHERE id = %s",
                                [kid],
                            ).fetchone()[0],  # type: ignore[index]
                            30,
                            "a child to be submitted",
                            0.001,
                            [child],
                        )
                    else:
                        time.sleep(PACE_OFF_S * rng.uniform(0.5, 1.5))
                kids = [k for _, k in todo]
                wait_for(
                    lambda kids=kids: conn.execute(  # type: ignore[misc]
                        "SELECT count(*) = 0 FROM movement_request_nodes"
                        " WHERE id = ANY(%s) AND node_state <> 'SUBMITTED'",
                        [kids],
                    ).fetchone()[0],  # type: ignore[index]
                    120,
                    "every child to be submitted",
                    0.05,
                    [child],
                )
                elapsed = time.monotonic() - t0
            finally:
                child.stop()
            samples = _measure(conn, todo)
            result[mode] = {
                **percentiles(samples),
                "elapsed_s": round(elapsed, 1),
                "samples_ms": [round(s, 3) for s in samples],
            }
    cluster.drop_db("qtg_bench_latency")
    return result
