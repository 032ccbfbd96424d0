"""Runner start-up and the supervisor.

``Runtime`` opens the network-bound pool as the runner's own login, after
check_deployment (qtg_runner.deploy) made sure that login is a member of qtg_<network>_runner
(never a superuser) and that every executor the runner carries is registered
as it is (same has_side_effect, same node config schema; registering is the
admin's deploy step, `qtg executors register`); either check failing is a
DeployError, which `qtg run` reports as one line and exit 1. Then it reads
the bounds its reports are cut to (report_limits) and builds the worker
context. ``supervise`` runs the chosen workers in one
asyncio.TaskGroup:

  core workers (node_dispatcher, node_observer, node_recovery) fail fast: a
  crash stops every other worker and the process exits 1;
  sidecars (every other worker: callback_dispatcher, audit_outbox_promoter,
  executor_health, expiration_checker, the reapers, ...) are isolated: a crash
  is logged with its traceback and the others keep running and beating. The
  crashed sidecar's heartbeat is left live, so the stalled_workers view shows
  it within two intervals.

A stop (SIGTERM, SIGINT, or a core crash) sets the stop event: every loop
finishes its current batch (a dispatcher finishes the submits it started, so
nothing is left claimed and unreported beyond what recovery resolves from the
intent) and marks its heartbeat not live. A batch still running after
STOP_GRACE_SECONDS (a hung external call) is cancelled; recovery resolves
what it leaves. Exit code 0 after a signal, 1 after a core crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from qtg_runner.config import NetworkMode
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.deploy import check_deployment
from qtg_runner.executors.base import Executor
from qtg_runner.executors.registry import SHIPPED, build
from qtg_runner.limits import ReportLimits, read_report_limits
from qtg_runner.log import event
from qtg_runner.loop import WakeGroup, WorkerContext, WorkerEntry, run_worker
from qtg_runner.signers import Signer
from qtg_runner.wakeup import Wakeup


def new_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def pool_connections(max_concurrency: int) -> int:
    """The most connections one runtime opens: its two pools at their size
    (Runtime.open) and the notification listener's own connection."""
    return (max_concurrency + 4) + (max_concurrency + 2) + 1


async def warn_if_over_connection_limit(
    conn: psycopg.AsyncConnection[Any], network: str, needed: int
) -> int | None:
    """Say at start when this runtime's pools may need more connections than its
    login's connection limit leaves (the server refuses the ones past it, so a
    pool would wait and its workers stall): the limit, the login's sessions
    already open, and what this one may open. Returns the room left, or None
    when the login has no limit."""
    row = await (
        await conn.execute(
            """SELECT r.rolconnlimit,
                      (SELECT count(*) FROM pg_stat_activity a WHERE a.usename = session_user)
                 FROM pg_roles r WHERE r.rolname = session_user"""
        )
    ).fetchone()
    if row is None or int(row[0]) < 0:
        return None
    limit, open_now = int(row[0]), int(row[1])
    room = limit - open_now + 1  # this connection closes before the pools open
    if needed > room:
        event(
            logging.WARNING,
            "connection_limit_short",
            network=network,
            login_limit=limit,
            sessions_open=open_now - 1,
            pools_may_open=needed,
            advice="lower --concurrency, run fewer processes as this login, or give each "
            "process a runner login of its own (qtg runner add)",
        )
    return room


@dataclass
class Runtime:
    network: NetworkMode
    conninfo: str
    pool: AsyncConnectionPool[Any]
    side_pool: AsyncConnectionPool[Any]
    executors: dict[str, Executor]
    instance_id: str
    limits: ReportLimits = field(default_factory=ReportLimits)

    @classmethod
    async def open(
        cls,
        dsn: str,
        network: NetworkMode,
        *,
        name: str = "qtg-runner",
        max_concurrency: int = 8,
        env: Mapping[str, str] | None = None,
        signers: Mapping[str, Signer] | None = None,
    ) -> Runtime:
        """Open the runtime over ``dsn``, a runner login's DSN (used as given);
        its executors' settings from ``env`` and ``signers`` (executors.registry.build).

        The login and the registrations are checked on a connection of their
        own first, so a wrong credential or deployment fails at once instead of
        after a pool's connect timeout."""
        conninfo = bound_conninfo(dsn, network, name)
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            await check_deployment(conn, network, SHIPPED)
            limits = await read_report_limits(conn)
            await warn_if_over_connection_limit(conn, network, pool_connections(max_concurrency))
        # sizes as pool_connections says
        pool = open_pool(conninfo, name=f"{name}-engine", min_size=1, max_size=max_concurrency + 4)
        side_pool = open_pool(
            conninfo, name=f"{name}-executors", min_size=1, max_size=max_concurrency + 2
        )
        await pool.open(wait=True, timeout=30)
        try:
            await side_pool.open(wait=True, timeout=30)
        except BaseException:
            await pool.close()
            raise
        executors = build(side_pool, network, env, signers)
        return cls(network, conninfo, pool, side_pool, executors, new_instance_id(), limits)

    def context(self, max_concurrency: int = 8) -> WorkerContext:
        return WorkerContext(
            self.network,
            self.pool,
            self.executors,
            self.instance_id,
            max_concurrency=max_concurrency,
            limits=self.limits,
        )

    async def close(self) -> None:
        await self.pool.close()
        await self.side_pool.close()


STOP_GRACE_SECONDS = 30.0


async def _mark_stopped(ctx: WorkerContext, entry: WorkerEntry) -> None:
    with contextlib.suppress(Exception):
        async with ctx.pool.connection(timeout=5) as conn:
            await procs.worker_stopped(entry.name, ctx.instance_id).aone(conn)


async def _run_entry(
    entry: WorkerEntry, ctx: WorkerContext, wake: WakeGroup, crashed: list[str]
) -> None:
    """Run one worker's loops under its tier's policy; once they have all
    ended, and none crashed, mark the instance stopped. Never raises but for
    cancellation."""

    async def one(loop: int) -> bool:
        try:
            await run_worker(entry, ctx, wake.event(loop), wake.sleeper(loop))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            tier_event = "core_worker_crashed" if entry.tier == "core" else "sidecar_crashed"
            event(
                logging.CRITICAL if entry.tier == "core" else logging.ERROR,
                tier_event,
                network=ctx.network,
                worker=entry.name,
                loop=loop,
                error=f"{type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(),
            )
            if entry.tier == "core":
                if entry.name not in crashed:
                    crashed.append(entry.name)
                ctx.stopping.set()  # fail fast: every other loop stops after its batch
            # a crashed sidecar stays live in worker_heartbeats: it shows as stalled
            return False
        return True

    # the instance is stopped only when its last loop is: until then its
    # claims are those of a live worker
    ended = await asyncio.gather(*(one(loop) for loop in range(len(wake))))
    if all(ended):
        await _mark_stopped(ctx, entry)


async def _bound_stop(ctx: WorkerContext, tasks: list[asyncio.Task[None]]) -> None:
    """Once a stop is asked, give the workers STOP_GRACE_SECONDS, then cancel.
    If every worker ends by itself (only crashed sidecars were running), stop."""
    stop_asked = asyncio.ensure_future(ctx.stopping.wait())
    all_ended = asyncio.ensure_future(asyncio.wait(tasks))
    await asyncio.wait({stop_asked, all_ended}, return_when=asyncio.FIRST_COMPLETED)
    if not ctx.stopping.is_set():
        stop_asked.cancel()
        event(logging.ERROR, "no_worker_left", network=ctx.network, instance=ctx.instance_id)
        ctx.stopping.set()  # ends the wake-up listener too
        return
    all_ended.cancel()
    _, pending = await asyncio.wait(tasks, timeout=STOP_GRACE_SECONDS)
    for task in pending:
        event(
            logging.ERROR,
            "worker_cancelled_at_stop",
            network=ctx.network,
            grace_s=STOP_GRACE_SECONDS,
            worker=task.get_name(),
        )
        task.cancel()


async def supervise(
    ctx: WorkerContext,
    entries: Sequence[WorkerEntry],
    wakeup: Wakeup | None = None,
    install_signal_handlers: bool = True,
) -> int:
    """Run ``entries`` until a stop signal (exit code 0) or a core crash (1)."""
    loop = asyncio.get_running_loop()
    if install_signal_handlers:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, ctx.stopping.set)
    crashed: list[str] = []
    try:
        wakes = [
            wakeup.subscribe(e.wake_on, e.loops) if wakeup else WakeGroup(e.loops) for e in entries
        ]
        async with asyncio.TaskGroup() as group:
            if wakeup is not None:
                group.create_task(wakeup.run(ctx.stopping), name="wakeup")
            tasks = [
                group.create_task(_run_entry(entry, ctx, wake, crashed), name=entry.name)
                for entry, wake in zip(entries, wakes, strict=True)
            ]
            group.create_task(_bound_stop(ctx, tasks), name="bound_stop")
    finally:
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
    if crashed:
        event(
            logging.CRITICAL,
            "supervisor_failed",
            network=ctx.network,
            instance=ctx.instance_id,
            crashed=",".join(crashed),
        )
        return 1
    event(logging.INFO, "supervisor_stopped", network=ctx.network, instance=ctx.instance_id)
    return 0
