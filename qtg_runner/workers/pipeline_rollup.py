"""pipeline_rollup (sidecar): the finished movements and nodes added to
pipeline_counts' totals (roll_up_pipeline_counts), every minute, so that the
view, which /metrics, the operator page and `qtg status` read, costs what is
recent or open and not the whole history. The rule is in SQL; this calls it,
and calls it again while it says it is behind (what was made while no runner
rolled up, 100,000 ids a call; migration 0039 counted the history before it),
up to CALLS a tick."""

from __future__ import annotations

from qtg_runner.db import procs
from qtg_runner.loop import WorkerContext

CALLS = 50
"""Calls a tick at most: five million ids, each call its own transaction."""


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    counted = 0
    async with ctx.pool.connection() as conn:
        for _ in range(CALLS):
            rollups = await procs.roll_up_pipeline_counts().aall(conn)
            counted += sum(1 for rollup in rollups if rollup.rolled)
            if not any(rollup.behind for rollup in rollups):
                break
    return counted
