"""template_proposal_expiration (sidecar, the seed's name): configuration
proposals (lane pacing, templates, executor configuration) past expires_at
-> EXPIRED, audited. approve_proposal refuses an expired proposal already;
this closes it, so open_proposals and the audit log say what became of it."""

from __future__ import annotations

import logging

from qtg_runner.db import procs
from qtg_runner.log import event
from qtg_runner.loop import WorkerContext

BATCH_SIZE = 100


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn:
        expired = await procs.expire_proposals(BATCH_SIZE, worker_id).aone(conn)
    if expired:
        event(
            logging.INFO,
            "proposals_expired",
            network=ctx.network,
            worker="template_proposal_expiration",
            count=expired,
        )
    return expired
