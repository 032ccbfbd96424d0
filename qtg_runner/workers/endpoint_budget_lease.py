"""endpoint_budget_lease (sidecar): the request budgets this process calls
through (qtg_runner.budget) shared with the other runner processes that call
the same endpoints, every few seconds, through the database (lease_endpoints).

Each budget's lease says the process uses the endpoint for LEASE_TTL_S more;
the answer is how many processes use it now (each takes that share of the
endpoint's rate) and the latest pause any of them was told by a 429, which
this process then honours too. A process that dies leaves a lease that
expires by itself: the others take its share back within LEASE_TTL_S."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from decimal import Decimal

from qtg_runner.budget import used_budgets
from qtg_runner.db import procs
from qtg_runner.loop import WorkerContext

WORKER = "endpoint_budget_lease"
LEASE_TTL_S = 15
"""How long a lease holds without renewal: three of the worker's intervals."""


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    budgets = {b.name: b for b in used_budgets()}
    if not budgets:
        return 0
    names = sorted(budgets)
    slowed = [
        datetime.fromtimestamp(s, UTC) if (s := budgets[n].slowed_until) is not None else None
        for n in names
    ]
    rows = await ctx.all(
        procs.lease_endpoints(ctx.instance_id, names, slowed, Decimal(LEASE_TTL_S))
    )
    for row in rows:
        budget = budgets[row.endpoint]
        before = budget.sharers
        budget.leased(row.sharers, row.slowed_until.timestamp() if row.slowed_until else None)
        if budget.sharers != before:
            ctx.log(
                logging.INFO,
                "endpoint_shared",
                WORKER,
                endpoint=row.endpoint,
                sharers=budget.sharers,
                rate=round(budget.rate, 3),
            )
    return 0
