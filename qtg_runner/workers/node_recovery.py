"""node_recovery (core): UNKNOWN | stale SUBMITTING -> whatever the evidence says.

Reconcile only: claim_recovery_nodes commits a recovery lease (and a new claim
secret, fencing any stale dispatcher), the executor's recover() looks for
evidence outside any lock, and complete_recovery applies it. Never a blind
retry: only NOT_SUBMITTED evidence sends a node back to READY.
"""

from __future__ import annotations

import logging

from qtg_runner.db import procs
from qtg_runner.executors.base import ExecutorError, NodeWork, RecoveryOutcome, RecoveryResult
from qtg_runner.log import missing_executor, node_event
from qtg_runner.loop import OPERATIONAL_ERRORS, WorkerContext

WORKER = "node_recovery"
BATCH_SIZE = 16


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn:
        claims = await procs.claim_recovery_nodes(worker_id, BATCH_SIZE).aall(conn)

    for claim in claims:
        work = NodeWork.from_claim(claim, ctx.network)
        try:
            result = await _recover(ctx, work)
            async with ctx.pool.connection() as conn:
                state = await procs.complete_recovery(
                    work.node_id,
                    work.claim_secret,
                    result.outcome.value,
                    result.evidence,
                    result.external_ref,
                    result.retry_after,
                ).aone(conn)
            node_event(
                logging.INFO,
                "node_recovered",
                WORKER,
                work,
                from_state=claim.node_state,
                outcome=result.outcome.value,
                to_state=state,
            )
        except OPERATIONAL_ERRORS as exc:
            # the recovery lease runs out and the node is claimed again
            node_event(
                logging.ERROR,
                "recovery_failed",
                WORKER,
                work,
                error=f"{type(exc).__name__}: {exc}",
            )
    return len(claims)


async def _recover(ctx: WorkerContext, work: NodeWork) -> RecoveryResult:
    """recover()'s evidence. A failed call (or no executor for the node in this
    runner) concludes nothing: STILL_UNKNOWN, looked at again after the
    executor's hint, else after the lane's recovery_retry_seconds."""
    executor = ctx.executor_for(work)
    if executor is None:
        error = missing_executor(WORKER, work)
        return RecoveryResult(RecoveryOutcome.STILL_UNKNOWN, {"error": error})
    try:
        return await executor.recover(work)
    except ExecutorError as exc:
        return RecoveryResult(
            RecoveryOutcome.STILL_UNKNOWN, {"error": str(exc)}, retry_after=exc.retry_after or None
        )
