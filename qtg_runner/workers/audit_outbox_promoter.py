"""audit_outbox_promoter (sidecar, the seed's name): moves the audit rows every
procedure writes into audit_outbox into the network's append-only audit_log,
each chained to the one before by SHA-256 with the login that wrote it
(promote_audit, which deletes what it promoted from the outbox), so that an
edited, removed or inserted row is found by verify_audit_chain (`qtg audit
verify`). It runs until the outbox is empty, a batch a transaction."""

from __future__ import annotations

import logging

from qtg_runner.db import procs
from qtg_runner.loop import WorkerContext

BATCH_SIZE = 1000
MAX_BATCHES = 20
"""A tick promotes at most this many batches, so a large backlog never holds
the worker past its heartbeat for long."""


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    promoted = 0
    for _ in range(MAX_BATCHES):
        count = await ctx.one(procs.promote_audit(worker_id, BATCH_SIZE))
        promoted += count
        if count < BATCH_SIZE:
            break
    if promoted:
        ctx.log(logging.DEBUG, "audit_promoted", "audit_outbox_promoter", count=promoted)
    return promoted
