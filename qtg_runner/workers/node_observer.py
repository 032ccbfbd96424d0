"""node_observer (core): SUBMITTED | OBSERVING -> OBSERVING | COMPLETED | FAILED | UNKNOWN.

The seed's two-stage claim: an unlocked advisory ID list (observe_candidates),
then the locked per-ID claims, a chunk of IDs in one transaction
(claim_observe_batch repeats every predicate for each ID with FOR UPDATE OF
node, request SKIP LOCKED, in its own subtransaction: a miss rolls back only
that ID's, so no partial tuple lock survives into the next). The hits keep
their node and request locks through the executors' observe() calls and
complete_observe_batch's commit. The claim writes nothing: its secrets prove
a claim of this transaction only, so the reports, and any quarantine, are made
in it. A chunk is as many nodes as the worker observes at once
(max_concurrency, at most 32): its transaction takes three round trips to the
database, BEGIN with the claims, the reports, and the COMMIT, and the chunks
of a batch run one after another, so no node is locked
while it waits for a turn to be observed.

One node never stops the others (qtg_runner.faults): an observe() that fails
(ExecutorError, or a transient error reaching the service) is the ERROR
outcome; an observe() that raises anything else quarantines the node on the
chunk's transaction (in a savepoint) before the others are reported; a report
the engine refuses for the node's own data (its row's QT002, QT005 or QT050)
quarantines the node on the same transaction before the commit. What the
chunk did to its nodes (observed to a new state, quarantined) is logged once
its transaction commits: a COMMIT that fails leaves no line saying otherwise.
The evidence is cut to the network's bounds first.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from decimal import Decimal

from qtg_runner.db import procs
from qtg_runner.executors.base import ExecutorError, JsonObject, NodeWork, ObserveStatus
from qtg_runner.faults import (
    ClaimTransaction,
    Failure,
    NoAnswer,
    classify,
    describe,
    quarantine,
    refused,
    within,
)
from qtg_runner.log import missing_executor, node_event
from qtg_runner.loop import OPERATIONAL_ERRORS, WorkerContext

WORKER = "node_observer"
BATCH_SIZE = 64
CHUNK_LIMIT = 32
"""claim_observe_batch's bound: the most nodes one transaction claims."""
OBSERVE_DEADLINE_S = 30.0
"""The longest one observe() may take. The nodes of a chunk stay locked until
its slowest observe() has answered, so one that hangs (a service that
accepts the connection and never answers, across several calls each within
its client's timeout) would hold the others' locks and results; past this it
is the ERROR outcome, and the node is looked at again after the lane's
observe_error_retry_seconds. A service that takes connections and answers
nothing costs one such wait, not one a batch: the first call it leaves
unanswered opens its endpoint's circuit (qtg_runner.circuit), and the calls
after it fail at once, unsent, until it answers a probe."""
CALL_FAILED = "ERROR"
"""complete_observe's outcome when the observe call itself failed: OBSERVING again
after the executor's hint or the lane's observe_error_retry_seconds."""
HELD_BACK = ObserveStatus.THROTTLED.value
"""complete_observe's outcome when no observation was made for the endpoint's
request budget or its 429 (ExecutorError ``throttled``): looked at again after
the wait, which is not counted as the node's time observing."""

_Report = tuple[str, JsonObject, float | None]


async def batch(ctx: WorkerContext, worker_id: str, movement_id: int | None = None) -> int:
    candidates = await ctx.all(procs.observe_candidates(BATCH_SIZE, movement_id))

    size = max(1, min(CHUNK_LIMIT, ctx.max_concurrency))
    observed = 0
    for at in range(0, len(candidates), size):
        chunk = candidates[at : at + size]
        try:
            observed += await observe_chunk(ctx, worker_id, chunk, movement_id)
        except OPERATIONAL_ERRORS as exc:
            ctx.log(
                logging.ERROR,
                "observe_failed",
                WORKER,
                nodes=chunk,
                error=ctx.limits.text(describe(exc)),
            )
    return observed


async def observe_chunk(
    ctx: WorkerContext, worker_id: str, node_ids: Sequence[int], movement_id: int | None = None
) -> int:
    """Claim, observe and report some candidates in one transaction; how many
    were claimed. Anything raised rolls it back: the nodes are observed again
    at their next turn."""
    async with ctx.pool.connection() as conn:
        claimed = ClaimTransaction(conn)
        async with procs.abegun_transaction(conn):
            observed = await _observe_claimed(ctx, worker_id, node_ids, movement_id, claimed)
        claimed.committed()
    return observed


async def _observe_claimed(
    ctx: WorkerContext,
    worker_id: str,
    node_ids: Sequence[int],
    movement_id: int | None,
    claimed: ClaimTransaction,
) -> int:
    conn = claimed.conn
    claims = await procs.claim_observe_batch(list(node_ids), worker_id, movement_id).aall_between(
        conn, before=("BEGIN",)
    )
    works = [NodeWork.from_claim(claim, ctx.network) for claim in claims]
    # a BaseException in one observe() (the process dying) cancels the others
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_answer(ctx, work)) for work in works]
    answers = [task.result() for task in tasks]
    reported: list[tuple[NodeWork, _Report]] = []
    for work, answer in zip(works, answers, strict=True):
        if isinstance(answer, BaseException):  # observe() raised what it never should
            await _poisoned(ctx, claimed, work, "observe", answer)
        else:
            reported.append((work, answer))
    if not reported:
        return len(works)
    rows = await procs.complete_observe_batch(
        [w.node_id for w, _ in reported],
        [w.claim_secret for w, _ in reported],
        [r[0] for _, r in reported],
        [r[1] for _, r in reported],
        [None if r[2] is None else Decimal(str(r[2])) for _, r in reported],
        worker_id,
    ).aall(conn)
    for (work, (outcome, _, _)), row in zip(reported, rows, strict=True):
        await _reported(ctx, claimed, work, outcome, row)
    return len(works)


async def _answer(ctx: WorkerContext, work: NodeWork) -> _Report | BaseException:
    try:
        return await _observe(ctx, work)
    except Exception as exc:
        return exc


async def _reported(
    ctx: WorkerContext,
    claimed: ClaimTransaction,
    work: NodeWork,
    outcome: str,
    row: procs.ObservedNode,
) -> None:
    """Log a node's report once its transaction commits; quarantine it, on the
    claim's transaction, when the engine refused the report for the node's own
    data (its claim is still its own: the refusal changed nothing)."""
    assert row.node_id == work.node_id, "batch rows come back in input order"
    if row.error_code is not None:
        await refused(
            ctx,
            logging.ERROR,
            "observe_refused",
            WORKER,
            work,
            step="complete_observe",
            code=row.error_code,
            message=row.error_message,
            claims=claimed,
        )
        return
    if row.node_state != procs.NodeState.OBSERVING:
        claimed.on_commit(
            functools.partial(
                node_event,
                logging.INFO,
                "node_observed",
                WORKER,
                work,
                outcome=outcome,
                to_state=row.node_state,
                phase=row.observe_phase,
            )
        )


async def _poisoned(
    ctx: WorkerContext,
    claimed: ClaimTransaction,
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
    await quarantine(ctx, WORKER, [work], step, describe(exc), claims=claimed)


async def _observe(ctx: WorkerContext, work: NodeWork) -> tuple[str, JsonObject, float | None]:
    """The executor's answer as complete_observe's outcome, evidence (cut to the
    network's bounds) and retry hint. A failed call (ExecutorError, a transient
    error on the way to the service, no answer in OBSERVE_DEADLINE_S; or no
    executor for the node in this runner) is the ERROR outcome: the database
    decides when to look again (the hint, if any, else the lane's delay) and
    still escalates a node observed too long to UNKNOWN. A read the endpoint's
    budget or its 429 held back (ExecutorError ``throttled``) is THROTTLED:
    nothing was learned, and the wait is not the node's. Anything else the
    executor raises is raised. An intent whose payload is not its route's
    (NodeWork.route_problem) is not observed: UNKNOWN, for recovery and an
    operator."""
    problem = work.route_problem
    if problem is not None:
        # the recorded intent is not what its route says: nothing of it is read
        return ObserveStatus.UNKNOWN.value, {"problem": ctx.limits.text(problem)}, None
    executor = ctx.executor_for(work)
    if executor is None:
        return CALL_FAILED, {"error": missing_executor(WORKER, work)}, None
    try:
        result = await within(OBSERVE_DEADLINE_S, "observe()", executor.observe(work))
    except ExecutorError as exc:
        if exc.throttled:
            return HELD_BACK, {"throttled": ctx.limits.text(str(exc))}, exc.retry_after
        return CALL_FAILED, {"error": ctx.limits.text(str(exc))}, exc.retry_after
    except NoAnswer as exc:
        return CALL_FAILED, {"error": str(exc)}, None
    except Exception as exc:
        if classify(exc) is not Failure.TRANSIENT:
            raise
        return CALL_FAILED, {"error": ctx.limits.text(describe(exc))}, None
    return result.status.value, ctx.limits.document(result.evidence), result.retry_after
