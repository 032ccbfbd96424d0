"""qtg_runner.chains.evm against a real anvil (the session's `local_chains`):
a USDC transfer signed through a Signer, broadcast, mined and read back; each
kind of node error triggered for real with anvil's own wording; a closed port
and a silent one as RpcUnavailable; an API key in the URL never in a message.

Each test uses fresh accounts funded with anvil_setBalance (the chains are the
session's) and mines with anvil_mine instead of waiting for interval blocks.
A transaction that must stay pending is sent with a nonce gap: anvil keeps it
queued, never mined, until the gap is filled."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import HTTPProvider, Web3

from qtg_runner.chains import evm
from qtg_runner.chains.evm import (
    EvmRpc,
    FeeCapExceeded,
    Fees,
    RpcError,
    RpcErrorKind,
    RpcUnavailable,
    Transfer,
)
from qtg_runner.ports import free_port
from qtg_runner.signers import SignedTransaction, Signer
from qtg_world.chains.local import RunningChain, load_artifact, rpc

pytestmark = pytest.mark.chain

T = TypeVar("T")

FEES = Fees(max_fee_per_gas=20 * 10**9, max_priority_fee_per_gas=10**9)
CAPS = {"max_fee_cap": 500 * 10**9, "priority_fee_cap": 50 * 10**9}


class LocalTestSigner:
    """A Signer over an eth-account key held by the test alone."""

    def __init__(self, account: LocalAccount) -> None:
        self._account = account

    @property
    def signer_id(self) -> str:
        return "test:" + self.address

    @property
    def address(self) -> str:
        return str(self._account.address).lower()

    async def sign_transaction(self, tx: dict[str, Any]) -> SignedTransaction:
        signed = self._account.sign_transaction(tx)
        return SignedTransaction(
            raw=bytes(signed.raw_transaction), tx_hash="0x" + signed.hash.hex()
        )


@dataclass
class Chain:
    running: RunningChain
    token: str

    @property
    def url(self) -> str:
        return self.running.rpc_url

    def control(self, method: str, *params: Any) -> Any:
        return rpc(self.url, method, params)

    def mine(self) -> None:
        self.control("anvil_mine", "0x1")

    def funded_signer(self, wei: int = 10**18) -> LocalTestSigner:
        signer = LocalTestSigner(Account.create())
        self.control("anvil_setBalance", signer.address, hex(wei))
        return signer

    def mint(self, to: str, amount: int) -> None:
        w3 = Web3(HTTPProvider(self.url, request_kwargs={"timeout": 10}))
        usdc = w3.eth.contract(
            address=Web3.to_checksum_address(self.token), abi=load_artifact("MockUSDC")["abi"]
        )
        tx_hash = usdc.functions.mint(Web3.to_checksum_address(to), amount).transact(
            {"from": self.running.deployer}
        )
        self.mine()
        receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=10, poll_latency=0.05)
        assert receipt["status"] == 1


@pytest.fixture
def chain(local_chains: list[RunningChain]) -> Chain:
    running = local_chains[0]
    return Chain(running, running.contracts["MockUSDC"].lower())


def run(make: Callable[[EvmRpc], Awaitable[T]], url: str, **kwargs: Any) -> T:
    """Run ``make(rpc)`` on a fresh EvmRpc (closed afterwards)."""

    async def main() -> T:
        async with EvmRpc(url, **kwargs) as client:
            return await make(client)

    return asyncio.run(main())


def self_tx(chain_id: int, signer: Signer, nonce: int, fees: Fees = FEES) -> dict[str, Any]:
    return evm.self_transfer(chain_id, signer.address, nonce, fees)


def signed(signer: Signer, tx: dict[str, Any]) -> SignedTransaction:
    return asyncio.run(evm.sign(signer, tx))


def send_error(chain: Chain, raw: bytes) -> RpcError:
    with pytest.raises(RpcError) as caught:
        run(lambda c: c.send_raw_transaction(raw), chain.url)
    return caught.value


def send(chain: Chain, raw: bytes) -> str:
    return run(lambda c: c.send_raw_transaction(raw), chain.url)


def wait_receipt(chain: Chain, tx_hash: str, timeout: float = 10.0) -> evm.Receipt:
    deadline = time.monotonic() + timeout
    while True:
        receipt = run(lambda c: c.receipt(tx_hash), chain.url)
        if receipt is not None:
            return receipt
        assert time.monotonic() < deadline, f"{tx_hash} not mined within {timeout}s"
        chain.mine()
        time.sleep(0.05)


# -- a USDC transfer end to end ------------------------------------------------------


def test_a_usdc_transfer_signed_sent_mined_and_decoded(chain: Chain) -> None:
    cid = chain.running.chain_id
    sender = chain.funded_signer()
    recipient = LocalTestSigner(Account.create()).address
    chain.mint(sender.address, 5_000_000)
    amount = 1_250_000

    async def prepare(c: EvmRpc) -> tuple[int, tuple[int, int], Fees, int, int]:
        # the chain mines every second: the base fee read before and after the
        # suggestion bound the one it was made from
        before = await c.base_fee()
        fees = await evm.suggest_fees(c, **CAPS)
        after = await c.base_fee()
        gas = await evm.estimate_gas(
            c, sender.address, chain.token, evm.transfer_calldata(recipient, amount)
        )
        nonce = await c.transaction_count(sender.address, "pending")
        return await c.chain_id(), (before, after), fees, gas, nonce

    chain_id, bases, fees, gas, nonce = run(prepare, chain.url)
    assert chain_id == cid and nonce == 0
    assert fees.max_priority_fee_per_gas <= CAPS["priority_fee_cap"]
    twice_base = fees.max_fee_per_gas - fees.max_priority_fee_per_gas
    assert twice_base % 2 == 0 and min(bases) <= twice_base // 2 <= max(bases)
    assert 30_000 < gas < 100_000

    tx = evm.build_transfer(cid, chain.token, recipient, amount, nonce, fees, gas)
    stx = signed(sender, tx)
    decoded = evm.decode_raw(stx.raw)
    assert (decoded.sender, decoded.nonce, decoded.chain_id) == (sender.address, 0, cid)
    assert (decoded.to, decoded.value, decoded.gas, decoded.fees) == (chain.token, 0, gas, fees)
    assert decoded.data == evm.transfer_calldata(recipient, amount)
    assert decoded.tx_hash == evm.tx_hash_of(stx.raw) == stx.tx_hash

    async def broadcast(c: EvmRpc) -> tuple[str, evm.Transaction | None, evm.Receipt | None]:
        tx_hash = await c.send_raw_transaction(stx.raw)
        return tx_hash, await c.transaction(tx_hash), await c.receipt(tx_hash)

    tx_hash, pending, _ = run(broadcast, chain.url)
    assert tx_hash == stx.tx_hash
    assert pending is not None and pending.sender == sender.address and pending.nonce == 0
    chain.mine()
    wait_receipt(chain, tx_hash)

    async def read_back(c: EvmRpc) -> Any:
        receipt = await c.receipt(tx_hash)
        assert receipt is not None
        block = await c.block(receipt.block_number)
        logs = await c.get_logs(
            address=chain.token,
            topics=[evm.TRANSFER_TOPIC, None, "0x" + bytes(12).hex() + recipient[2:]],
            from_block=receipt.block_number,
            to_block=receipt.block_number,
        )
        return (
            receipt,
            block,
            logs,
            await c.transaction(tx_hash),
            await evm.balance_of(c, chain.token, sender.address),
            await evm.balance_of(c, chain.token, recipient),
            await c.transaction_count(sender.address, "latest"),
        )

    receipt, block, logs, mined, sender_usdc, recipient_usdc, next_nonce = run(read_back, chain.url)
    assert receipt.succeeded and receipt.tx_hash == tx_hash
    assert (receipt.sender, receipt.to) == (sender.address, chain.token)
    assert block is not None and block.hash == receipt.block_hash
    assert tx_hash in block.tx_hashes
    assert receipt.gas_used <= gas
    assert max(bases) <= receipt.effective_gas_price <= fees.max_fee_per_gas
    assert mined is not None and mined.block_number == receipt.block_number
    transfers = evm.decode_transfers(receipt)
    assert transfers == [
        Transfer(chain.token, sender.address, recipient, amount, receipt.logs[0].log_index)
    ]
    assert [log.log_index for log in logs] == [transfers[0].log_index]
    assert (sender_usdc, recipient_usdc, next_nonce) == (5_000_000 - amount, amount, 1)


def test_reads_of_what_does_not_exist_answer_none(chain: Chain) -> None:
    async def reads(c: EvmRpc) -> tuple[Any, ...]:
        head = await c.block_number()
        return (
            head,
            await c.block(head + 10_000),
            await c.receipt("0x" + "11" * 32),
            await c.transaction("0x" + "11" * 32),
            await c.block("latest"),
            await c.block("finalized"),
            await c.block("safe"),
        )

    head, beyond, receipt, tx, latest, finalized, safe = run(reads, chain.url)
    assert (beyond, receipt, tx) == (None, None, None)
    assert latest is not None and latest.number >= head
    assert finalized is not None and safe is not None and finalized.number <= latest.number


def test_a_transfer_beyond_the_token_balance_is_refused_as_reverted(chain: Chain) -> None:
    sender = chain.funded_signer()
    data = evm.transfer_calldata(LocalTestSigner(Account.create()).address, 1)
    with pytest.raises(RpcError) as caught:
        run(lambda c: evm.estimate_gas(c, sender.address, chain.token, data), chain.url)
    assert caught.value.kind is RpcErrorKind.REVERTED, caught.value
    assert "execution reverted" in caught.value.message


# -- each node error for real -----------------------------------------------------------


def test_the_same_raw_transaction_twice_is_already_known_then_nonce_too_low(chain: Chain) -> None:
    cid = chain.running.chain_id
    signer = chain.funded_signer()
    gapped = signed(signer, self_tx(cid, signer, 1))
    send(chain, gapped.raw)  # nonce 1 while 0 is unused: queued, never mined yet
    error = send_error(chain, gapped.raw)
    assert error.kind is RpcErrorKind.ALREADY_KNOWN, error
    assert error.message == "transaction already imported"  # anvil's wording
    assert error.method == "eth_sendRawTransaction"

    first = signed(signer, self_tx(cid, signer, 0))
    send(chain, first.raw)
    chain.mine()
    assert run(lambda c: c.transaction_count(signer.address), chain.url) == 2
    # once mined, anvil answers a resend with "nonce too low", not "already known"
    for raw in (first.raw, gapped.raw):
        error = send_error(chain, raw)
        assert error.kind is RpcErrorKind.NONCE_TOO_LOW, error
        assert error.message == "nonce too low"


def test_a_new_transaction_at_a_consumed_nonce_is_nonce_too_low(chain: Chain) -> None:
    cid = chain.running.chain_id
    signer = chain.funded_signer()
    send(chain, signed(signer, self_tx(cid, signer, 0)).raw)
    chain.mine()
    other = signed(signer, self_tx(cid, signer, 0, Fees(40 * 10**9, 2 * 10**9)))
    error = send_error(chain, other.raw)
    assert error.kind is RpcErrorKind.NONCE_TOO_LOW, error
    assert run(lambda c: c.receipt(other.tx_hash), chain.url) is None


def test_a_replacement_needs_higher_fees_and_bump_gets_it_accepted(chain: Chain) -> None:
    cid = chain.running.chain_id
    signer = chain.funded_signer()
    target = LocalTestSigner(Account.create()).address
    original = signed(signer, self_tx(cid, signer, 1))
    send(chain, original.raw)  # queued behind the gap at nonce 0

    def at_nonce_1(fees: Fees, value: int) -> SignedTransaction:
        tx = evm.self_transfer(cid, signer.address, 1, fees) | {
            "to": Web3.to_checksum_address(target),
            "value": value,
        }
        return signed(signer, tx)

    same_fees = at_nonce_1(FEES, 1)
    error = send_error(chain, same_fees.raw)
    assert error.kind is RpcErrorKind.UNDERPRICED, error
    assert error.message == "replacement transaction underpriced"
    lower = at_nonce_1(Fees(FEES.max_fee_per_gas - 1, FEES.max_priority_fee_per_gas), 2)
    assert send_error(chain, lower.raw).kind is RpcErrorKind.UNDERPRICED

    # anvil takes any replacement whose max fee is higher (+5% here); geth wants
    # +10% on both caps: bump's 12.5% satisfies either
    plus_5 = Fees(FEES.max_fee_per_gas * 105 // 100, FEES.max_priority_fee_per_gas * 105 // 100)
    five = at_nonce_1(plus_5, 3)
    assert send(chain, five.raw) == five.tx_hash
    bumped = evm.bump(plus_5, **CAPS)
    assert bumped.max_fee_per_gas * 8 >= plus_5.max_fee_per_gas * 9
    assert bumped.max_priority_fee_per_gas * 8 >= plus_5.max_priority_fee_per_gas * 9
    replacement = at_nonce_1(bumped, 4)
    assert send(chain, replacement.raw) == replacement.tx_hash

    send(chain, signed(signer, self_tx(cid, signer, 0)).raw)  # fills the gap
    chain.mine()
    wait_receipt(chain, replacement.tx_hash)

    async def outcome(c: EvmRpc) -> tuple[Any, ...]:
        return (
            await c.receipt(replacement.tx_hash),
            await c.receipt(original.tx_hash),
            await c.receipt(five.tx_hash),
            await c.balance(target),
            await c.transaction_count(signer.address),
        )

    landed, never, never_either, target_wei, next_nonce = run(outcome, chain.url)
    assert landed is not None and landed.succeeded
    assert (never, never_either) == (None, None)  # replaced at the same nonce: no receipt
    assert (target_wei, next_nonce) == (4, 2)


def test_an_account_without_ether_is_insufficient_funds(chain: Chain) -> None:
    cid = chain.running.chain_id
    poor = LocalTestSigner(Account.create())
    error = send_error(chain, signed(poor, self_tx(cid, poor, 0)).raw)
    assert error.kind is RpcErrorKind.INSUFFICIENT_FUNDS, error
    assert error.message.startswith("Insufficient funds")  # anvil: "... for gas * price + value"
    # enough for no transaction's worst case either
    almost = chain.funded_signer(wei=21_000 * FEES.max_fee_per_gas - 1)
    error = send_error(chain, signed(almost, self_tx(cid, almost, 0)).raw)
    assert error.kind is RpcErrorKind.INSUFFICIENT_FUNDS, error


def test_a_fee_cap_below_the_base_fee_refuses_to_suggest(chain: Chain) -> None:
    base = run(lambda c: c.base_fee(), chain.url)
    assert base > 0
    # half the base fee: below it still after a few empty blocks (each lowers
    # it by at most 12.5%) between the read above and suggest_fees' own
    with pytest.raises(FeeCapExceeded, match="above the max fee cap"):
        run(lambda c: evm.suggest_fees(c, max_fee_cap=base // 2, priority_fee_cap=10**9), chain.url)
    # a cap between the base fee and 2 * base + tip: the cap is the max fee
    fees = run(lambda c: evm.suggest_fees(c, max_fee_cap=base + 1, priority_fee_cap=1), chain.url)
    assert fees == Fees(max_fee_per_gas=base + 1, max_priority_fee_per_gas=1)


def test_a_wrong_chain_id_is_refused(chain: Chain) -> None:
    signer = chain.funded_signer()
    error = send_error(chain, signed(signer, self_tx(chain.running.chain_id + 1, signer, 0)).raw)
    assert error.kind is RpcErrorKind.OTHER, error


# -- transport --------------------------------------------------------------------------


def test_a_closed_port_is_unavailable_and_the_api_key_never_shows() -> None:
    port = free_port()
    for url in (
        f"http://127.0.0.1:{port}/rpc?apikey=SECRET",
        f"http://user:SECRET@127.0.0.1:{port}/rpc",
        f"http://127.0.0.1:{port}/v3/SECRETSECRETSECRETSECRET1234",
    ):
        with pytest.raises(RpcUnavailable) as caught:
            run(lambda c: c.chain_id(), url)
        error = caught.value
        text = f"{error} {error!r} {error.__cause__!r} {error.__context__!r}"
        assert "SECRET" not in text
        assert f"127.0.0.1:{port}/" in str(error)
        assert "SECRET" not in repr(EvmRpc(url))


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield int(server.getsockname()[1])


def test_a_node_that_never_answers_is_unavailable_after_the_timeout(silent_port: int) -> None:
    url = f"http://127.0.0.1:{silent_port}/?key=SECRET"
    started = time.monotonic()
    with pytest.raises(RpcUnavailable, match=r"no answer within 0\.3s") as caught:
        run(lambda c: c.block_number(), url, timeout=0.3)
    assert time.monotonic() - started < 5
    assert "SECRET" not in str(caught.value)
