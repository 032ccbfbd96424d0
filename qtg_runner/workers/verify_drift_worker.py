"""verify_drift_worker (sidecar): the balances read against the engine's records.

Each round calls verify_drift (in SQL) until it finds no snapshot left to
verify. The rule lives there (node_balance_effects, balance_expectations): for
each account, the expected range of its balance from its baseline and the
side-effect nodes that touched it, landed for certain, perhaps, or not yet
(what was decided for good more than five minutes before is summed once, in
the account's anchor);
an unexplained change beyond the network's drift threshold raises the
account's one open alert and trips the breakers of the lanes and venues that
touch it, by this worker. After the round it calls prune_balance_snapshots
once, whose rule is in SQL too: the verified snapshots past the network's
snapshot_keep_days go (a baseline, an alert's and each account's newest
stay). This module only calls them and logs what they did.
"""

from __future__ import annotations

import logging

from qtg_runner.db import procs
from qtg_runner.loop import WorkerContext

WORKER = "verify_drift_worker"
BATCH_SIZE = 200
MAX_ROUNDS = 10
"""verify_drift calls a tick makes back to back while they come back full."""
PRUNE_SIZE = 1000
"""Snapshots prune_balance_snapshots deletes at most a tick (a minute's reads of
a thousand accounts; a backlog goes over the next ticks)."""


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    done = await run_round(ctx, worker_id)
    pruned = await ctx.one(procs.prune_balance_snapshots(worker_id, PRUNE_SIZE))
    if pruned:
        ctx.log(logging.INFO, "balance_snapshots_pruned", WORKER, count=pruned)
    return done


async def run_round(ctx: WorkerContext, worker_id: str) -> int:
    """Every unverified snapshot verified (up to MAX_ROUNDS batches); how many."""
    done = 0
    for _ in range(MAX_ROUNDS):
        rows = await ctx.all(procs.verify_drift(worker_id, BATCH_SIZE))
        done += len(rows)
        for row in rows:
            if row.outcome == "DRIFT":
                ctx.log(
                    logging.ERROR,
                    "balance_drift",
                    WORKER,
                    alert=row.alert_id,
                    account=f"{row.account_kind}:{row.account_key}:{row.address}",
                    asset=row.asset,
                    actual=row.actual,
                    expected=f"{row.expected_low}..{row.expected_high}",
                    snapshot=row.snapshot_id,
                )
        if len(rows) < BATCH_SIZE:
            break
    return done
