"""The balance sidecars against the real local chains, as a runner login: the
balance_snapshot sidecar reads every treasury account's USDC at one block per
chain (what balanceOf says there), a chain it cannot reach is recorded as a
failed read, never as a zero, and a transfer made outside the engine (a raw
ERC-20 transfer signed with a treasury key) is seen by verify_drift_worker as
drift: one alert for the operators. No breaker trips: nothing of the engine's
moved that account, and a reading is one runner's word (it trips only the
scopes of the nodes that moved an account, from a baseline an operator
confirmed)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
from chain_support import LocalChainSet
from eth_account import Account
from evm_support import NETWORK, register_world, superuser, usdc_balance, web3_of
from web3 import Web3

from qtg_runner.chains.evm import transfer_calldata
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.loop import WorkerContext
from qtg_runner.signers import SignedTransaction, load
from qtg_runner.workers import balance_snapshot, verify_drift_worker

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def as_runner(db: Any, work: Callable[[WorkerContext], Awaitable[int]]) -> int:
    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "balances-test")
        async with open_pool(conninfo, name="balances-test") as pool:
            return await work(WorkerContext(NETWORK, pool, {}, "balances-test:1"))

    return asyncio.run(scenario())


def stolen(chain_set: LocalChainSet, units: int) -> str:
    """A raw USDC transfer of ``units`` from the first treasury key on the first
    chain to an address nobody knows, outside the engine; its hash once mined."""
    chain, key = chain_set.chains[0], chain_set.treasury[0]
    signer = load(key.signer_id, chain_set.runner_env())
    w3 = web3_of(chain)
    sender = Web3.to_checksum_address(signer.address)
    base_fee = int(w3.eth.get_block("latest")["baseFeePerGas"])  # type: ignore[typeddict-item]
    tx = {
        "type": 2,
        "chainId": chain.chain_id,
        "nonce": w3.eth.get_transaction_count(sender, "pending"),
        "maxPriorityFeePerGas": 10**9,
        "maxFeePerGas": 2 * base_fee + 10**9,
        "gas": 100_000,
        "to": Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        "value": 0,
        "data": transfer_calldata(Account.create().address, units),
    }
    signed = asyncio.run(signer.sign_transaction(tx))
    assert isinstance(signed, SignedTransaction)
    sent = w3.eth.send_raw_transaction(signed.raw)
    receipt = w3.eth.wait_for_transaction_receipt(
        sent, timeout=chain.block_time * 10, poll_latency=0.1
    )
    assert receipt["status"] == 1
    return "0x" + bytes(sent).hex()


def test_the_sidecars_read_the_chains_and_see_a_transfer_made_outside_the_engine(
    db: Any, local_chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = superuser(db)
    register_world(conn, local_chain_set)
    env = local_chain_set.runner_env()
    accounts = [(c, k.address) for c in local_chain_set.chains for k in local_chain_set.treasury]

    def snapshot(environ: dict[str, str]) -> int:
        return as_runner(db, lambda ctx: balance_snapshot.run_round(ctx, environ))

    def verify() -> int:
        return as_runner(
            db, lambda ctx: verify_drift_worker.run_round(ctx, "verify_drift_worker@test")
        )

    # what balanceOf says, at the block recorded
    assert snapshot(env) == len(accounts)
    rows = conn.execute(
        "SELECT account_key, address, balance, block_number FROM balance_snapshots ORDER BY id"
    ).fetchall()
    for c, address in accounts:
        [(balance, block)] = [(r[2], r[3]) for r in rows if (r[0], r[1]) == (c.key, address)]
        assert balance == Decimal(usdc_balance(c, address)) / 10**6 and block > 0
    assert verify() == len(accounts)
    assert conn.execute("SELECT count(*) FROM balance_baselines").fetchone() == (len(accounts),)

    # the worker's batch reads once and tells its loop nothing more is waiting, so
    # the next read comes an interval later, never at once (a venue rate-limits)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    [(reads,)] = conn.execute("SELECT count(*) FROM balance_reads").fetchall()
    assert as_runner(db, lambda ctx: balance_snapshot.batch(ctx, "balance_snapshot@test")) == 0
    assert conn.execute("SELECT count(*) FROM balance_reads").fetchone() == (reads + 1,)

    # a chain out of reach: a failed read with why, never a zero
    down = {**env, next(k for k in env if k.startswith("QTG_RPC_")): "http://127.0.0.1:9"}
    assert snapshot(down) == len(accounts)
    failed = conn.execute(
        "SELECT count(*), bool_and(error LIKE '%%127.0.0.1:9%%') FROM balance_snapshots"
        " WHERE balance IS NULL"
    ).fetchone()
    assert failed == (len(local_chain_set.treasury), True)

    # 3 USDC leave a treasury key outside the engine
    stolen(local_chain_set, 3 * 10**6)
    assert snapshot(env) == len(accounts)
    verify()
    chain, victim = local_chain_set.chains[0], local_chain_set.treasury[0].address
    alerts = conn.execute(
        "SELECT account_key, address, unexplained, breakers FROM drift_alerts"
        " WHERE alert_state = 'OPEN'"
    ).fetchall()
    assert alerts == [(chain.key, victim, Decimal("-3"), [])]
    assert conn.execute("SELECT count(*) FROM breakers").fetchone() == (0,)
