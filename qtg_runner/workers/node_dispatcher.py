"""node_dispatcher (core): APPROVED movements start; READY -> SUBMITTING -> SUBMITTED.

One batch: start approved movements, claim READY nodes (the claim commits
the nodes as SUBMITTING with their intents before any side effect), then for
each node, with bounded concurrency: preflight, prepare, record the intent,
submit, complete_submit. A failure is reported through fail_submit, which
decides (in SQL) between a retry, FAILED and recovery.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from psycopg.rows import dict_row

from qtg_runner.executors.base import ExecutorError, NodeWork
from qtg_runner.failpoints import failpoint
from qtg_runner.log import event
from qtg_runner.loop import OPERATIONAL_ERRORS, WorkerContext

BATCH_SIZE = 32


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn:
        started = (
            await (await conn.execute("SELECT start_approved_movements(100)")).fetchone() or [0]
        )[0]
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute("SELECT * FROM claim_ready_nodes(%s, %s)", (worker_id, BATCH_SIZE))
            claims = await cur.fetchall()
    if started:
        event(logging.INFO, "movements_started", network=ctx.network, count=started)

    limit = asyncio.Semaphore(ctx.max_concurrency)

    async def one(claim: dict[str, Any]) -> None:
        async with limit:
            try:
                await dispatch(ctx, worker_id, claim)
            except OPERATIONAL_ERRORS as exc:
                # the node stays SUBMITTING with its intent: recovery resolves it
                # after the lease; the other nodes of the batch go on
                event(
                    logging.ERROR,
                    "dispatch_failed",
                    network=ctx.network,
                    worker="node_dispatcher",
                    movement=claim["request_id"],
                    node=claim["node_id"],
                    error=f"{type(exc).__name__}: {exc}",
                )

    async with asyncio.TaskGroup() as group:
        for claim in claims:
            group.create_task(one(claim))
    return len(claims) + int(started)


async def dispatch(ctx: WorkerContext, worker_id: str, claim: dict[str, Any]) -> None:
    work = NodeWork.from_claim(claim, ctx.network)
    fields = dict(
        network=ctx.network,
        worker="node_dispatcher",
        movement=work.request_id,
        node=work.node_id,
        executor=work.executor_key,
    )
    executor = ctx.executors.get(work.executor_key)
    if executor is None:
        await _fail(ctx, work, f"no executor {work.executor_key!r} in this runner", True, 30.0)
        event(logging.ERROR, "executor_missing", **fields)
        return
    try:
        await executor.preflight(work)
        prepared = await executor.prepare(work)
    except ExecutorError as exc:
        state = await _fail(ctx, work, str(exc), exc.retryable, exc.retry_after)
        event(logging.WARNING, "prepare_failed", **fields, to_state=state, error=str(exc))
        return

    async with ctx.pool.connection() as conn:
        await conn.execute(
            "SELECT record_intent_prepared(%s, %s, %s, %s, %s, %s::jsonb)",
            (
                work.node_id,
                work.claim_token,
                prepared.nonce,
                prepared.signed_tx_hash,
                prepared.external_request_id,
                json.dumps(prepared.payload) if prepared.payload else None,
            ),
        )
    # the intent is committed: only now may the side effect happen
    failpoint("after_intent")
    try:
        result = await executor.submit(work, prepared)
    except ExecutorError as exc:
        state = await _fail(ctx, work, str(exc), exc.retryable, exc.retry_after)
        event(logging.WARNING, "submit_failed", **fields, to_state=state, error=str(exc))
        return

    failpoint("after_submit")
    async with ctx.pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT complete_submit(%s, %s, %s, %s::jsonb, %s)::text",
                (
                    work.node_id,
                    work.claim_token,
                    result.external_ref,
                    json.dumps(result.evidence),
                    result.settled,
                ),
            )
        ).fetchone()
    event(
        logging.INFO,
        "node_submitted",
        **fields,
        to_state=row[0] if row else None,
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
