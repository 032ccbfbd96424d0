"""The worker loop (qtg_runner.loop.run_worker), in-process, against a real PostgreSQL.

What every worker relies on:
  * an operational error (database, network, executor) is counted and backs off
    exponentially, doubling up to a 60 s ceiling and staying there; the first
    success brings back the normal jittered interval;
  * the heartbeat row says so: consecutive_errors, last_error, and an expected
    interval that grows with the backoff (so a backing-off worker is not stalled);
  * a failing heartbeat never breaks the loop;
  * anything else (a bug) escapes run_worker, for the supervisor's tier policy;
  * a notification wakes one of a worker's loops, the one asleep longest; when
    none sleeps, every loop goes again once its batch ends.

The injected ``sleep`` records each delay instead of sleeping and stops the loop
after a set number of ticks, so no test waits for real time.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from engine import SIM_SCHEMA, bind
from psycopg_pool import AsyncConnectionPool

from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.loop import WakeGroup, WorkerContext, WorkerEntry, run_worker

INTERVAL, JITTER = 1.0, 0.2


@pytest.fixture(autouse=True)
def _plain_runner_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's connection options come from the test only."""
    monkeypatch.delenv("PGOPTIONS", raising=False)


def runner_pool(db: Any) -> AsyncConnectionPool[Any]:
    """A pool as a runner opens it: a runner login of testnet, bound to testnet."""
    conninfo = bound_conninfo(db.runner_dsn("testnet"), "testnet", "loop-test")
    return open_pool(conninfo, name="loop-test")


def stop_after(
    ticks: int, each: Callable[[float], Awaitable[None]] | None = None
) -> tuple[list[float], Callable[[float, asyncio.Event, asyncio.Event], Awaitable[None]]]:
    """A sleep that records its delays and stops the loop after ``ticks`` of them."""
    delays: list[float] = []

    async def sleep(delay: float, stop: asyncio.Event, wake: asyncio.Event) -> None:
        delays.append(delay)
        if each is not None:
            await each(delay)
        if len(delays) >= ticks:
            stop.set()

    return delays, sleep


def test_operational_errors_back_off_to_a_60s_ceiling_and_one_success_restores_the_interval(
    db: Any,
) -> None:
    failures = 9
    conn = bind(db.connect())
    seen: list[tuple[Any, ...]] = []  # the heartbeat row as each tick left it

    async def read_heartbeat(_delay: float) -> None:
        row = conn.execute(
            "SELECT w.consecutive_errors, w.last_error, w.expected_interval_seconds, s.status"
            " FROM worker_heartbeats w JOIN worker_status s USING (worker_name, instance_id)"
            " WHERE w.worker_name = 'flaky'"
        ).fetchone()
        assert row is not None
        seen.append(row)

    calls = 0

    async def batch(ctx: WorkerContext, worker_id: str) -> int:
        nonlocal calls
        calls += 1
        if calls <= failures:
            raise psycopg.OperationalError(f"connection lost #{calls}")
        return 0

    entry = WorkerEntry("flaky", batch, interval=INTERVAL, jitter=JITTER, tier="core")
    delays, sleep = stop_after(failures + 3, read_heartbeat)

    async def scenario() -> None:
        async with runner_pool(db) as pool:
            ctx = WorkerContext("testnet", pool, {}, "loop-test:1")
            await run_worker(entry, ctx, sleep=sleep, rng=random.Random(7))

    asyncio.run(scenario())

    assert calls == failures + 3
    assert delays[:failures] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert all(INTERVAL - JITTER <= d <= INTERVAL + JITTER for d in delays[failures:]), delays
    # tick i heartbeats what ticks 0..i-1 did: i errors in a row, then 0 after the success
    assert [row[0] for row in seen] == [*range(failures + 1), 0, 0]
    assert [row[1] for row in seen] == [
        None,
        *(f"OperationalError: connection lost #{i}" for i in range(1, failures + 1)),
        None,
        None,
    ]
    assert [row[3] for row in seen] == ["healthy", *["erroring"] * failures, "healthy", "healthy"]
    # the expected interval follows the backoff, so stalled_workers waits for it
    assert seen[failures][2] == timedelta(seconds=60)
    assert seen[-1][2] == timedelta(seconds=INTERVAL + JITTER)


@pytest.mark.parametrize("how", ["pool closed", "heartbeat refused"])
def test_a_failing_heartbeat_does_not_break_the_loop(
    db: Any, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    async def batch(ctx: WorkerContext, worker_id: str) -> int:
        nonlocal calls
        calls += 1
        if how == "heartbeat refused":  # the database itself is fine
            async with ctx.pool.connection() as conn:
                await conn.execute("SELECT clock()")
        return 0

    if how == "heartbeat refused":
        db.connect().execute(
            "REVOKE EXECUTE ON FUNCTION testnet.heartbeat(text, text, text, numeric, integer,"
            " integer, text, text, integer) FROM qtg_testnet_runner"
        )
    entry = WorkerEntry("steady", batch, interval=INTERVAL, jitter=JITTER, tier="core")
    delays, sleep = stop_after(3)

    async def scenario() -> None:
        pool = runner_pool(db)  # "pool closed": never opened
        if how == "heartbeat refused":
            await pool.open(wait=True)
        try:
            await run_worker(entry, WorkerContext("testnet", pool, {}, "loop-test:2"), sleep=sleep)
        finally:
            await pool.close()

    with caplog.at_level(logging.WARNING, logger="qtg"):
        asyncio.run(scenario())

    assert calls == 3
    assert all(INTERVAL - JITTER <= d <= INTERVAL + JITTER for d in delays), delays
    failed = [r.getMessage() for r in caplog.records if "event=heartbeat_failed" in r.getMessage()]
    assert len(failed) == 3, failed
    assert all("worker=steady" in message for message in failed)
    rows = bind(db.connect()).execute("SELECT count(*) FROM worker_heartbeats").fetchone()
    assert rows == (0,)


def test_a_bug_in_a_batch_escapes_run_worker(db: Any) -> None:
    calls = 0

    async def batch(ctx: WorkerContext, worker_id: str) -> int:
        nonlocal calls
        calls += 1
        raise RuntimeError("a bug, not an outage")

    entry = WorkerEntry("buggy", batch, interval=INTERVAL, jitter=JITTER, tier="sidecar")
    delays, sleep = stop_after(5)

    async def scenario() -> None:
        async with runner_pool(db) as pool:
            await run_worker(entry, WorkerContext("testnet", pool, {}, "loop-test:3"), sleep=sleep)

    with pytest.raises(RuntimeError, match="a bug, not an outage"):
        asyncio.run(scenario())
    assert calls == 1
    assert delays == [], "the loop went on after a bug"
    # it did tick (heartbeat) before the batch raised
    row = (
        bind(db.connect())
        .execute(
            "SELECT ticks, consecutive_errors FROM worker_heartbeats WHERE worker_name = 'buggy'"
        )
        .fetchone()
    )
    assert row == (1, 0)


def test_a_tick_a_notification_woke_claims_its_work_before_it_beats(db: Any) -> None:
    # the heartbeat's commit would come between the notification and the claim:
    # a woken tick runs its batch first and beats after it (still at most an
    # interval apart); a tick after a full sleep beats first, as always
    reader = bind(db.connect())
    seen: list[int] = []

    def beats() -> int:
        row = reader.execute(
            "SELECT coalesce(max(ticks), 0) FROM worker_heartbeats WHERE worker_name = 'woken'"
        ).fetchone()
        return int(row[0]) if row else 0

    async def batch(ctx: WorkerContext, worker_id: str) -> int:
        seen.append(beats())
        return 0

    # an interval shorter than a batch, so every tick is due to beat
    entry = WorkerEntry("woken", batch, interval=0.001, jitter=0.0, tier="core")
    sleeps = 0

    async def woken_sleep(delay: float, stop: asyncio.Event, wake: asyncio.Event) -> bool:
        nonlocal sleeps
        sleeps += 1
        if sleeps >= 4:
            stop.set()
        return True  # every sleep cut short by a notification

    async def scenario() -> None:
        async with runner_pool(db) as pool:
            ctx = WorkerContext("testnet", pool, {}, "loop-test:1")
            await run_worker(entry, ctx, sleep=woken_sleep, rng=random.Random(7))

    asyncio.run(scenario())

    # the first tick (no notification) beat before its batch; each woken one after
    assert seen == [1, 1, 2, 3]
    assert beats() == 4


def test_a_notification_wakes_the_loop_asleep_longest_and_with_none_asleep_every_loop() -> None:
    async def scenario() -> list[Any]:
        group = WakeGroup(2)
        stop = asyncio.Event()
        seen: list[Any] = []

        def asleep(loop: int) -> asyncio.Task[bool | None]:
            return asyncio.ensure_future(group.sleeper(loop)(3600, stop, group.event(loop)))

        first = asleep(1)
        await asyncio.sleep(0)
        second = asleep(0)
        await asyncio.sleep(0)
        group.set()  # wakes loop 1, asleep longest; loop 0 sleeps on
        await asyncio.sleep(0.01)
        seen.append((first.done() and first.result(), second.done()))
        group.set()  # wakes loop 0
        seen.append(await asyncio.wait_for(second, 5))
        # none asleep (both in a batch): each goes again after its batch, at once
        group.set()
        seen.append([group.event(0).is_set(), group.event(1).is_set()])
        seen.append(await asyncio.wait_for(group.sleeper(0)(3600, stop, group.event(0)), 5))
        return seen

    assert asyncio.run(scenario()) == [(True, False), True, [True, True], True]
    with pytest.raises(ValueError, match="at least one loop"):
        WakeGroup(0)


class CountingExecutor:
    """An executor whose every call is counted: health() answers HEALTHY."""

    key = "sim"
    has_side_effect = True
    deduplicated_by = "nothing is sent"

    def __init__(self) -> None:
        self.calls = 0

    async def health(self) -> Any:
        from qtg_runner.executors.base import HealthResult, HealthStatus

        self.calls += 1
        return HealthResult(HealthStatus.HEALTHY, {})


def count_row_writes(admin: Any) -> None:
    """A counter of the rows written to each table of the network from now on
    (a trigger on each, run as the test's superuser): the test's own means of
    counting, left in its database."""
    admin.execute(
        """
        CREATE TABLE public.idle_writes (tbl text PRIMARY KEY, n bigint NOT NULL);
        CREATE FUNCTION public.count_write() RETURNS trigger LANGUAGE plpgsql
        SECURITY DEFINER SET search_path = public AS $$
        BEGIN
            INSERT INTO idle_writes VALUES (TG_TABLE_NAME, 1)
            ON CONFLICT (tbl) DO UPDATE SET n = idle_writes.n + 1;
            RETURN NULL;
        END $$;
        """
    )
    tables = admin.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'testnet'"
    ).fetchall()
    for (table,) in tables:
        admin.execute(
            f'CREATE TRIGGER count_write AFTER INSERT OR UPDATE OR DELETE ON testnet."{table}"'
            " FOR EACH ROW EXECUTE FUNCTION public.count_write()"
        )


def test_an_idle_runner_calls_its_providers_only_at_the_health_interval(db: Any) -> None:
    """With no movement in flight, every registered worker of `qtg run`
    sleeps its interval after each batch, whatever its batch returned: a
    periodic check (executor_health answers how many executors it checked)
    is not a queue with more waiting. Counted over each worker's ticks: the
    only external calls are health checks, one per executor per
    executor_health interval, and the only rows written each worker's
    heartbeat and the health reports, one a tick."""
    from qtg_runner.workers import REGISTRY

    ticks = 4
    executor = CountingExecutor()
    admin = bind(db.connect())
    procs.register_executor("sim", True, SIM_SCHEMA, "counted").one(admin)
    count_row_writes(admin)
    slept: dict[str, list[float]] = {}

    async def scenario() -> None:
        async with runner_pool(db) as pool:
            for entry in REGISTRY:
                delays, sleep = stop_after(ticks)
                ctx = WorkerContext("testnet", pool, {"sim": executor}, "idle-test:1")  # type: ignore[dict-item]
                await run_worker(entry, ctx, sleep=sleep, rng=random.Random(3))
                slept[entry.name] = delays

    asyncio.run(scenario())
    for entry in REGISTRY:
        # a worker that drains a queue may have found the set-up's audit row at
        # its first tick; after it, every worker sleeps its interval
        delays = slept[entry.name][1:] if entry.drains else slept[entry.name]
        # the interval, neither at once nor a backoff after an error
        assert all(
            entry.interval - entry.jitter <= d <= entry.interval + entry.jitter for d in delays
        ), (entry.name, delays)
    health = next(e for e in REGISTRY if e.name == "executor_health")
    assert executor.calls == ticks  # one health() a tick, a tick an interval
    per_minute = executor.calls / sum(slept["executor_health"]) * 60
    assert per_minute <= 60 / (health.interval - health.jitter)
    # rows written: a few a worker's tick, whatever the ticks returned: so many
    # per interval, not a figure that grows with how fast the loops can go
    writes = dict(admin.execute("SELECT tbl, n FROM public.idle_writes").fetchall())
    most = {
        "worker_heartbeats": (ticks + 1) * len(REGISTRY),  # a beat a tick, and the stop
        "executor_health": ticks,  # a report a tick (one executor)
        "balance_reads": ticks,  # the snapshot's read a tick (no account to read)
        "pipeline_rollups": ticks * 5,  # the rollup's rows, a tick
        "audit_batches": 1,  # the set-up's audit row, promoted once
        "audit_log": 1,
        "audit_chain_head": 1,
    }
    assert {t: n for t, n in writes.items() if n > most.get(t, 0)} == {}, writes
