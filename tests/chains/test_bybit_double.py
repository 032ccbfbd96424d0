"""The fake Bybit on the local chains, through the client over loopback: a
withdrawal walks SecurityCheck -> Pending -> BlockchainConfirmed -> success and
its USDC really arrives from the exchange's hot wallet; the Fail and Reject
branches send nothing and give the money back; a USDC transfer to the deposit
address is credited to FUND only after its confirmations.

The exchange runs at time scale 0.005 (a minute of the walk is 0.3 s); every
wait is a poll bounded by a deadline."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from typing import Any, TypeVar

import pytest
from chain_support import TEST_KDF_ITERATIONS, LocalChainSet
from eth_account import Account
from evm_support import head, transfers_from, usdc_balance

from qtg_runner import signers
from qtg_runner.chains.evm import (
    EvmRpc,
    build_transfer,
    estimate_gas,
    sign,
    suggest_fees,
    transfer_calldata,
)
from qtg_runner.exchanges.bybit import BybitClient, DepositRecord, WithdrawalRecord
from qtg_world.bybit import (
    BybitConfig,
    BybitHandle,
    ExchangeKeys,
    bybit_chain,
    ensure_exchange_keys,
    serve,
)
from qtg_world.chains.registry import fund_treasury

pytestmark = [pytest.mark.chain, pytest.mark.slow]

KEY = "chainkey1"
SECRET = "chain-secret-not-for-logs-9876543210"
DEADLINE_S = 30.0
DEPOSIT_CONFIRMATIONS = 3
T = TypeVar("T")


class World:
    def __init__(self, chain_set: LocalChainSet, keys: ExchangeKeys, handle: BybitHandle) -> None:
        self.chain_set = chain_set
        self.keys = keys
        self.handle = handle
        self.chain = chain_set.chains[0]

    def call(self, make: Callable[[BybitClient], Awaitable[T]]) -> T:
        async def go() -> T:
            async with BybitClient(self.handle.url, KEY, SECRET) as client:
                return await make(client)

        return asyncio.run(go())

    def withdraw(self, address: str, amount: Decimal, request_id: str) -> str:
        return self.call(
            lambda c: c.withdraw(
                coin="USDC",
                chain=self.chain.key,
                address=address,
                amount=amount,
                request_id=request_id,
            )
        )

    def follow(self, withdraw_id: str) -> tuple[list[str], WithdrawalRecord]:
        """Poll the withdrawal until it is terminal: the statuses seen, the last record."""
        seen: list[str] = []
        deadline = time.monotonic() + DEADLINE_S
        while True:
            record = self.call(lambda c: c.withdrawal(withdraw_id))
            assert record is not None
            if not seen or seen[-1] != record.status:
                seen.append(record.status)
            if record.terminal:
                return seen, record
            assert time.monotonic() < deadline, f"withdrawal {withdraw_id} stuck: {seen}"
            time.sleep(0.02)


@pytest.fixture(scope="module")
def world(local_chain_set: LocalChainSet) -> Iterator[World]:
    keys = ensure_exchange_keys(local_chain_set.state_dir, kdf_iterations=TEST_KDF_ITERATIONS)
    for chain in local_chain_set.chains:
        fund_treasury(chain, [keys.hot])
    hot = signers.load(keys.hot.signer_id, env=local_chain_set.runner_env())
    chains = [
        bybit_chain(c, keys.deposit.address, deposit_confirmations=DEPOSIT_CONFIRMATIONS)
        for c in local_chain_set.chains
    ]
    config = BybitConfig(time_scale=0.005, tick_s=0.02)
    handle = serve(chains, {KEY: SECRET}, hot, config)
    try:
        yield World(local_chain_set, keys, handle)
    finally:
        handle.stop()


def fresh_address() -> str:
    return str(Account.create().address).lower()


def test_a_withdrawal_walks_to_success_and_its_usdc_arrives(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    chain = world.chain
    recipient = fresh_address()
    world.handle.whitelist(recipient, chain=chain.key)
    world.handle.credit(Decimal(500))
    before = world.handle.balance()
    hot_before = usdc_balance(chain, world.keys.hot.address)
    start_block = head(chain)

    wid = world.withdraw(recipient, Decimal("123.456789"), "walk1")
    seen, record = world.follow(wid)

    # the double's own walk, from its log: created in SecurityCheck, then each
    # status it moved to; a client polling sees these in order, though it may
    # miss a short one (the walk runs on the double's scaled clock)
    walk = ["SecurityCheck", "Pending", "BlockchainConfirmed", "success"]
    moved = re.compile(rf"event=bybit_double_withdrawal_status id={wid} status=(\w+)$")
    walked = ["SecurityCheck"] + [
        m.group(1) for r in caplog.records if (m := moved.search(r.getMessage()))
    ]
    assert walked[-1] == "success" and [s for s in walk if s in walked] == walked, walked
    assert seen[-1] == "success" and [s for s in walked if s in seen] == seen, (seen, walked)
    assert record.tx_id.startswith("0x") and len(record.tx_id) == 66
    assert usdc_balance(chain, recipient) == 123_456_789
    assert usdc_balance(chain, world.keys.hot.address) == hot_before - 123_456_789
    assert transfers_from(chain, world.keys.hot.address, start_block) == [(recipient, 123_456_789)]
    assert world.handle.balance() == before - Decimal("123.456789")
    # found again by its transaction, as recovery without the id would
    by_tx = world.call(lambda c: c.withdrawals(tx_id=record.tx_id))
    assert [r.withdraw_id for r in by_tx.rows] == [wid]
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


@pytest.mark.parametrize("outcome", ["Fail", "Reject"])
def test_the_fail_and_reject_branches_send_nothing(world: World, outcome: Any) -> None:
    chain = world.chain
    recipient = fresh_address()
    world.handle.whitelist(recipient)
    world.handle.credit(Decimal(50))
    before = world.handle.balance()
    world.handle.inject_outcome(outcome, address=recipient)

    wid = world.withdraw(recipient, Decimal(50), f"branch{outcome}")
    assert world.handle.balance() == before - 50
    seen, record = world.follow(wid)

    expected = (
        ["SecurityCheck", "Pending", "Fail"] if outcome == "Fail" else ["SecurityCheck", "Reject"]
    )
    assert seen == expected
    assert record.tx_id == ""
    assert usdc_balance(chain, recipient) == 0
    assert world.handle.balance() == before
    # the injection was for one withdrawal: the next to the same address pays
    again = world.withdraw(recipient, Decimal(1), f"after{outcome}")
    assert world.follow(again)[1].status == "success"
    assert usdc_balance(chain, recipient) == 1_000_000


def test_a_deposit_is_credited_after_its_confirmations(world: World) -> None:
    chain = world.chain
    addresses = world.call(lambda c: c.deposit_addresses("USDC", chain.key))
    assert [a.address for a in addresses] == [world.keys.deposit.address]
    deposit_address = addresses[0].address
    before = world.handle.balance()
    treasury = world.chain_set.treasury[0]
    signer = signers.load(treasury.signer_id, env=world.chain_set.runner_env())
    amount = 42_500_000

    async def send() -> str:
        async with EvmRpc(chain.rpc_url) as rpc:
            data = transfer_calldata(deposit_address, amount)
            usdc = chain.contracts["MockUSDC"]
            tx = build_transfer(
                chain.chain_id,
                usdc,
                deposit_address,
                amount,
                await rpc.transaction_count(signer.address, "pending"),
                await suggest_fees(rpc, max_fee_cap=10**12, priority_fee_cap=10**10),
                await estimate_gas(rpc, signer.address, usdc, data),
            )
            signed = await sign(signer, tx)
            return await rpc.send_raw_transaction(signed.raw)

    tx_hash = asyncio.run(send())

    statuses: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    record: DepositRecord | None = None
    while True:
        # the balance first: the double credits it with the status 3, so a record
        # read after it that is not 3 yet was not 3 when the balance was read
        balance = world.handle.balance()
        page = world.call(lambda c: c.deposits(coin="USDC"))
        record = next((r for r in page.rows if r.tx_id == tx_hash), None)
        if record is not None:
            if not statuses or statuses[-1] != record.status:
                statuses.append(record.status)
            if record.status != 3:
                # nothing is credited before the deposit is
                assert balance == before
                if record.status == 1:
                    assert record.confirmations < DEPOSIT_CONFIRMATIONS
            else:
                break
        assert time.monotonic() < deadline, f"deposit {tx_hash} not credited: {statuses}"
        time.sleep(0.05)

    assert statuses[-1] == 3 and statuses == sorted(statuses) and 1 in statuses
    assert record.confirmations >= DEPOSIT_CONFIRMATIONS
    assert record.amount == Decimal("42.5") and record.chain == chain.key
    assert record.to_address == deposit_address and record.success_at_ms > 0
    assert world.handle.balance() == before + Decimal("42.5")
    assert world.call(lambda c: c.fund_balance("USDC")) == before + Decimal("42.5")
