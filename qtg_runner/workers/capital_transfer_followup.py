"""capital_transfer_followup (sidecar, the seed's name): a transfer that landed
at an exchange's deposit address is followed until the exchange credits it.

A transfer is followed from the moment it lands: the SQL that completes an
evm_transfer node into a venue's deposit address makes its WAITING followup in
the same transaction (a plan with a bybit_deposit step after the transfer is
left out: that step waits for the credit itself, inside the movement). Each
round, claim_capital_transfers hands out the followups due a check. For each,
the venue's deposit records of the transaction
(GET /v5/asset/deposit/query-record) decide, reported through
record_capital_transfer_check:

    none yet, or to be confirmed / processing   PENDING: checked again later
    all credited (status 3)                     CREDITED with their amount; the
                                                SQL keeps it CREDITED when it is
                                                the movement's amount, MISMATCH
                                                otherwise
    failed (status 4)                           FAILED
    the venue out of reach, or this runner      ERROR: checked again later
    without its settings

The view capital_transfer_mismatches shows what needs an operator: an amount
mismatch, a failed deposit, or a deposit still not credited past its deadline
(three bybit-deposit lane baselines after it landed). The followup never
moves a node: the movement finished when its transfer was final on the chain.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal

import psycopg

from qtg_runner.db import procs
from qtg_runner.exchanges.bybit import DEPOSIT_FAILED, BybitError, BybitUnavailable
from qtg_runner.executors.base import ExecutorError
from qtg_runner.executors.venues import VenueClients, deposit_evidence, deposits_for
from qtg_runner.loop import WorkerContext

WORKER = "capital_transfer_followup"
BATCH_SIZE = 50
RECHECK_S = 30.0
"""When a deposit not credited yet is looked at again."""
LOOK_BEFORE = timedelta(days=1)
"""How far before the transfer's node completed the venue's records are read:
the venue records a deposit when it sees it mined, before our finality depth."""
REFUSALS = frozenset({"QT002", "QT005", "QT011"})


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    return await run_round(ctx)


async def run_round(ctx: WorkerContext, env: Mapping[str, str] | None = None) -> int:
    """One round: the due followups checked at their venues; how many."""
    venues = VenueClients(env)
    try:
        rows = await ctx.all(procs.claim_capital_transfers(BATCH_SIZE))
        for row in rows:
            await _check(ctx, venues, row)
    finally:
        await venues.aclose()
    return len(rows)


async def _check(ctx: WorkerContext, venues: VenueClients, row: procs.CapitalTransfer) -> None:
    status, amount, record, error, retry_after = "PENDING", None, None, None, RECHECK_S
    try:
        client = venues.client(row.venue_key, row.kind, row.base_url_env, row.key_file_env)
        since_ms = int((row.landed_at - LOOK_BEFORE).timestamp() * 1000)
        records = await deposits_for(
            client, row.coin, row.venue_chain, row.tx_hash, row.deposit_address, since_ms
        )
    except (BybitError, BybitUnavailable, ExecutorError) as exc:
        status, error = "ERROR", ctx.limits.text(str(exc))
        hint = getattr(exc, "retry_after", None)
        if hint is not None:
            retry_after = float(hint)
    else:
        record = deposit_evidence(records)
        if any(r.status == DEPOSIT_FAILED for r in records):
            status = "FAILED"
        elif records and all(r.credited for r in records):
            status = "CREDITED"
            amount = sum((r.amount for r in records), Decimal(0))
    try:
        async with ctx.pool.connection() as conn:
            state = await procs.record_capital_transfer_check(
                row.node_id,
                status,
                amount,
                ctx.limits.document(record) if record is not None else None,
                error,
                retry_after,
            ).aone(conn)
    except psycopg.Error as exc:
        if exc.sqlstate not in REFUSALS:
            raise
        ctx.log(logging.ERROR, "followup_refused", WORKER, node=row.node_id, error=exc.sqlstate)
        return
    level = logging.WARNING if state in ("MISMATCH", "FAILED") or error else logging.INFO
    if state != "WAITING" or error:
        ctx.log(
            level,
            "capital_transfer_checked",
            WORKER,
            node=row.node_id,
            movement=row.request_id,
            venue=row.venue_key,
            tx=row.tx_hash,
            state=state,
            error=error,
        )
