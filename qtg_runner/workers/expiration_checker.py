"""expiration_checker (sidecar): movements past expires_at -> EXPIRED, unless a
side effect has started (then the expiry is waived and the movement runs on)."""

from __future__ import annotations

import logging

from qtg_runner.db import procs
from qtg_runner.log import event
from qtg_runner.loop import WorkerContext

BATCH_SIZE = 100


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn:
        expired = await procs.expire_movements(BATCH_SIZE, worker_id).aone(conn)
    if expired:
        event(
            logging.INFO,
            "movements_expired",
            network=ctx.network,
            worker="expiration_checker",
            count=expired,
        )
    return expired
