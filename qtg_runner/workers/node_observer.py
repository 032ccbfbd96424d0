"""node_observer (core): SUBMITTED | OBSERVING -> OBSERVING | COMPLETED | FAILED | UNKNOWN.

The seed's two-stage claim: an unlocked advisory ID list (observe_candidates),
then for each ID, in its own transaction, a locked per-ID claim inside a
savepoint (claim_observe repeats every predicate with FOR UPDATE OF node,
request SKIP LOCKED). A miss rolls back only the savepoint, so no partial
tuple lock survives into the next candidate. A hit keeps the node and request
locks through the executor's observe() and complete_observe()'s commit.

One node never stops the others (qtg_runner.faults): an observe() that fails
(ExecutorError, or a transient error reaching the service) is the ERROR
outcome; an observe() that raises anything else, or a complete_observe() the
engine refuses for the node's own data (in a savepoint), quarantines the node
in the same transaction; the evidence is cut to the network's bounds first.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg

from qtg_runner.db import procs
from qtg_runner.executors.base import ExecutorError, JsonObject, NodeWork
from qtg_runner.faults import Failure, classify, describe, quarantine
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
                    error=ctx.limits.text(describe(exc)),
                )

    async with asyncio.TaskGroup() as group:
        for node_id in candidates:
            group.create_task(one(node_id))
    return observed


async def observe_one(
    ctx: WorkerContext, worker_id: str, node_id: int, movement_id: int | None = None
) -> bool:
    """Claim, observe and report one node in one transaction. False on a claim miss.

    The transaction takes two round trips to the database around the observe
    call (pipeline mode): BEGIN with the claim in its savepoint, then the
    report in its savepoint with the COMMIT. Anything raised rolls it back."""
    async with ctx.pool.connection() as conn, procs.abegun_transaction(conn):
        return await _claim_observe_report(ctx, conn, worker_id, node_id, movement_id)


async def _claim_observe_report(
    ctx: WorkerContext,
    conn: psycopg.AsyncConnection[Any],
    worker_id: str,
    node_id: int,
    movement_id: int | None,
) -> bool:
    """observe_one's transaction, begun here and committed with the report
    (after a miss or a quarantine, on leaving abegun_transaction). False on a
    claim miss."""
    # the savepoint around the per-ID claim
    claim = await procs.claim_observe(node_id, worker_id, movement_id).aone_or_none_between(
        conn, before=("BEGIN", "SAVEPOINT claim"), after=("RELEASE SAVEPOINT claim",)
    )
    if claim is None:
        return False
    work = NodeWork.from_claim(claim, ctx.network)
    try:
        outcome, evidence, retry_after = await _observe(ctx, work)
    except Exception as exc:  # observe() raised what it never should
        await _poisoned(ctx, conn, work, "observe", exc)
        return True
    try:
        # a refusal here is this node's alone: its savepoint is rolled back and
        # the node quarantined on the claim's transaction
        out = await procs.complete_observe(
            work.node_id, work.claim_secret, outcome, evidence, retry_after
        ).aone_between(
            conn, before=("SAVEPOINT report",), after=("RELEASE SAVEPOINT report", "COMMIT")
        )
    except Exception as exc:
        if classify(exc) is not Failure.POISON:
            raise
        await conn.execute("ROLLBACK TO SAVEPOINT report")
        await _poisoned(ctx, conn, work, "complete_observe", exc)
        return True
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


async def _poisoned(
    ctx: WorkerContext,
    conn: psycopg.AsyncConnection[Any],
    work: NodeWork,
    step: str,
    exc: BaseException,
) -> None:
    """Quarantine the node, on the claim's own transaction (which holds its locks)."""
    node_event(
        logging.ERROR,
        "observe_refused",
        WORKER,
        work,
        step=step,
        error=ctx.limits.text(describe(exc)),
    )
    await quarantine(ctx, WORKER, [work], step, describe(exc), conn=conn)


async def _observe(ctx: WorkerContext, work: NodeWork) -> tuple[str, JsonObject, float | None]:
    """The executor's answer as complete_observe's outcome, evidence (cut to the
    network's bounds) and retry hint. A failed call (ExecutorError, or a
    transient error on the way to the service; or no executor for the node in
    this runner) is the ERROR outcome: the database decides when to look again
    (the hint, if any, else the lane's delay) and still escalates a node
    observed too long to UNKNOWN. Anything else the executor raises is raised."""
    executor = ctx.executor_for(work)
    if executor is None:
        return CALL_FAILED, {"error": missing_executor(WORKER, work)}, None
    try:
        result = await executor.observe(work)
    except ExecutorError as exc:
        return CALL_FAILED, {"error": ctx.limits.text(str(exc))}, exc.retry_after
    except Exception as exc:
        if classify(exc) is not Failure.TRANSIENT:
            raise
        return CALL_FAILED, {"error": ctx.limits.text(describe(exc))}, None
    return result.status.value, ctx.limits.document(result.evidence), result.retry_after
