"""node_recovery (core): UNKNOWN | stale SUBMITTING -> whatever the evidence says.

Reconcile only: claim_recovery_nodes commits a recovery lease (and a new claim
token, fencing any stale dispatcher), the executor's recover() looks for
evidence outside any lock, and complete_recovery applies it. Never a blind
retry: only NOT_SUBMITTED evidence sends a node back to READY.
"""

from __future__ import annotations

import json
import logging

from psycopg.rows import dict_row

from qtg_runner.executors.base import ExecutorError, NodeWork, RecoveryOutcome, RecoveryResult
from qtg_runner.log import event
from qtg_runner.loop import OPERATIONAL_ERRORS, WorkerContext

BATCH_SIZE = 16
RECOVERY_RETRY_SECONDS = 30.0


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT * FROM claim_recovery_nodes(%s, %s)", (worker_id, BATCH_SIZE))
        claims = await cur.fetchall()

    for claim in claims:
        work = NodeWork.from_claim(claim, ctx.network)
        try:
            try:
                result = await ctx.executor_for(work).recover(work)
            except ExecutorError as exc:
                result = RecoveryResult(
                    RecoveryOutcome.STILL_UNKNOWN,
                    {"error": str(exc)},
                    retry_after=exc.retry_after or RECOVERY_RETRY_SECONDS,
                )
            async with ctx.pool.connection() as conn:
                row = await (
                    await conn.execute(
                        "SELECT complete_recovery(%s, %s, %s, %s::jsonb, %s, %s::numeric)::text",
                        (
                            work.node_id,
                            work.claim_token,
                            result.outcome.value,
                            json.dumps(result.evidence),
                            result.external_ref,
                            result.retry_after,
                        ),
                    )
                ).fetchone()
            event(
                logging.INFO,
                "node_recovered",
                network=ctx.network,
                worker="node_recovery",
                movement=work.request_id,
                node=work.node_id,
                from_state=claim["node_state"],
                outcome=result.outcome.value,
                to_state=row[0] if row else None,
            )
        except OPERATIONAL_ERRORS as exc:
            # the recovery lease runs out and the node is claimed again
            event(
                logging.ERROR,
                "recovery_failed",
                network=ctx.network,
                worker="node_recovery",
                movement=work.request_id,
                node=work.node_id,
                error=f"{type(exc).__name__}: {exc}",
            )
    return len(claims)
