"""node_dispatcher (core): APPROVED movements start; READY -> SUBMITTING -> SUBMITTED.

One batch: start approved movements, claim READY nodes (the claim commits
the nodes as SUBMITTING with their intents before any side effect), then, for
the claimed nodes together:

  0. give back, in one call (release_nodes), the nodes whose executor this
     runner does not carry: READY again for a runner that does, without
     consuming a submit attempt;
  1. preflight and prepare each node (bounded concurrency);
  2. record every prepared intent in one call (record_intent_prepared_batch,
     one transaction): a node whose intent is not recorded is not submitted;
  3. submit the recorded nodes a group at a time (bounded concurrency): an
     executor that implements BatchSubmitter submits all its nodes in one call,
     any other submits each node as a group of one;
  4. report each group's submits right after them, in one call
     (complete_submit_batch).

Every rule of the single-node procedures holds per node in the batch calls
(fencing, lease, audit, DAG step, settle); a node the database refuses is
reported in its own row and the rest of the batch goes on. Each kind of
failure is handled in one place (``_guarded``): the executor's refusal is
reported through fail_submit, which decides (in SQL) between a retry, FAILED
and recovery; an operational error leaves the node SUBMITTING, and recovery
resolves it from its intent. Anything else is a bug and reaches the supervisor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from qtg_runner.db import procs
from qtg_runner.executors.base import (
    BatchSubmitter,
    Executor,
    ExecutorError,
    NodeWork,
    Prepared,
    SubmitResult,
)
from qtg_runner.failpoints import failpoint
from qtg_runner.log import event, node_event
from qtg_runner.loop import OPERATIONAL_ERRORS, WorkerContext

WORKER = "node_dispatcher"
BATCH_SIZE = 64
"""Nodes claimed per tick."""
BATCH_SIZE_BATCHED = 256
"""Nodes claimed per tick when every executor of the runner submits in batches
(BatchSubmitter): a tick then costs a handful of calls whatever its size."""
START_BATCH = 100

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class _Node:
    work: NodeWork
    executor: Executor


@dataclass(frozen=True)
class _Prepared(_Node):
    prepared: Prepared


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn:
        started = await procs.start_approved_movements(START_BATCH).aone(conn)
        claims = await procs.claim_ready_nodes(worker_id, _claim_size(ctx)).aall(conn)
    if started:
        event(logging.INFO, "movements_started", network=ctx.network, count=started)
    if claims:
        await dispatch_claims(ctx, [NodeWork.from_claim(claim, ctx.network) for claim in claims])
    return len(claims) + started


def _claim_size(ctx: WorkerContext) -> int:
    executors = ctx.executors.values()
    if executors and all(isinstance(e, BatchSubmitter) for e in executors):
        return BATCH_SIZE_BATCHED
    return BATCH_SIZE


async def dispatch_claims(ctx: WorkerContext, works: Sequence[NodeWork]) -> None:
    nodes: list[_Node] = []
    missing: list[NodeWork] = []
    for work in works:
        executor = ctx.executor_for(work)
        if executor is None:
            missing.append(work)
        else:
            nodes.append(_Node(work, executor))

    # 0. what this runner cannot run goes back, untouched, for one that can
    if missing:
        await _guarded(ctx, missing, "release", lambda: _release(ctx, missing))

    # 1. preflight and prepare: nothing is signed for a node the executor refuses
    async def prepare(node: _Node) -> _Prepared | None:
        return await _guarded(ctx, [node.work], "prepare", lambda: _prepare(node))

    prepared = [n for n in await _bounded(ctx, nodes, prepare) if n is not None]
    if not prepared:
        return

    # 2. the intents, in one transaction: only a recorded node may be submitted
    recorded = await _guarded(
        ctx, [n.work for n in prepared], "record_intents", lambda: _record_intents(ctx, prepared)
    )
    if not recorded:
        return
    # the intents are committed: only now may the side effects happen
    failpoint("after_intent")

    # 3. the side effects, a group at a time, and 4. each group's report after it
    async def submit_and_report(group: Sequence[_Prepared]) -> None:
        works = [n.work for n in group]
        results = await _guarded(ctx, works, "submit", lambda: _submit(group))
        if results is None:
            return
        failpoint("after_submit")
        await _guarded(ctx, works, "report", lambda: _complete_submits(ctx, group, results))

    await _bounded(ctx, _groups(recorded), submit_and_report)


async def _guarded(
    ctx: WorkerContext, works: Sequence[NodeWork], step: str, action: Callable[[], Awaitable[T]]
) -> T | None:
    """One step of the dispatch for ``works``: its result, or None when it failed.

    The one place each kind of failure is handled. The executor refused
    (ExecutorError: nothing went out): each node is reported through
    fail_submit, which decides in SQL between a retry, FAILED and recovery. An
    operational error (the database, the network): each node stays SUBMITTING
    with its intent, for recovery once the lease runs out. Anything else is a
    bug and propagates."""
    try:
        try:
            return await action()
        except ExecutorError as refused:
            await _fail_submits(ctx, works, step, refused)
    except OPERATIONAL_ERRORS as exc:
        for work in works:
            _dispatch_failed(work, step, exc)
    return None


def _dispatch_failed(work: NodeWork, step: str, exc: BaseException) -> None:
    """The node stays SUBMITTING with its intent: recovery resolves it once the
    lease runs out."""
    node_event(
        logging.ERROR,
        "dispatch_failed",
        WORKER,
        work,
        step=step,
        error=f"{type(exc).__name__}: {exc}",
    )


async def _bounded(
    ctx: WorkerContext, items: Sequence[T], step: Callable[[T], Awaitable[U]]
) -> list[U]:
    """``step`` for every item, ``ctx.max_concurrency`` at a time, results in order.
    A bug in one cancels the others and reaches the supervisor."""
    limit = asyncio.Semaphore(ctx.max_concurrency)

    async def one(item: T) -> U:
        async with limit:
            return await step(item)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(item)) for item in items]
    return [task.result() for task in tasks]


async def _release(ctx: WorkerContext, works: Sequence[NodeWork]) -> None:
    async with ctx.pool.connection() as conn:
        rows = await procs.release_nodes(
            [w.node_id for w in works],
            [w.claim_secret for w in works],
            "no executor for the node in this runner",
        ).aall(conn)
    for work, row in zip(works, rows, strict=True):
        if _accepted(work, row, "release"):
            node_event(logging.WARNING, "executor_missing", WORKER, work, to_state=row.node_state)


async def _prepare(node: _Node) -> _Prepared:
    await node.executor.preflight(node.work)
    return _Prepared(node.work, node.executor, await node.executor.prepare(node.work))


async def _record_intents(ctx: WorkerContext, nodes: Sequence[_Prepared]) -> list[_Prepared]:
    """record_intent_prepared_batch; returns the nodes whose intent was recorded."""
    preps = [n.prepared for n in nodes]
    async with ctx.pool.connection() as conn:
        rows = await procs.record_intent_prepared_batch(
            [n.work.node_id for n in nodes],
            [n.work.claim_secret for n in nodes],
            [p.nonce for p in preps],
            [p.signed_tx_hash for p in preps],
            [p.external_request_id for p in preps],
            [p.payload or None for p in preps],
        ).aall(conn)
    return [n for n, row in zip(nodes, rows, strict=True) if _accepted(n.work, row, "record")]


class _OneAtATime:
    """The BatchSubmitter of an executor without one: it submits a group of one."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor

    async def submit_many(self, items: Sequence[tuple[NodeWork, Prepared]]) -> list[SubmitResult]:
        return [await self._executor.submit(work, prepared) for work, prepared in items]


def _groups(nodes: Sequence[_Prepared]) -> list[list[_Prepared]]:
    """The submit groups: all the nodes of an executor that implements
    BatchSubmitter (one call), and each node of any other executor alone."""
    batched: dict[str, list[_Prepared]] = {}
    alone: list[list[_Prepared]] = []
    for node in nodes:
        if isinstance(node.executor, BatchSubmitter):
            batched.setdefault(node.work.executor_key, []).append(node)
        else:
            alone.append([node])
    return [*batched.values(), *alone]


async def _submit(group: Sequence[_Prepared]) -> list[SubmitResult]:
    """The side effects of one group, in one call. Raising ExecutorError means
    none of them happened."""
    executor = group[0].executor
    submitter = executor if isinstance(executor, BatchSubmitter) else _OneAtATime(executor)
    return await submitter.submit_many([(n.work, n.prepared) for n in group])


async def _complete_submits(
    ctx: WorkerContext, group: Sequence[_Prepared], results: Sequence[SubmitResult]
) -> None:
    async with ctx.pool.connection() as conn:
        rows = await procs.complete_submit_batch(
            [n.work.node_id for n in group],
            [n.work.claim_secret for n in group],
            [r.external_ref for r in results],
            [r.evidence for r in results],
            [r.settled for r in results],
        ).aall(conn)
    for node, result, row in zip(group, results, rows, strict=True):
        if _accepted(node.work, row, "report"):
            node_event(
                logging.INFO,
                "node_submitted",
                WORKER,
                node.work,
                to_state=row.node_state,
                external_ref=result.external_ref,
            )


async def _fail_submits(
    ctx: WorkerContext, works: Sequence[NodeWork], step: str, refused: ExecutorError
) -> None:
    """fail_submit for each node of a refused step, each in its own call: one the
    database does not take (a stale claim, a lost connection) stays SUBMITTING
    for recovery and does not hold back the others' reports."""
    error = str(refused)[:1000]
    async with ctx.pool.connection() as conn:
        for work in works:
            fail = procs.fail_submit(
                work.node_id, work.claim_secret, error, refused.retryable, refused.retry_after
            )
            try:
                state = await fail.aone(conn)
            except OPERATIONAL_ERRORS as exc:
                _dispatch_failed(work, step, exc)
                continue
            node_event(logging.WARNING, f"{step}_failed", WORKER, work, to_state=state, error=error)


class _NodeRow(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def error_message(self) -> str | None: ...


def _accepted(work: NodeWork, row: _NodeRow, step: str) -> bool:
    """Whether the database accepted ``work`` in a batch call. A refused node (a
    stale claim, an expired lease: another worker owns it now) is logged and
    left to its owner."""
    assert row.node_id == work.node_id, "batch rows come back in input order"
    if row.error_code is None:
        return True
    node_event(
        logging.WARNING,
        "dispatch_refused",
        WORKER,
        work,
        step=step,
        code=row.error_code,
        error=row.error_message,
    )
    return False
