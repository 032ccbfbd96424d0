"""balance_snapshot (sidecar): what the treasury holds, read from the outside.

Each round, begin_balance_read (in SQL) takes the database clock before
anything is read and hands out the accounts: every treasury account on every
registered chain with its USDC, and every exchange venue's FUND account. The
sidecar reads them all at once (a chain: its head block, then balanceOf at
that block for each account; a venue: its FUND balance over the signed API)
and records them through record_balance_snapshots. A chain or a venue that
cannot be read (down, a timeout, this runner without its URL's variable) is
recorded as a failed read with why, never as a zero. verify_drift_worker
compares the snapshots with what the engine's records expect.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from qtg_runner.chains.evm import balance_of
from qtg_runner.chains.evm_rpc import EvmRpc, EvmRpcError, redact_url
from qtg_runner.db import procs
from qtg_runner.exchanges.bybit import BybitError, BybitUnavailable
from qtg_runner.executors.base import ExecutorError
from qtg_runner.executors.venues import VenueClients
from qtg_runner.loop import WorkerContext

WORKER = "balance_snapshot"
READ_TIMEOUT_S = 20.0
"""How long one chain's or venue's reads may take before they count as failed."""
ERROR_CHARS = 500


@dataclass(frozen=True)
class Read:
    """What was read for one account: a balance (and the block), or why not."""

    account: procs.BalanceAccount
    balance: Decimal | None
    block: int | None = None
    error: str | None = None


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    """One read of every account per tick. Returns 0: a read is not a queue
    drained, so the loop sleeps its interval before the next one (a count would
    make it read again at once, in a loop a venue's rate limit stops)."""
    await run_round(ctx)
    return 0


async def run_round(ctx: WorkerContext, env: Mapping[str, str] | None = None) -> int:
    """One read of every account, recorded; how many accounts."""
    environ = os.environ if env is None else env
    accounts = await ctx.all(procs.begin_balance_read())
    if not accounts:
        return 0
    reads = await read_all(accounts, environ)
    async with ctx.pool.connection() as conn:
        await record(reads).aone(conn)
    failed = [r for r in reads if r.error is not None]
    if failed:
        ctx.log(
            logging.WARNING,
            "balance_reads_failed",
            WORKER,
            read=accounts[0].read_id,
            failed=len(failed),
            accounts=len(reads),
            first=f"{failed[0].account.account_key}: {failed[0].error}",
        )
    return len(reads)


def record(reads: Sequence[Read]) -> procs.Call[int]:
    """The record_balance_snapshots call for one read's results."""
    return procs.record_balance_snapshots(
        reads[0].account.read_id,
        [r.account.account_kind for r in reads],
        [r.account.account_key for r in reads],
        [r.account.address for r in reads],
        [r.account.asset for r in reads],
        [r.balance for r in reads],
        [r.block for r in reads],
        [r.error[:ERROR_CHARS] if r.error is not None else None for r in reads],
    )


async def read_all(accounts: Sequence[procs.BalanceAccount], env: Mapping[str, str]) -> list[Read]:
    """Every account read, the chains and venues concurrently, each group under
    READ_TIMEOUT_S."""
    groups: dict[tuple[str, str], list[procs.BalanceAccount]] = defaultdict(list)
    for account in accounts:
        groups[account.account_kind, account.account_key].append(account)
    venues = VenueClients(env)
    try:
        results = await asyncio.gather(
            *(
                _guarded(kind, members, env, venues)
                for (kind, _key), members in sorted(groups.items())
            )
        )
    finally:
        await venues.aclose()
    return [read for group in results for read in group]


async def _guarded(
    kind: str, members: list[procs.BalanceAccount], env: Mapping[str, str], venues: VenueClients
) -> list[Read]:
    try:
        reading = _read_chain(members, env) if kind == "chain" else _read_venue(members, venues)
        return await asyncio.wait_for(reading, READ_TIMEOUT_S)
    except TimeoutError:
        why = f"no answer within {READ_TIMEOUT_S:g} s"
        return [Read(m, None, error=why) for m in members]
    except (EvmRpcError, BybitError, BybitUnavailable, ExecutorError, ValueError, OSError) as exc:
        why = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
        return [Read(m, None, error=why) for m in members]


async def _read_chain(members: list[procs.BalanceAccount], env: Mapping[str, str]) -> list[Read]:
    """One chain's accounts at one block: its head, then balanceOf there."""
    first = members[0]
    assert first.rpc_url_env is not None
    url = env.get(first.rpc_url_env)
    if not url:
        why = f"the environment variable {first.rpc_url_env} is not set in this runner"
        return [Read(m, None, error=why) for m in members]
    async with EvmRpc(url, timeout=READ_TIMEOUT_S / 2) as rpc:
        try:
            block = await rpc.block_number()
            reads = []
            for m in members:
                assert m.token_address is not None and m.decimals is not None
                units = await balance_of(rpc, m.token_address, m.address, tag=block)
                reads.append(Read(m, Decimal(units).scaleb(-m.decimals), block))
            return reads
        except EvmRpcError as exc:
            why = f"{type(exc).__name__} from {redact_url(url)}: {exc}"
            return [Read(m, None, error=why[:ERROR_CHARS]) for m in members]


async def _read_venue(members: list[procs.BalanceAccount], venues: VenueClients) -> list[Read]:
    """A venue's FUND balance of each asset over its signed API."""
    first = members[0]
    assert (
        first.venue_kind is not None
        and first.base_url_env is not None
        and first.key_file_env is not None
    )
    client = venues.client(
        first.account_key, first.venue_kind, first.base_url_env, first.key_file_env
    )
    return [Read(m, await client.fund_balance(m.asset)) for m in members]
