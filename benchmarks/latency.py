"""Case 2: DAG step latency, a parent's COMPLETED to its child's SUBMITTED.

Two-step movements (parent -> child), both on sim lanes that stay in flight
for an hour, so each step ends SUBMITTED. A dispatcher process (the runner's
own code, see benchmarks/dispatcher.py) submits every parent, then sits idle.
The bench then plays the observer of the parents: for one parent at a time it
calls claim_observe_batch and complete_observe_batch(COMPLETED) — the real
procedures, as the runner's observer calls them for a chunk of one node —
and the engine readies the child; the dispatcher claims and submits it.

The latency is read from the engine's own timestamps, on the database clock:
the child's submitted_at minus the parent's finished_at.

  on   the dispatcher LISTENs (qtg_runner.wakeup): completions are sequential,
       each waits for its child, so the runner is idle when the parent completes.
  off  no LISTEN: the dispatcher only polls, each of its two loops every 1 s
       (+-0.2 s). Waiting for each child would take a quarter to half a
       second a step, so parents are completed at
       a steady pace instead (one every PACE_OFF_S) and the children measured
       the same way.
  load as "on", while LOAD other multi-step movements run in the same runner
       process (node_dispatcher and node_observer, as `qtg run` runs them):
       chains of LOAD_STEPS sim nodes settling in 2-6 s on a lane with a 4 s
       baseline, so the observer polls about every 0.4 s per node and the
       dispatcher submits the next step of some movement many times a second;
       a feeder thread creates and approves new ones as they finish, to keep
       LOAD in flight. Here a live observer would observe the measured parents
       too, so they sit on a lane whose first poll is an hour away, and the
       bench makes one due (an UPDATE of its next_observe_at, the bench's only
       write outside the procedures) in the transaction in which it claims and
       completes it, as the observer does, so no other claim comes between;
       like the observer, it sends that transaction in two round trips.
  load_split  the same load, with one process per worker (as `qtg worker
       node_dispatcher` and `qtg worker node_observer` run them): the
       dispatcher's event loop and its database sessions are its own.

Each sample is also split by the engine's timestamps of the child's way
(``stages``): the parent's finish to the child's claim (the commit, the
NOTIFY, the wake-up and the calls before the claim), the claim to its intent
recorded as PREPARED, that to the side effect (the sim's row, clock_timestamp)
and that to the report (SUBMITTED).
"""

from __future__ import annotations

import random
import statistics
import threading
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
LOAD = 1000
"""Other movements in flight during the "load" run (QTG_BENCH_LOAD)."""
LOAD_STEPS = 4
LOAD_LATENCY = {"min_latency_s": 2, "max_latency_s": 6}
LOAD_BASELINE_S = 4
HELD_BASELINE_S = 7200  # the measured parents under load: no poll for an hour
HELD_MAX_POLL_S = 3600  # the most a lane may wait between polls (check_lane_settings)
FEED_EVERY_S = 0.25
POLL_S = 0.001
"""How often the bench looks for the measured child (idle runner)."""
POLL_LOAD_S = 0.005
"""The same under load, where the bench's polls would take a busy core's time."""
STAGES = ("finish_to_claim", "claim_to_intent", "intent_to_side_effect", "side_effect_to_report")


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


def load_plan() -> dict[str, Any]:
    keys = [f"s{i}" for i in range(1, LOAD_STEPS + 1)]
    return {
        "nodes": [
            {
                "key": key,
                "executor": "sim",
                "config": {"lane": "bench_load", **LOAD_LATENCY},
                **({"depends_on": [keys[i - 1]]} if i else {}),
            }
            for i, key in enumerate(keys)
        ]
    }


def held_plan() -> dict[str, Any]:
    plan = two_step_plan()
    plan["nodes"][0]["config"]["lane"] = "bench_parent_held"
    return plan


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


def _complete_parent(conn: psycopg.Connection[Any], parent: int) -> float:
    """The parent claimed and completed, in one transaction of two round trips
    as the observer sends a chunk of one node (node_observer.observe_chunk):
    BEGIN with the claim, the report with the COMMIT. Returns the second round
    trip (ms: the report and its commit, as the bench saw them)."""
    return _complete_in_chunk(conn, parent, ("BEGIN",))


def _complete_held_parent(conn: psycopg.Connection[Any], parent: int) -> float:
    """The parent made due, claimed and completed in one transaction (see "load"),
    as _complete_parent does it."""
    due = f"UPDATE movement_request_nodes SET next_observe_at = clock() WHERE id = {int(parent)}"
    return _complete_in_chunk(conn, parent, ("BEGIN", due))


def _complete_in_chunk(
    conn: psycopg.Connection[Any], parent: int, before: tuple[str, ...]
) -> float:
    with procs.begun_transaction(conn):
        claimed = procs.claim_observe_batch([parent], "bench-observer").all_between(conn, before)
        if not claimed:
            raise RuntimeError(f"parent {parent} could not be claimed for observation")
        started = time.perf_counter()
        [row] = procs.complete_observe_batch(
            [parent], [claimed[0].claim_secret], ["COMPLETED"]
        ).all_between(conn, before=(), after=("COMMIT",))
        if row.error_code is not None:
            raise RuntimeError(f"parent {parent}: {row.error_code} {row.error_message}")
    return (time.perf_counter() - started) * 1000


def _measure(
    conn: psycopg.Connection[Any], pairs: list[tuple[int, int]]
) -> tuple[list[float], dict[str, list[float]]]:
    """Each pair's latency (ms), and the same split by STAGES."""
    rows = conn.execute(
        """SELECT extract(epoch FROM child.submitted_at - parent.finished_at) * 1000,
                  extract(epoch FROM child.claimed_at - parent.finished_at) * 1000,
                  extract(epoch FROM intent.prepared_at - child.claimed_at) * 1000,
                  extract(epoch FROM effect.submitted_at - intent.prepared_at) * 1000,
                  extract(epoch FROM child.submitted_at - effect.submitted_at) * 1000
             FROM unnest(%s::bigint[], %s::bigint[]) AS pair(parent_id, child_id)
             JOIN movement_request_nodes parent ON parent.id = pair.parent_id
             JOIN movement_request_nodes child ON child.id = pair.child_id
             JOIN node_intents intent ON intent.node_id = child.id
                                     AND intent.claim_token = child.claim_token
             JOIN qtg_sim.side_effects effect ON effect.idempotency_key = intent.idempotency_key""",
        [[p for p, _ in pairs], [c for _, c in pairs]],
    ).fetchall()
    stages = {name: [float(r[i + 1]) for r in rows] for i, name in enumerate(STAGES)}
    return [float(r[0]) for r in rows], stages


class _Feeder(threading.Thread):
    """Keeps ``target`` load movements open (APPROVED or EXECUTING): every
    FEED_EVERY_S it creates and approves the missing ones; records the count."""

    def __init__(self, dsn: str, target: int) -> None:
        super().__init__(name="load-feeder", daemon=True)
        self.dsn, self.target = dsn, target
        self.stop = threading.Event()
        self.counts: list[int] = []
        self.created = 0
        self.error: BaseException | None = None

    def open_count(self, conn: psycopg.Connection[Any]) -> int:
        return int(
            conn.execute(
                """SELECT count(*) FROM movement_requests
                    WHERE request_state IN ('APPROVED', 'EXECUTING')
                      AND external_id LIKE 'load-%'"""
            ).fetchone()[0]  # type: ignore[index]
        )

    def turning_over(self) -> bool:
        """At its level, and some movements finished (replaced), or failed."""
        if self.error is not None:
            return True
        return (
            self.created > self.target
            and bool(self.counts)
            and self.counts[-1] >= 0.9 * self.target
        )

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                engine.bind(conn)
                batch = 0
                while not self.stop.is_set():
                    open_now = self.open_count(conn)
                    self.counts.append(open_now)
                    if open_now < self.target:
                        batch += 1
                        missing = self.target - open_now
                        engine.create_movements(conn, missing, load_plan(), f"load-{batch}-")
                        self.created += missing
                    self.stop.wait(FEED_EVERY_S)
        except BaseException as exc:  # reported by the run that started it
            self.error = exc


def run(cluster: Cluster, steps: int, log_dir: Path, load: int = LOAD) -> dict[str, Any]:
    dsn = engine.clone(cluster, "qtg_bench_latency")
    load_steps = max(100, steps // 2)
    result: dict[str, Any] = {"steps": steps, "load": load, "load_steps": load_steps}
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        # the parents become observable at once (a 50 ms baseline, no poll floor)
        procs.upsert_lane_baseline(
            "bench_parent", Decimal("0.05"), min_poll_seconds=0, max_poll_seconds=1
        ).one(conn)
        procs.upsert_lane_baseline("bench_child", 60).one(
            conn
        )  # a plan names only lanes with a row
        procs.upsert_lane_baseline(
            "bench_parent_held", HELD_BASELINE_S, max_poll_seconds=HELD_MAX_POLL_S
        ).one(conn)
        procs.upsert_lane_baseline(
            "bench_load", LOAD_BASELINE_S, min_poll_seconds=Decimal("0.25"), max_poll_seconds=2
        ).one(conn)
        engine.create_movements(conn, 2 * steps, two_step_plan(), "lat-")
        engine.create_movements(conn, 2 * load_steps, held_plan(), "held-")
        engine.vacuum_analyze(conn)
        pairs = conn.execute(
            """SELECT parent.id, child.id
                 FROM movement_request_nodes parent
                 JOIN movement_plan_edges edge ON edge.parent_node_id = parent.id
                 JOIN movement_request_nodes child ON child.id = edge.child_node_id
                ORDER BY parent.id"""
        ).fetchall()
        held = pairs[2 * steps :]
        halves = {
            "on": pairs[:steps],
            "off": pairs[steps : 2 * steps],
            "load": held[:load_steps],
            "load_split": held[load_steps:],
        }
        for mode in ("on", "off", "load", "load_split"):
            loaded = mode.startswith("load")
            argv = [PYTHON, "-m", "benchmarks.dispatcher", cluster.runner_dsn(dsn)]
            if mode == "load":
                argv += ["on", "8", "node_dispatcher,node_observer"]
            elif mode == "load_split":
                argv += ["on", "8", "node_dispatcher"]
            else:
                argv += [mode]
            feeder = _Feeder(dsn, load) if loaded and load else None
            if feeder:
                load_before = _load_movements_finished(conn)
                feeder.start()
            child = spawn(
                f"latency-dispatcher-{mode}",
                argv,
                runner_env(cluster.runner_dsn(dsn)),
                log_dir,
            )
            # one process per worker: the observer in a process of its own
            observer = (
                spawn(
                    "latency-observer-load_split",
                    [*argv[:-1], "node_observer"],
                    runner_env(cluster.runner_dsn(dsn)),
                    log_dir,
                )
                if mode == "load_split"
                else None
            )
            children = [child] if observer is None else [child, observer]
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
                    children,
                )
                if feeder:
                    # the load at its level and turning over: movements finishing, new ones fed
                    wait_for(
                        feeder.turning_over,
                        300,
                        "the load to turn over",
                        0.2,
                        children,
                    )
                    if feeder.error is not None:
                        raise feeder.error
                    feeder.counts.clear()
                else:
                    time.sleep(1.5)  # let the dispatcher finish its last tick and sleep
                todo = halves[mode]
                rng = random.Random(4)
                load_done = _load_nodes_finished(conn) if feeder else 0
                t0 = time.monotonic()
                reports: list[float] = []  # each parent's report and commit, round trip ms
                for parent, kid in todo:
                    if loaded:
                        reports.append(_complete_held_parent(conn, parent))
                    else:
                        reports.append(_complete_parent(conn, parent))
                    if mode != "off":
                        # the bench's own polls take CPU from the runner and the server: under
                        # load, where every core is busy, it polls less often (the latency is
                        # read from the engine's timestamps, not from when the bench saw it)
                        every = POLL_LOAD_S if loaded else POLL_S
                        time.sleep(2 * every)
                        wait_for(
                            lambda kid=kid: conn.execute(
                                "SELECT node_state = 'SUBMITTED'"
                                " FROM movement_request_nodes WHERE id = %s",
                                [kid],
                            ).fetchone()[0],  # type: ignore[index]
                            30,
                            "a child to be submitted",
                            every,
                            children,
                        )
                    else:
                        time.sleep(PACE_OFF_S * rng.uniform(0.5, 1.5))
                kids = [k for _, k in todo]
                # submitted, whatever came after (a child's lane first polls after 42 s,
                # which a slow measure under load outlasts)
                wait_for(
                    lambda kids=kids: conn.execute(  # type: ignore[misc]
                        "SELECT count(*) = 0 FROM movement_request_nodes"
                        " WHERE id = ANY(%s) AND submitted_at IS NULL",
                        [kids],
                    ).fetchone()[0],  # type: ignore[index]
                    120,
                    "every child to be submitted",
                    0.05,
                    children,
                )
                elapsed = time.monotonic() - t0
                load_rate = (_load_nodes_finished(conn) - load_done) / elapsed if feeder else 0.0
                if feeder:
                    if feeder.error is not None:
                        raise feeder.error
                    in_flight = list(feeder.counts)
            finally:
                if feeder:
                    feeder.stop.set()
                    feeder.join(30)
                for each in children:
                    each.stop()
            samples, stages = _measure(conn, todo)
            key = {"load": "under_load", "load_split": "under_load_split"}.get(mode, mode)
            result[key] = {
                **percentiles(samples),
                "elapsed_s": round(elapsed, 1),
                "stages_p50_ms": {k: round(statistics.median(v), 3) for k, v in stages.items()},
                # the first stage begins inside this round trip: the report's own
                # statement start; the child cannot be claimed before its COMMIT
                "report_round_trip_ms": {
                    "p50": round(statistics.median(reports), 3),
                    "p99": round(statistics.quantiles(reports, n=100)[98], 3),
                },
                "samples_ms": [round(s, 3) for s in samples],
            }
            if feeder:
                result[key]["in_flight"] = {
                    "min": min(in_flight),
                    "mean": round(statistics.fmean(in_flight)),
                    "max": max(in_flight),
                    "created": feeder.created,
                }
                result[key]["load_nodes_finished_per_s"] = round(load_rate, 1)
                result[key]["load_finished"] = _load_movements_finished(conn) - load_before
    cluster.drop_db("qtg_bench_latency")
    return result


def _load_nodes_finished(conn: psycopg.Connection[Any]) -> int:
    """The load's nodes COMPLETED so far (the load's pace over the measure)."""
    row = conn.execute(
        """SELECT count(*) FROM movement_request_nodes node
             JOIN movement_requests request ON request.id = node.request_id
            WHERE request.external_id LIKE 'load-%' AND node.node_state = 'COMPLETED'"""
    ).fetchone()
    return int(row[0]) if row else 0


def _load_movements_finished(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        """SELECT count(*) FROM movement_requests
            WHERE request_state = 'COMPLETED' AND external_id LIKE 'load-%'"""
    ).fetchone()
    return int(row[0]) if row else 0
