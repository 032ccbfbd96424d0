"""expiration_checker (sidecar): movements past expires_at -> EXPIRED, unless a
side effect has started (then the expiry is waived and the movement runs on)."""

from __future__ import annotations

import logging

from qtg_runner.log import event
from qtg_runner.loop import WorkerContext


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    async with ctx.pool.connection() as conn:
        row = await (
            await conn.execute("SELECT expire_movements(100, %s)", (worker_id,))
        ).fetchone()
    expired = int(row[0]) if row else 0
    if expired:
        event(
            logging.INFO,
            "movements_expired",
            network=ctx.network,
            worker="expiration_checker",
            count=expired,
        )
    return expired
