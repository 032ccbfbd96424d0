"""Runner start-up and the supervisor.

``Runtime`` opens the network-bound pool, registers every executor the runner
carries (so the database can validate plans that name it) and builds the
worker context. ``supervise`` runs the chosen workers in one asyncio.TaskGroup:

  core workers (node_dispatcher, node_observer, node_recovery) fail fast: a
  crash cancels every other worker and the process exits non-zero;
  sidecars (expiration_checker, ...) are isolated: a crash is logged with its
  traceback and the others keep running.

SIGTERM and SIGINT set the stop event: every loop finishes its current batch
(a dispatcher finishes the submits it started, so nothing is left claimed and
unreported beyond what recovery resolves from the intent), marks its heartbeat
not live, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from qtg_runner.config import NetworkMode
from qtg_runner.db.pool import open_pool, runner_conninfo
from qtg_runner.executors.base import Executor
from qtg_runner.executors.sim import SimExecutor
from qtg_runner.log import event
from qtg_runner.loop import WorkerContext, WorkerEntry, run_worker
from qtg_runner.wakeup import Wakeup


class CoreWorkerCrashed(RuntimeError):
    """A core worker raised: the supervisor tore everything down."""


def new_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class Runtime:
    network: NetworkMode
    conninfo: str
    pool: AsyncConnectionPool[Any]
    side_pool: AsyncConnectionPool[Any]
    executors: dict[str, Executor]
    instance_id: str

    @classmethod
    async def open(
        cls,
        admin_dsn: str,
        network: NetworkMode,
        *,
        name: str = "qtg-runner",
        max_concurrency: int = 8,
    ) -> Runtime:
        conninfo = runner_conninfo(admin_dsn, network, name)
        pool = open_pool(conninfo, name=f"{name}-engine", min_size=1, max_size=max_concurrency + 4)
        side_pool = open_pool(
            conninfo, name=f"{name}-executors", min_size=1, max_size=max_concurrency + 2
        )
        await pool.open(wait=True, timeout=30)
        await side_pool.open(wait=True, timeout=30)
        executors: dict[str, Executor] = {"sim": SimExecutor(side_pool, network)}
        runtime = cls(network, conninfo, pool, side_pool, executors, new_instance_id())
        await runtime.register_executors()
        return runtime

    async def register_executors(self) -> None:
        async with self.pool.connection() as conn:
            for executor in self.executors.values():
                await conn.execute(
                    "SELECT register_executor(%s, %s, %s::jsonb, %s)",
                    (
                        executor.key,
                        executor.has_side_effect,
                        json.dumps(executor.node_config_schema),
                        executor.description,
                    ),
                )

    def context(self, max_concurrency: int = 8) -> WorkerContext:
        return WorkerContext(
            self.network,
            self.pool,
            self.executors,
            self.instance_id,
            max_concurrency=max_concurrency,
        )

    async def close(self) -> None:
        await self.pool.close()
        await self.side_pool.close()


async def _mark_stopped(ctx: WorkerContext, entry: WorkerEntry) -> None:
    with contextlib.suppress(Exception):
        async with ctx.pool.connection(timeout=5) as conn:
            await conn.execute("SELECT worker_stopped(%s, %s)", (entry.name, ctx.instance_id))


async def _run_entry(entry: WorkerEntry, ctx: WorkerContext, wake: asyncio.Event) -> None:
    try:
        await run_worker(entry, ctx, wake)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if entry.tier == "core":
            # stop every loop at its next check too: the TaskGroup cancels each task
            # once, and a cancellation that lands as a pooled connection is handed
            # over is lost (asyncio.wait_for in Python 3.11), leaving a worker ticking
            ctx.stopping.set()
            event(
                logging.CRITICAL,
                "core_worker_crashed",
                network=ctx.network,
                worker=entry.name,
                error=f"{type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(),
            )
            raise CoreWorkerCrashed(f"core worker {entry.name} crashed: {exc!r}") from exc
        event(
            logging.ERROR,
            "sidecar_crashed",
            network=ctx.network,
            worker=entry.name,
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )
    finally:
        await _mark_stopped(ctx, entry)


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
    crashed = False
    try:
        wakes = [wakeup.subscribe(e.wake_on) if wakeup else asyncio.Event() for e in entries]
        async with asyncio.TaskGroup() as group:
            if wakeup is not None:
                group.create_task(wakeup.run(ctx.stopping))
            for entry, wake in zip(entries, wakes, strict=True):
                group.create_task(_run_entry(entry, ctx, wake))
    except* CoreWorkerCrashed:
        ctx.stopping.set()
        crashed = True
    finally:
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
    if crashed:
        # a worker cancelled during its own worker_stopped call would stay live;
        # every task has ended now, so mark them all stopped once more
        for entry in entries:
            await _mark_stopped(ctx, entry)
        event(logging.CRITICAL, "supervisor_failed", network=ctx.network, instance=ctx.instance_id)
        return 1
    event(logging.INFO, "supervisor_stopped", network=ctx.network, instance=ctx.instance_id)
    return 0
