"""node_recovery (core): UNKNOWN | stale SUBMITTING -> whatever the evidence says.

Reconcile only: claim_recovery_nodes commits a recovery lease (and a new claim
secret, fencing any stale dispatcher) on the nodes whose lease ran out or whose
claimer is known dead, the executor's recover() looks for evidence outside
any lock, and complete_recovery applies it. Never a blind retry: only
NOT_SUBMITTED evidence sends a node back to READY.

One node never stops the others (qtg_runner.faults): a recover() that fails
(ExecutorError, or a transient error reaching the service) concludes nothing
(STILL_UNKNOWN); a recover() that raises anything else, or a
complete_recovery() the engine refuses for the node's own data, quarantines
the node; the evidence is cut to the network's bounds first.
"""

from __future__ import annotations

import logging

from qtg_runner.db import procs
from qtg_runner.executors.base import ExecutorError, NodeWork, RecoveryOutcome, RecoveryResult
from qtg_runner.faults import Failure, NoAnswer, classify, describe, within
from qtg_runner.log import missing_executor, node_event
from qtg_runner.loop import WorkerContext
from qtg_runner.workers.dispatch import step_failed

WORKER = "node_recovery"
BATCH_SIZE = 16
RECOVER_DEADLINE_S = 30.0
"""The longest one recover() may take. Recovery takes its nodes one at a time,
so one that never answered would stop the recovery of every other node;
past this it concludes nothing (STILL_UNKNOWN), as a failed call does."""


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn:
        claims = await procs.claim_recovery_nodes(
            WORKER, BATCH_SIZE, instance_id=ctx.instance_id
        ).aall(conn)

    for claim in claims:
        await recover_one(ctx, NodeWork.from_claim(claim, ctx.network), claim.node_state)
    return len(claims)


async def recover_one(ctx: WorkerContext, work: NodeWork, from_state: str) -> None:
    """recover() and complete_recovery for one claimed node. Never raises for the node."""
    step = "recover"
    try:
        result = await _recover(ctx, work)
        step = "complete_recovery"
        async with ctx.pool.connection() as conn:
            state = await procs.complete_recovery(
                work.node_id,
                work.claim_secret,
                result.outcome.value,
                ctx.limits.document(result.evidence),
                result.external_ref,
                result.retry_after,
            ).aone(conn)
    except Exception as exc:
        # transient: the recovery lease runs out and the node is claimed again;
        # stale: another recovery worker holds it now
        await step_failed(ctx, WORKER, [work], step, exc, logging.ERROR, "recovery_failed")
        return
    node_event(
        logging.INFO,
        "node_recovered",
        WORKER,
        work,
        from_state=from_state,
        outcome=result.outcome.value,
        to_state=state,
    )


async def _recover(ctx: WorkerContext, work: NodeWork) -> RecoveryResult:
    """recover()'s evidence. A failed call (ExecutorError, a transient error on
    the way to the service, no answer in RECOVER_DEADLINE_S; or no executor
    for the node in this runner)
    concludes nothing: STILL_UNKNOWN, looked at again after the executor's hint,
    else after the lane's recovery_retry_seconds. An intent whose payload is
    not its route's (NodeWork.route_problem) is not recovered: STILL_UNKNOWN.
    Anything else is raised."""
    if work.route_problem is not None:
        # the recorded intent is not what its route says: nothing is repeated
        # or concluded from it; an operator decides
        return RecoveryResult(
            RecoveryOutcome.STILL_UNKNOWN, {"problem": ctx.limits.text(work.route_problem)}
        )
    executor = ctx.executor_for(work)
    if executor is None:
        error = missing_executor(WORKER, work)
        return RecoveryResult(RecoveryOutcome.STILL_UNKNOWN, {"error": error})
    if executor.has_side_effect and not getattr(executor, "deduplicated_by", ""):
        # its outside world may take a repeated submission twice: recovery never
        # resubmits, and only evidence or an operator concludes
        return RecoveryResult(
            RecoveryOutcome.STILL_UNKNOWN,
            {
                "problem": f"executor {work.executor_key} names nothing that deduplicates "
                "a resubmission"
            },
        )
    try:
        return await within(RECOVER_DEADLINE_S, "recover()", executor.recover(work))
    except ExecutorError as exc:
        return RecoveryResult(
            RecoveryOutcome.STILL_UNKNOWN,
            {"error": ctx.limits.text(str(exc))},
            retry_after=exc.retry_after or None,
        )
    except NoAnswer as exc:
        return RecoveryResult(RecoveryOutcome.STILL_UNKNOWN, {"error": str(exc)})
    except Exception as exc:
        if classify(exc) is not Failure.TRANSIENT:
            raise
        return RecoveryResult(
            RecoveryOutcome.STILL_UNKNOWN, {"error": ctx.limits.text(describe(exc))}
        )
