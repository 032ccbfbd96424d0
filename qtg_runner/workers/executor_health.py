"""executor_health (sidecar, the seed's name): calls health() of every
executor this runner carries and records the answer (report_executor_health).
A DOWN executor's nodes stay READY, their attempts untouched, until a later
report says otherwise (claim_ready_nodes skips them; a report older than five
minutes no longer holds them). A health() that raises or takes longer than
HEALTH_TIMEOUT_S is reported DOWN with the reason; the check of one executor
never delays another's."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from qtg_runner.db import procs
from qtg_runner.executors.base import Executor, HealthResult, HealthStatus
from qtg_runner.faults import NoAnswer, within
from qtg_runner.loop import WorkerContext

HEALTH_TIMEOUT_S = 10.0
REASON_CHARS = 500


async def check(executor: Executor) -> HealthResult:
    """The executor's health, or DOWN with why it could not be had."""
    try:
        return await within(HEALTH_TIMEOUT_S, "health()", executor.health())
    except NoAnswer as exc:
        return HealthResult(HealthStatus.DOWN, {"reason": str(exc)})
    except Exception as exc:  # an executor's check failing is what this reports
        reason = f"health() raised {type(exc).__name__}: {exc}"[:REASON_CHARS]
        return HealthResult(HealthStatus.DOWN, {"reason": reason})


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    keys = sorted(ctx.executors)
    results = await asyncio.gather(*(check(ctx.executors[key]) for key in keys))
    async with ctx.pool.connection() as conn:
        before: dict[str, Any] = {
            row[0]: row[1]
            for row in await (
                await conn.execute("SELECT executor_key, last_status FROM executor_status")
            ).fetchall()
        }
        for key, result in zip(keys, results, strict=True):
            await procs.report_executor_health(
                key, result.status.value, ctx.limits.document(result.detail), worker_id
            ).aone(conn)
            if before.get(key) != result.status.value:
                ctx.log(
                    logging.WARNING if result.status is HealthStatus.DOWN else logging.INFO,
                    "executor_health_changed",
                    "executor_health",
                    executor=key,
                    status=result.status.value,
                    previous=before.get(key),
                )
    return len(keys)
