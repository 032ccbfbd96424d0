"""node_observer (core): SUBMITTED | OBSERVING -> OBSERVING | COMPLETED | FAILED | UNKNOWN.

The seed's two-stage claim: an unlocked advisory ID list (observe_candidates),
then for each ID, in its own transaction, a locked per-ID claim inside a
savepoint (claim_observe repeats every predicate with FOR UPDATE OF node,
request SKIP LOCKED). A miss rolls back only the savepoint, so no partial
tuple lock survives into the next candidate. A hit keeps the node and request
locks through the executor's observe() and complete_observe()'s commit.
"""

from __future__ import annotations

import asyncio
import json
import logging

from psycopg.rows import dict_row

from qtg_runner.executors.base import ExecutorError, NodeWork, ObserveResult, ObserveStatus
from qtg_runner.log import event
from qtg_runner.loop import OPERATIONAL_ERRORS, WorkerContext

BATCH_SIZE = 64
OBSERVE_ERROR_RETRY_SECONDS = 5.0


async def batch(ctx: WorkerContext, worker_id: str, movement_id: int | None = None) -> int:
    async with ctx.pool.connection() as conn:
        rows = await (
            await conn.execute("SELECT observe_candidates(%s, %s)", (BATCH_SIZE, movement_id))
        ).fetchall()
    candidates = [int(r[0]) for r in rows]

    limit = asyncio.Semaphore(ctx.max_concurrency)
    observed = 0

    async def one(node_id: int) -> None:
        nonlocal observed
        async with limit:
            try:
                if await observe_one(ctx, worker_id, node_id, movement_id):
                    observed += 1
            except OPERATIONAL_ERRORS as exc:
                event(
                    logging.ERROR,
                    "observe_failed",
                    network=ctx.network,
                    worker="node_observer",
                    node=node_id,
                    error=f"{type(exc).__name__}: {exc}",
                )

    async with asyncio.TaskGroup() as group:
        for node_id in candidates:
            group.create_task(one(node_id))
    return observed


async def observe_one(
    ctx: WorkerContext, worker_id: str, node_id: int, movement_id: int | None = None
) -> bool:
    """Claim, observe and report one node in one transaction. False on a claim miss."""
    async with ctx.pool.connection() as conn, conn.transaction():
        # the savepoint around the per-ID claim
        async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT * FROM claim_observe(%s, %s, %s)", (node_id, worker_id, movement_id)
            )
            claim = await cur.fetchone()
        if claim is None:
            return False
        work = NodeWork.from_claim(claim, ctx.network)
        result: ObserveResult
        try:
            result = await ctx.executor_for(work).observe(work)
        except ExecutorError as exc:
            # cannot tell now: look again later (the phase still escalates to fatal)
            result = ObserveResult(
                ObserveStatus.UNKNOWN,
                {"error": str(exc)},
                retry_after=exc.retry_after or OBSERVE_ERROR_RETRY_SECONDS,
            )
        out = await (
            await conn.execute(
                "SELECT node_state::text, observe_phase::text, next_observe_at"
                " FROM complete_observe(%s, %s, %s, %s::jsonb, %s::numeric)",
                (
                    work.node_id,
                    work.claim_token,
                    result.status.value,
                    json.dumps(result.evidence),
                    result.retry_after,
                ),
            )
        ).fetchone()
    if out is not None and out[0] != "OBSERVING":
        event(
            logging.INFO,
            "node_observed",
            network=ctx.network,
            worker="node_observer",
            movement=work.request_id,
            node=work.node_id,
            outcome=result.status.value,
            to_state=out[0],
            phase=out[1],
        )
    return True
