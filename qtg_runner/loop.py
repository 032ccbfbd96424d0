"""The worker loop: one skeleton for every worker, as the seed describes.

One tick, for the process's network:
  1. upsert this instance's heartbeat and commit it (best effort: a failing
     heartbeat is logged and never breaks the worker); while batches run back
     to back on a backlog, once per interval;
  2. run the worker's batch, which returns how many rows it processed; a batch
     that runs longer than the interval beats again every interval while it
     runs, since recovery takes the claims of a worker whose heartbeat stops
     (two expected ticks) as the claims of a dead one (a batch running for ten
     intervals says so in the heartbeat's last_error);
  3. on success reset the consecutive-error counter; on an operational error
     (database, network, executor) count it and back off exponentially, to a
     60 s ceiling;
  4. sleep ``interval +- jitter`` (or the backoff; or not at all when a
     worker that drains a queue found work in it), waking early when a
     notification for this worker's kind of work arrives or the process stops
     (a woken tick skips step 1 when the last beat is under half an interval
     old: the notified work is claimed at once).

Anything else a batch raises (a bug) is not an operational error: it ends the
loop, and the supervisor applies the worker's tier (core: fail fast; sidecar:
log and keep the rest running).

A worker may run several such loops in one process (WorkerEntry.loops; the
dispatcher runs two), as one instance: they share its heartbeat row and its
claims, and a notification wakes one of them (WakeGroup), so new work does not
wait for a batch in progress.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from qtg_runner.config import NetworkMode
from qtg_runner.db import procs
from qtg_runner.executors.base import Executor, ExecutorError, NodeWork
from qtg_runner.failpoints import crash_point
from qtg_runner.limits import ReportLimits
from qtg_runner.log import event

R = TypeVar("R")
Tier = Literal["core", "sidecar"]
BACKOFF_CEILING_SECONDS = 60.0
OPERATIONAL_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.Error,
    PoolTimeout,
    ExecutorError,
    OSError,
    TimeoutError,
)


@dataclass
class WorkerContext:
    """What a batch function gets: the network-bound pool and the executors."""

    network: NetworkMode
    pool: AsyncConnectionPool[Any]
    executors: dict[str, Executor]
    instance_id: str
    max_concurrency: int = 8
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    limits: ReportLimits = field(default_factory=ReportLimits)
    """The bounds the workers cut their reports to (the network's report_limits)."""

    def worker_id(self, worker_name: str) -> str:
        return f"{worker_name}@{self.instance_id}"

    def executor_for(self, work: NodeWork) -> Executor | None:
        """The node's executor, or None when this runner does not carry it (each
        worker reports that through its own procedure)."""
        return self.executors.get(work.executor_key)

    def log(self, level: int, name: str, worker: str, /, **fields: Any) -> None:
        """``event`` of a worker of this network: the network and the worker,
        then ``fields``."""
        event(level, name, network=self.network, worker=worker, **fields)

    async def one(self, call: procs.Call[R]) -> R:
        """The one row of ``call``, on a connection of its own from the pool."""
        async with self.pool.connection() as conn:
            return await call.aone(conn)

    async def all(self, call: procs.Call[R]) -> list[R]:
        """The rows of ``call``, on a connection of its own from the pool."""
        async with self.pool.connection() as conn:
            return await call.aall(conn)


BatchFunction = Callable[[WorkerContext, str], Awaitable[int]]


def counting_batch(
    call: Callable[[str], procs.Call[int]], done: str, worker: str, level: int = logging.INFO
) -> BatchFunction:
    """The batch of a sidecar whose procedure does the work and says how much
    it did (``call`` of the worker id): logged as ``done`` when it did any."""

    async def batch(ctx: WorkerContext, worker_id: str) -> int:
        count = await ctx.one(call(worker_id))
        if count:
            ctx.log(level, done, worker, count=count)
        return count

    return batch


@dataclass(frozen=True)
class WorkerEntry:
    """A worker is a batch function plus its registration: interval, jitter, tier."""

    name: str
    batch: BatchFunction
    interval: float
    jitter: float
    tier: Tier
    wake_on: frozenset[str] = frozenset()
    """Notification kinds (see notify_work) that wake this worker early."""
    drains: bool = True
    """Whether the batch takes work off a queue (claims, an outbox): then a batch
    that did some goes again at once, as more may be waiting. A periodic check
    (health, balances, reapers that look at the same rows each round) does not
    drain anything: it runs at its interval whatever its batch returns, so an
    idle runner never calls its providers back to back."""
    loops: int = 1
    """Loops of this worker in one process, each running the skeleton on its
    own (one tick after another), all as the same worker instance (one
    heartbeat row, one claimer). With more than one, new work does not wait
    for the end of a batch in progress: a notification wakes a loop that
    sleeps (see WakeGroup)."""


def backoff_delay(consecutive_errors: int, interval: float) -> float:
    """Exponential backoff after ``consecutive_errors`` failures, capped at 60 s."""
    base = max(interval, 0.5)
    return float(min(BACKOFF_CEILING_SECONDS, base * 2 ** max(consecutive_errors - 1, 0)))


def jittered(interval: float, jitter: float, rng: random.Random) -> float:
    return max(0.0, interval + rng.uniform(-jitter, jitter))


Sleeper = Callable[[float, asyncio.Event, asyncio.Event], Awaitable[bool | None]]
"""Sleeps (delay, stop, wake); answers True when a notification cut the sleep short."""


async def wait_for_wake(delay: float, stop: asyncio.Event, wake: asyncio.Event) -> bool:
    """Sleep ``delay`` seconds, returning early when ``stop`` or ``wake`` is set;
    True when ``wake`` was."""
    if stop.is_set() or delay <= 0:
        return False
    if not wake.is_set():
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
        try:
            await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
    woken = wake.is_set()
    wake.clear()
    return woken


class WakeGroup:
    """The early wake-up of a worker's loops. A notification wakes one loop that
    sleeps, the one asleep longest: the others sleep on, so one piece of new
    work costs one claim. When none sleeps (every loop is in a batch), each
    goes again once its batch ends, at once rather than after its interval:
    the work may have come after its claim.

    ``set`` is what Wakeup calls; loop ``i`` runs with ``event(i)`` and
    ``sleeper(i)`` (wait_for_wake that says the loop sleeps)."""

    def __init__(self, loops: int = 1) -> None:
        if loops < 1:
            raise ValueError(f"a worker runs at least one loop, not {loops}")
        self._events = [asyncio.Event() for _ in range(loops)]
        self._sleeping: list[int] = []  # loops asleep, the longest asleep first

    def __len__(self) -> int:
        return len(self._events)

    def set(self) -> None:
        if self._sleeping:
            self._events[self._sleeping.pop(0)].set()
            return
        for wake in self._events:
            wake.set()

    def event(self, loop: int) -> asyncio.Event:
        return self._events[loop]

    def sleeper(self, loop: int) -> Sleeper:
        """wait_for_wake for loop ``loop``, which counts as asleep while it
        waits with a delay."""

        async def sleeping(delay: float, stop: asyncio.Event, wake: asyncio.Event) -> bool:
            if delay <= 0:
                return await wait_for_wake(delay, stop, wake)
            self._sleeping.append(loop)
            try:
                return await wait_for_wake(delay, stop, wake)
            finally:
                if loop in self._sleeping:
                    self._sleeping.remove(loop)

        return sleeping


async def heartbeat(
    ctx: WorkerContext,
    entry: WorkerEntry,
    expected_interval: float,
    processed: int,
    errors: int,
    last_error: str | None,
) -> None:
    """Upsert this instance's heartbeat row; never raises."""
    try:
        async with ctx.pool.connection(timeout=5) as conn:
            await procs.heartbeat(
                entry.name,
                ctx.instance_id,
                entry.tier,
                max(expected_interval, 0.1),
                processed,
                errors,
                last_error,
                socket.gethostname(),
                os.getpid(),
            ).aone(conn)
    except Exception as exc:  # a failing heartbeat must never break the worker
        ctx.log(
            logging.WARNING, "heartbeat_failed", entry.name, error=f"{type(exc).__name__}: {exc}"
        )


LONG_BATCH_INTERVALS = 10
"""A batch running longer than this many intervals says so in its heartbeat's
last_error (worker_status shows it), while it keeps the worker alive."""


async def _beating(
    batch: Awaitable[int], interval: float, beat: Callable[[str | None], Awaitable[None]]
) -> int:
    """``batch``'s result; while it runs, ``beat`` every ``interval`` seconds, with
    a note once the batch has run for LONG_BATCH_INTERVALS intervals."""
    clock = asyncio.get_running_loop().time
    started = clock()
    task = asyncio.ensure_future(batch)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=max(interval, 0.1))
            if done:
                return task.result()
            running = clock() - started
            long = running >= LONG_BATCH_INTERVALS * interval
            await beat(f"batch running for {running:.0f} s" if long else None)
    finally:
        task.cancel()  # only ever pending when this wait itself was cancelled


async def _beat_in_batch(
    ctx: WorkerContext,
    entry: WorkerEntry,
    processed: int,
    errors: int,
    last_error: str | None,
    note: str | None,
) -> None:
    """A heartbeat while a batch runs (see _beating)."""
    expected = entry.interval + entry.jitter
    await heartbeat(ctx, entry, expected, processed, errors, note or last_error)


async def run_worker(
    entry: WorkerEntry,
    ctx: WorkerContext,
    wake: asyncio.Event | None = None,
    sleep: Sleeper = wait_for_wake,
    rng: random.Random | None = None,
) -> None:
    """Tick ``entry`` until ``ctx.stopping`` is set. Returns normally on stop."""
    wake = wake or asyncio.Event()
    rng = rng or random.Random()
    worker_id = ctx.worker_id(entry.name)
    errors = 0
    processed = 0
    last_error: str | None = None
    delay = entry.interval
    ctx.log(
        logging.INFO,
        "worker_started",
        entry.name,
        instance=ctx.instance_id,
        tier=entry.tier,
        interval=entry.interval,
    )
    clock = asyncio.get_running_loop().time
    last_beat = float("-inf")
    woken = False
    try:
        while not ctx.stopping.is_set():
            # every tick after a full sleep beats; back-to-back batches (draining
            # a backlog) beat once per interval, so a busy worker's heartbeat
            # costs no extra round trip per batch; a tick a notification woke
            # beats only when the last beat is half an interval old, and then
            # after its batch, so the new work is claimed without a commit first
            # (the beats stay at most an interval and a sleep apart, as on a
            # backlog)
            since = clock() - last_beat
            beat = (delay > 0 and not (woken and since < entry.interval / 2)) or (
                since >= entry.interval
            )
            expected = max(delay, entry.interval + entry.jitter)
            if beat and not woken:
                last_beat = clock()
                await heartbeat(ctx, entry, expected, processed, errors, last_error)
            try:
                crash_point(entry.name)
                processed = await _beating(
                    entry.batch(ctx, worker_id),
                    entry.interval,
                    functools.partial(_beat_in_batch, ctx, entry, processed, errors, last_error),
                )
            except OPERATIONAL_ERRORS as exc:
                errors += 1
                processed = 0
                last_error = f"{type(exc).__name__}: {exc}"[:500]
                delay = backoff_delay(errors, entry.interval)
                ctx.log(
                    logging.WARNING,
                    "batch_failed",
                    entry.name,
                    consecutive_errors=errors,
                    backoff_s=delay,
                    error=last_error,
                )
            else:
                if errors:
                    ctx.log(logging.INFO, "worker_recovered", entry.name, after_errors=errors)
                errors = 0
                last_error = None
                # work was taken off a queue: more may be waiting, so go again at once
                again = processed > 0 and entry.drains
                delay = 0.0 if again else jittered(entry.interval, entry.jitter, rng)
            if beat and woken:
                last_beat = clock()
                await heartbeat(ctx, entry, expected, processed, errors, last_error)
            woken = bool(await sleep(delay, ctx.stopping, wake))
    finally:
        ctx.log(logging.INFO, "worker_stopped", entry.name, instance=ctx.instance_id)
