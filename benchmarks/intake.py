"""Case 6 (intake): creating and approving movements on one connection, and the
engine end to end while a producer creates and approves and runners drain.

* Per call: ``create_movement`` then ``approve_movement`` for each movement,
  each call its own transaction, sent in a pipeline (executemany, 1,000 calls a
  round trip): the single-movement path at its fastest.
* Batches: ``create_movements`` (1,000 items a call) then ``approve_movements``
  for the same 1,000, each call its own transaction. The movements name no
  callback receiver (a peer's job notifies nobody either); a second run has
  every movement name one, so each state change writes a callback row too,
  reported beside the first.

Both on one connection: the creator is the bench's admin login, the approver
``qtg_owner`` (SET SESSION AUTHORIZATION between the two calls, so
``session_user`` differs and four eyes holds). The figure is movements created
and approved per second of wall clock from the first call to the last commit.

* End to end: one producer connection creates and approves one-step movements
  on the sim's ``instant`` lane in batches of 1,000 while 2 ``qtg worker
  node_dispatcher`` processes drain them; the figure runs from the producer's
  first call to the last movement's ``finished_at`` (the database clock), beside
  the producer's own rate in that time and case 1's drain-only figure.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import engine
from benchmarks.cluster import Cluster
from benchmarks.procs import QTG, runner_env, spawn, wait_for
from qtg_runner.db import procs

INSTANT_PLAN = {"nodes": [{"key": "step", "executor": "sim", "config": {"lane": "instant"}}]}
BATCH = 1000
RECEIVER = "https://hooks.example/qtg"
"""The callback_url of the movements of the batched path's second run: each
state change then writes a callback row (a movement without one writes none)."""
PIPELINE = 1000
PER_CALL_MAX = 2000  # the per-call path is slow: a sample of it is enough for its rate
DRAIN_TIMEOUT = 300.0
RUNNERS = 2
CONCURRENCY = 8


def _approver(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET SESSION AUTHORIZATION qtg_owner")


def _creator(conn: psycopg.Connection[Any]) -> None:
    conn.execute("RESET SESSION AUTHORIZATION")


def _items(prefix: str, start: int, n: int, receiver: str | None = None) -> list[dict[str, Any]]:
    more = {} if receiver is None else {"callback_url": receiver}
    return [
        {"external_id": f"{prefix}{i}", "amount": 100, "plan": INSTANT_PLAN, **more}
        for i in range(start, start + n)
    ]


def per_call(conn: psycopg.Connection[Any], count: int, prefix: str) -> float:
    """``count`` movements through create_movement + approve_movement; seconds taken."""
    t0 = time.monotonic()
    done = 0
    while done < count:
        n = min(PIPELINE, count - done)
        created = procs.one_each(
            conn,
            [
                procs.create_movement(f"{prefix}{i}", 100, plan=INSTANT_PLAN)
                for i in range(done, done + n)
            ],
        )
        _approver(conn)
        try:
            procs.one_each(conn, [procs.approve_movement(c.movement_id) for c in created])
        finally:
            _creator(conn)
        done += n
    return time.monotonic() - t0


def batched(
    conn: psycopg.Connection[Any],
    count: int,
    prefix: str,
    batch: int = BATCH,
    receiver: str | None = None,
) -> tuple[float, list[float]]:
    """``count`` movements through create_movements + approve_movements, ``batch``
    a call, each naming ``receiver`` as its callback_url when given; seconds
    taken, and each batch's create+approve seconds."""
    t0 = time.monotonic()
    each: list[float] = []
    done = 0
    while done < count:
        n = min(batch, count - done)
        t = time.monotonic()
        created = procs.create_movements(_items(prefix, done, n, receiver)).all(conn)
        _approver(conn)
        try:
            approved = procs.approve_movements([c.movement_id for c in created]).all(conn)
        finally:
            _creator(conn)
        if len(approved) != n or any(a.error_code for a in approved):
            raise RuntimeError(f"approve_movements refused some of the batch: {approved[:3]}")
        each.append(time.monotonic() - t)
        done += n
    return time.monotonic() - t0, each


def _counts(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE request_state = 'APPROVED') FROM movement_requests"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def one_connection(cluster: Cluster, count: int, per_call_count: int) -> dict[str, Any]:
    out: dict[str, Any] = {"movements": count, "per_call_movements": per_call_count}
    for mode in ("per_call", "batched", "batched_receiver"):
        name = f"qtg_bench_intake_{mode}"
        dsn = engine.clone(cluster, name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            engine.bind(conn)
            engine.vacuum_analyze(conn)
            if mode == "per_call":
                seconds = per_call(conn, per_call_count, "pc-")
                n = per_call_count
            elif mode == "batched_receiver":
                seconds, _ = batched(conn, count, "r-", receiver=RECEIVER)
                n = count
            else:
                seconds, each = batched(conn, count, "b-")
                n = count
                out["batch_ms"] = {
                    "p50": round(sorted(each)[len(each) // 2] * 1000, 1),
                    "max": round(max(each) * 1000, 1),
                }
            total, approved = _counts(conn)
        if (total, approved) != (n, n):
            raise RuntimeError(f"{mode}: {total} movements, {approved} approved, expected {n}")
        out[mode] = {"seconds": round(seconds, 3), "per_s": round(n / seconds, 1)}
        cluster.drop_db(name)
    return out


def end_to_end(cluster: Cluster, count: int, log_dir: Path) -> dict[str, Any]:
    name = "qtg_bench_intake_e2e"
    dsn = engine.clone(cluster, name)
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn, autocommit=True) as watch,
    ):
        engine.bind(conn)
        engine.bind(watch)
        engine.vacuum_analyze(conn)
        env = runner_env(cluster.runner_dsn(dsn))
        children = [
            spawn(
                f"intake-e2e-{i}",
                [QTG, "worker", "node_dispatcher", "--concurrency", str(CONCURRENCY)],
                env,
                log_dir,
            )
            for i in range(RUNNERS)
        ]
        try:
            # the runners are up (their heartbeats) before the clock starts
            wait_for(
                lambda: (
                    (watch.execute("SELECT count(*) FROM worker_heartbeats").fetchone() or (0,))[0]
                    >= RUNNERS
                ),
                60,
                "the runners to start",
                0.1,
                children,
            )
            t0_db = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            produce_s, _ = batched(conn, count, "e2e-")

            def remaining() -> int:
                row = watch.execute(
                    "SELECT count(*) FROM movement_requests WHERE request_state <> 'COMPLETED'"
                ).fetchone()
                return int(row[0]) if row else -1

            wait_for(lambda: remaining() == 0, DRAIN_TIMEOUT, "the engine to drain", 0.25, children)
            row = watch.execute(
                """SELECT extract(epoch FROM max(r.finished_at) - %s),
                          count(*) FILTER (WHERE r.request_state = 'COMPLETED'),
                          percentile_cont(0.5) WITHIN GROUP (ORDER BY latency),
                          percentile_cont(0.99) WITHIN GROUP (ORDER BY latency)
                     FROM movement_requests r,
                          LATERAL (SELECT extract(epoch FROM r.finished_at - r.created_at))
                              AS l(latency)""",
                [t0_db],
            ).fetchone()
        finally:
            codes = [child.stop() for child in children]
    cluster.drop_db(name)
    assert row is not None
    wall = float(row[0])
    return {
        "movements": count,
        "runners": RUNNERS,
        "concurrency": CONCURRENCY,
        "completed": int(row[1]),
        "wall_s": round(wall, 3),
        "per_s": round(count / wall, 1),
        "producer_s": round(produce_s, 3),
        "producer_per_s": round(count / produce_s, 1),
        "created_to_finished_s": {"p50": round(float(row[2]), 3), "p99": round(float(row[3]), 3)},
        "exit_codes": codes,
    }


def run(cluster: Cluster, count: int, log_dir: Path) -> dict[str, Any]:
    out = one_connection(cluster, count, min(count, PER_CALL_MAX))
    try:
        out["end_to_end"] = end_to_end(cluster, count, log_dir)
    except Exception as exc:  # the one-connection figures stand without it
        out["error"] = f"end to end: {type(exc).__name__}: {exc}"[:300]
    return out


def report_rows(cases: dict[str, Any], target_per_s: float) -> list[list[str]]:
    """Case 6's lines of the table: each figure beside its target and its peers."""
    c6 = cases.get("intake", {})
    if not c6:
        return []
    if "error" in c6 and "batched" not in c6:
        return [["6", "intake", "could not run", "", "-", str(c6["error"])]]
    rows: list[list[str]] = []
    batched_run, per_call_run = c6.get("batched"), c6.get("per_call")
    if batched_run:
        batch_ms = c6.get("batch_ms", {})
        beside = [f"{c6['movements']:,} movements, {BATCH:,} a call"]
        if batch_ms:
            beside.append(f"create+approve of one batch p50 {batch_ms['p50']:,.0f} ms")
        if per_call_run:
            beside.append(f"{batched_run['per_s'] / per_call_run['per_s']:.1f}x the per-call path")
        receiving = c6.get("batched_receiver")
        if receiving:
            beside.append(
                f"each naming a callback receiver (a callback row a state): "
                f"{receiving['per_s']:,.0f}/s"
            )
        ok = batched_run["per_s"] >= target_per_s
        rows.append(
            [
                "6",
                "create_movements + approve_movements, 1 connection: movements/s",
                f"{batched_run['per_s']:,.0f}",
                f">= {target_per_s:,.0f}",
                "HOLDS" if ok else "MISSED",
                "; ".join(beside),
            ]
        )
    if per_call_run:
        rows.append(
            [
                "6",
                "create_movement + approve_movement (per call), 1 connection: movements/s",
                f"{per_call_run['per_s']:,.0f}",
                "(reference)",
                "-",
                f"{c6['per_call_movements']:,} movements, {PIPELINE:,} calls a round trip",
            ]
        )
    e2e = c6.get("end_to_end")
    if e2e and "per_s" in e2e:
        drain = [
            r["per_s"]
            for r in cases.get("throughput", {}).get("engine", [])
            if r.get("processes") == RUNNERS and "per_s" in r
        ]
        line = (
            f"producer alone in that time {e2e['producer_per_s']:,.0f}/s;"
            f" created -> finished p50/p99 {e2e['created_to_finished_s']['p50']:.1f} /"
            f" {e2e['created_to_finished_s']['p99']:.1f} s"
        )
        if drain:
            line += f"; drain only (case 1, {RUNNERS} runners): {drain[0]:,.0f}/s"
        rows.append(
            [
                "6",
                f"end to end: 1 producer (batches) + {RUNNERS} runners draining: movements/s",
                f"{e2e['per_s']:,.0f}",
                "(reference)",
                "-",
                line,
            ]
        )
    elif "error" in c6:
        rows.append(["6", "end to end", "could not run", "", "-", str(c6["error"])])
    return rows
