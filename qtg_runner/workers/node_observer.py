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
import logging

from qtg_runner.db import procs
from qtg_runner.executors.base import ExecutorError, JsonObject, NodeWork
from qtg_runner.log import event, missing_executor, node_event
from qtg_runner.loop import OPERATIONAL_ERRORS, WorkerContext

WORKER = "node_observer"
BATCH_SIZE = 64
CALL_FAILED = "ERROR"
"""complete_observe's outcome when the observe call itself failed: OBSERVING again
after the executor's hint or the lane's observe_error_retry_seconds."""


async def batch(ctx: WorkerContext, worker_id: str, movement_id: int | None = None) -> int:
    async with ctx.pool.connection() as conn:
        candidates = await procs.observe_candidates(BATCH_SIZE, movement_id).aall(conn)

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
                    worker=WORKER,
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
        async with conn.transaction():
            claim = await procs.claim_observe(node_id, worker_id, movement_id).aone_or_none(conn)
        if claim is None:
            return False
        work = NodeWork.from_claim(claim, ctx.network)
        outcome, evidence, retry_after = await _observe(ctx, work)
        out = await procs.complete_observe(
            work.node_id, work.claim_secret, outcome, evidence, retry_after
        ).aone(conn)
    if out.node_state != procs.NodeState.OBSERVING:
        node_event(
            logging.INFO,
            "node_observed",
            WORKER,
            work,
            outcome=outcome,
            to_state=out.node_state,
            phase=out.observe_phase,
        )
    return True


async def _observe(ctx: WorkerContext, work: NodeWork) -> tuple[str, JsonObject, float | None]:
    """The executor's answer as complete_observe's outcome, evidence and retry hint.
    A failed call (or no executor for the node in this runner) is the ERROR
    outcome: the database decides when to look again (the hint, if any, else the
    lane's delay) and still escalates a node observed too long to UNKNOWN."""
    executor = ctx.executor_for(work)
    if executor is None:
        return CALL_FAILED, {"error": missing_executor(WORKER, work)}, None
    try:
        result = await executor.observe(work)
    except ExecutorError as exc:
        return CALL_FAILED, {"error": str(exc)}, exc.retry_after
    return result.status.value, result.evidence, result.retry_after
