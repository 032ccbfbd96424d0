"""node_dispatcher (core): APPROVED movements start; READY -> SUBMITTING -> SUBMITTED.

One batch: start approved movements, claim READY nodes (the claim commits
the nodes as SUBMITTING with their intents before any side effect), then, for
the claimed nodes together:

  1. preflight and prepare each node (bounded concurrency);
  2. record every prepared intent in one call (record_intent_prepared_batch,
     one transaction): a node whose intent is not recorded is not submitted;
  3. submit each recorded node (bounded concurrency), or all of an executor's
     nodes in one call when it can (BatchSubmitter): the side effects;
  4. report the submits (complete_submit_batch): each right after its own
     submit, or those of one batch submit in one call.

Every rule of the single-node procedures holds per node in the batch calls
(fencing, lease, audit, DAG step, settle); a node the database refuses is
reported in its own row and the rest of the batch goes on. A failure of the
executor is reported through fail_submit, which decides (in SQL) between a
retry, FAILED and recovery. A node left SUBMITTING (a lost connection, a
crash between the steps) is resolved by recovery from its intent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from psycopg.rows import dict_row

from qtg_runner.executors.base import (
    BatchSubmitter,
    Executor,
    ExecutorError,
    NodeWork,
    Prepared,
    SubmitResult,
)
from qtg_runner.failpoints import failpoint
from qtg_runner.log import event
from qtg_runner.loop import OPERATIONAL_ERRORS, WorkerContext

BATCH_SIZE = 64
"""Nodes claimed per tick."""
BATCH_SIZE_BATCHED = 256
"""Nodes claimed per tick when every executor of the runner submits in batches
(BatchSubmitter): a tick then costs a handful of calls whatever its size."""
START_BATCH = 100

T = TypeVar("T")


@dataclass
class _Node:
    work: NodeWork
    executor: Executor
    prepared: Prepared | None = None
    result: SubmitResult | None = None

    def fields(self) -> dict[str, Any]:
        return _fields(self.work)


def _fields(work: NodeWork) -> dict[str, Any]:
    return dict(
        network=work.network,
        worker="node_dispatcher",
        movement=work.request_id,
        node=work.node_id,
        executor=work.executor_key,
    )


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn:
        started = (
            await (
                await conn.execute("SELECT start_approved_movements(%s)", (START_BATCH,))
            ).fetchone()
            or [0]
        )[0]
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT * FROM claim_ready_nodes(%s, %s)", (worker_id, _claim_size(ctx))
            )
            claims = await cur.fetchall()
    if started:
        event(logging.INFO, "movements_started", network=ctx.network, count=started)
    if claims:
        await dispatch_claims(ctx, [NodeWork.from_claim(claim, ctx.network) for claim in claims])
    return len(claims) + int(started)


def _claim_size(ctx: WorkerContext) -> int:
    executors = ctx.executors.values()
    if executors and all(isinstance(e, BatchSubmitter) for e in executors):
        return BATCH_SIZE_BATCHED
    return BATCH_SIZE


async def _each(
    ctx: WorkerContext, nodes: Sequence[_Node], step: Callable[[_Node], Awaitable[T]]
) -> list[T | None]:
    """``step`` for every node, ``ctx.max_concurrency`` at a time; an operational
    error is logged for its node (which stays SUBMITTING for recovery) and gives None."""
    limit = asyncio.Semaphore(ctx.max_concurrency)
    results: list[T | None] = [None] * len(nodes)

    async def one(i: int, node: _Node) -> None:
        async with limit:
            try:
                results[i] = await step(node)
            except OPERATIONAL_ERRORS as exc:
                _dispatch_failed(node, exc)

    # a bug (not an operational error) cancels the others and reaches the supervisor
    async with asyncio.TaskGroup() as group:
        for i, node in enumerate(nodes):
            group.create_task(one(i, node))
    return results


def _prepared(node: _Node) -> Prepared:
    assert node.prepared is not None, "only prepared nodes are recorded and submitted"
    return node.prepared


def _result(node: _Node) -> SubmitResult:
    assert node.result is not None, "only submitted nodes are reported"
    return node.result


def _dispatch_failed(node: _Node | NodeWork, exc: BaseException | str) -> None:
    # the node stays SUBMITTING with its intent: recovery resolves it after the lease
    error = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    work = node.work if isinstance(node, _Node) else node
    event(logging.ERROR, "dispatch_failed", **_fields(work), error=error)


async def dispatch_claims(ctx: WorkerContext, works: Sequence[NodeWork]) -> None:
    nodes: list[_Node] = []
    for work in works:
        try:
            executor = ctx.executor_for(work)
        except ExecutorError as missing:
            try:
                await _fail(ctx, work, str(missing), missing.retryable, missing.retry_after)
            except OPERATIONAL_ERRORS as exc:
                _dispatch_failed(work, exc)
            event(logging.ERROR, "executor_missing", **_fields(work))
            continue
        nodes.append(_Node(work, executor))

    # 1. preflight and prepare: nothing is signed for a node the executor refuses
    async def prepare(node: _Node) -> bool:
        try:
            await node.executor.preflight(node.work)
            node.prepared = await node.executor.prepare(node.work)
        except ExecutorError as exc:
            state = await _fail(ctx, node.work, str(exc), exc.retryable, exc.retry_after)
            event(
                logging.WARNING, "prepare_failed", **node.fields(), to_state=state, error=str(exc)
            )
            return False
        return True

    prepared = [n for n, ok in zip(nodes, await _each(ctx, nodes, prepare), strict=True) if ok]
    if not prepared:
        return

    # 2. the intents, in one transaction: only a recorded node may be submitted
    try:
        recorded = await _record_intents(ctx, prepared)
    except OPERATIONAL_ERRORS as exc:
        for node in prepared:
            _dispatch_failed(node, exc)
        return
    # the intents are committed: only now may the side effects happen
    failpoint("after_intent")

    # 3. the side effects, and 4. their reports. An executor that submits one
    # node at a time has each report follow its own submit; one that submits
    # many in one call (BatchSubmitter) has them reported in one call after it.
    async def submit_and_report(node: _Node) -> None:
        try:
            node.result = await node.executor.submit(node.work, _prepared(node))
        except ExecutorError as exc:
            state = await _fail(ctx, node.work, str(exc), exc.retryable, exc.retry_after)
            event(logging.WARNING, "submit_failed", **node.fields(), to_state=state, error=str(exc))
            return
        failpoint("after_submit")
        await _complete_submits(ctx, [node])

    one_by_one = [n for n in recorded if not isinstance(n.executor, BatchSubmitter)]
    batched = [n for n in recorded if isinstance(n.executor, BatchSubmitter)]
    await _each(ctx, one_by_one, submit_and_report)
    for executor_key in dict.fromkeys(n.work.executor_key for n in batched):
        submitted = await _submit_many(
            ctx, [n for n in batched if n.work.executor_key == executor_key]
        )
        if not submitted:
            continue
        failpoint("after_submit")
        try:
            await _complete_submits(ctx, submitted)
        except OPERATIONAL_ERRORS as exc:
            for node in submitted:
                _dispatch_failed(node, exc)


async def _submit_many(ctx: WorkerContext, nodes: Sequence[_Node]) -> list[_Node]:
    """One executor's side effects for ``nodes`` in one call (BatchSubmitter);
    returns the nodes submitted. A refused call means none happened: each node
    is reported through fail_submit, as a refused submit() would be."""
    executor = nodes[0].executor
    assert isinstance(executor, BatchSubmitter)
    try:
        results = await executor.submit_many([(n.work, _prepared(n)) for n in nodes])
    except ExecutorError as exc:
        for node in nodes:
            try:
                state = await _fail(ctx, node.work, str(exc), exc.retryable, exc.retry_after)
            except OPERATIONAL_ERRORS as db_exc:
                _dispatch_failed(node, db_exc)
                continue
            event(logging.WARNING, "submit_failed", **node.fields(), to_state=state, error=str(exc))
        return []
    except OPERATIONAL_ERRORS as exc:
        # the outcome of the call is not known: recovery resolves each node from evidence
        for node in nodes:
            _dispatch_failed(node, exc)
        return []
    for node, result in zip(nodes, results, strict=True):
        node.result = result
    return list(nodes)


async def _record_intents(ctx: WorkerContext, nodes: Sequence[_Node]) -> list[_Node]:
    """record_intent_prepared_batch; returns the nodes whose intent was recorded."""
    preps = [_prepared(n) for n in nodes]
    async with ctx.pool.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT node_id, error_code, error_message FROM record_intent_prepared_batch("
                "%s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::jsonb[])",
                (
                    [n.work.node_id for n in nodes],
                    [n.work.claim_token for n in nodes],
                    [p.nonce for p in preps],
                    [p.signed_tx_hash for p in preps],
                    [p.external_request_id for p in preps],
                    [json.dumps(p.payload) if p.payload else None for p in preps],
                ),
            )
        ).fetchall()
    recorded: list[_Node] = []
    for node, (node_id, code, message) in zip(nodes, rows, strict=True):
        assert node_id == node.work.node_id
        if code is None:
            recorded.append(node)
        else:
            # not recorded (a stale claim, an expired lease): never broadcast
            _dispatch_failed(node, f"{code}: {message}")
    return recorded


async def _complete_submits(ctx: WorkerContext, nodes: Sequence[_Node]) -> None:
    results = [_result(n) for n in nodes]
    async with ctx.pool.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT node_id, node_state::text, error_code, error_message"
                " FROM complete_submit_batch("
                "%s::bigint[], %s::bigint[], %s::text[], %s::jsonb[], %s::boolean[])",
                (
                    [n.work.node_id for n in nodes],
                    [n.work.claim_token for n in nodes],
                    [r.external_ref for r in results],
                    [json.dumps(r.evidence) for r in results],
                    [r.settled for r in results],
                ),
            )
        ).fetchall()
    for node, result, (node_id, state, code, message) in zip(nodes, results, rows, strict=True):
        assert node_id == node.work.node_id
        if code is not None:
            _dispatch_failed(node, f"{code}: {message}")
            continue
        event(
            logging.INFO,
            "node_submitted",
            **node.fields(),
            to_state=state,
            external_ref=result.external_ref,
        )


async def _fail(
    ctx: WorkerContext, work: NodeWork, error: str, retryable: bool, retry_after: float | None
) -> str | None:
    async with ctx.pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT fail_submit(%s, %s, %s, %s, %s::numeric)::text",
                (work.node_id, work.claim_token, error[:1000], retryable, retry_after),
            )
        ).fetchone()
    return str(row[0]) if row else None
