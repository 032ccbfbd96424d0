"""Reads asked in one moment go to the chain together
(qtg_runner.chains.evm_rpc): shared reads as one eth_call of Multicall3's
aggregate3, on a local chain that carries Multicall3's runtime code,
compiled from the source @chainlink/contracts publishes, at the address it
has on every public network (qtg_world.chains.local.place_multicall3); log
searches of one contract up to the head as one eth_getLogs.

Pins, counted at the wire by the throttling double in front of the chain:
token balances and ether balances asked together are one request, each
answered as it is when read alone; a read that fails in the batch is asked
alone (a revert then its own REVERTED), the others answered; a limit the
provider answers to the batch fails its reads and leaves Multicall3 in
use; a chain without Multicall3 at the address is read one call at a time,
and asked once; two log searches of a
contract for different topics are one request, each answered with what it
alone finds; one the provider refuses when merged (a range stretched by the
oldest search) is asked again search by search, so the oldest fails alone.

Calls asked in one moment go as one JSON-RPC batch, each answered by its id
as it alone would be: a submit's reads asked together (the pending count,
the base fee, the tip, the gas estimate) are one HTTP request of four calls;
a call that fails in the batch (an estimate that reverts) raises its own
error, the others answered; a broadcast always goes alone. Behind a provider
that refuses batches (a loopback one that answers a JSON array with one
error object, as providers without batch support do) the calls are asked
again one by one, answered alike, and every later moment goes call by call;
a 429 answered to a batch fails each of its calls as throttled, and batches
stay in use.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from chain_support import anvil_or_skip
from endpoint_support import Loopback
from eth_utils.crypto import keccak

from qtg_runner.chains.evm import ERC20_TRANSFER, balance_of
from qtg_runner.chains.evm_rpc import MULTICALL3, EvmRpc, RpcError, RpcErrorKind, RpcThrottled
from qtg_world import throttle
from qtg_world.chains.local import RunningChain, load_artifact, rpc
from qtg_world.json_http import JsonHandler

pytestmark = pytest.mark.chain

SHARED_S = 60.0
"""A shared read's age: the reads of a test are all one moment's."""


@pytest.fixture
def chain(local_chains: list[RunningChain]) -> RunningChain:
    anvil_or_skip()
    return local_chains[0]


@pytest.fixture
def counted(chain: RunningChain) -> Iterator[Any]:
    """The chain behind a counting double (no limit to speak of)."""
    handle = throttle.serve(chain.rpc_url, rate_per_s=10_000)
    try:
        yield handle
    finally:
        handle.stop()


def accounts(chain: RunningChain) -> list[str]:
    return [str(a).lower() for a in rpc(chain.rpc_url, "eth_accounts")[:3]]


def run(url: str, reads: Any) -> Any:
    async def main() -> Any:
        async with EvmRpc(url) as client:
            return await reads(client)

    return asyncio.run(main())


def test_reads_asked_together_are_one_request_each_answered_as_alone(
    chain: RunningChain, counted: Any
) -> None:
    usdc = chain.contracts["MockUSDC"]
    owners = accounts(chain)

    async def alone(client: EvmRpc) -> list[int]:
        tokens = [await balance_of(client, usdc, a) for a in owners]
        return tokens + [await client.balance(a) for a in owners]

    async def together(client: EvmRpc) -> list[int]:
        return list(
            await asyncio.gather(
                *(balance_of(client, usdc, a, max_age_s=SHARED_S) for a in owners),
                *(client.balance(a, max_age_s=SHARED_S) for a in owners),
            )
        )

    expected = run(counted.url, alone)
    assert sum(expected[3:]) > 0  # anvil's accounts hold ether
    counted.reset_counts()
    assert run(counted.url, together) == expected
    assert dict(counted.counts().asked) == {"eth_call": 1}


def test_a_read_that_fails_in_the_batch_is_asked_alone_the_others_answered(
    chain: RunningChain, counted: Any
) -> None:
    usdc = chain.contracts["MockUSDC"]
    owner, other, _ = accounts(chain)
    # transferFrom with no allowance: reverts, alone and in the batch alike
    word = bytes(12) + bytes.fromhex(other[2:])
    reverting = (
        keccak(text="transferFrom(address,address,uint256)")[:4]
        + word
        + word
        + (1).to_bytes(32, "big")
    )

    async def mixed(client: EvmRpc) -> list[Any]:
        return list(
            await asyncio.gather(
                balance_of(client, usdc, owner, max_age_s=SHARED_S),
                client.call(usdc, reverting, max_age_s=SHARED_S),
                client.balance(owner, max_age_s=SHARED_S),
                return_exceptions=True,
            )
        )

    with pytest.raises(RpcError) as alone:
        run(counted.url, lambda client: client.call(usdc, reverting))
    assert alone.value.kind is RpcErrorKind.REVERTED
    counted.reset_counts()
    held, refused, ether = run(counted.url, mixed)
    assert isinstance(refused, RpcError) and refused.kind is RpcErrorKind.REVERTED
    assert isinstance(held, int) and isinstance(ether, int) and ether > 0
    # the batch, then the failed read alone: its answer is the chain's own
    # (a messenger without minFee() and a call starved of gas look alike in a
    # batch, and CCTP's fee floor must not be guessed)
    assert dict(counted.counts().asked) == {"eth_call": 2}


@pytest.mark.parametrize("there", ["nothing", "another contract"])
def test_a_chain_without_multicall3_is_read_one_call_at_a_time(
    chain: RunningChain, counted: Any, there: str
) -> None:
    """Nothing at the address answers an empty word; another contract (a
    token's code, which has no aggregate3) refuses the call: either way each
    read is made alone, as it was, and aggregate3 is not asked again."""
    usdc = chain.contracts["MockUSDC"]
    owners = accounts(chain)

    async def twice(client: EvmRpc) -> list[int]:
        first = await asyncio.gather(
            *(balance_of(client, usdc, a, max_age_s=SHARED_S) for a in owners),
            client.balance(owners[0], max_age_s=SHARED_S),
        )
        again = await asyncio.gather(
            *(client.balance(a, max_age_s=SHARED_S) for a in owners[1:]),
        )
        return [*first, *again]

    expected = run(counted.url, lambda client: balance_of(client, usdc, owners[0]))
    code = "0x" if there == "nothing" else load_artifact("MockUSDC")["deployedBytecode"]
    rpc(chain.rpc_url, "anvil_setCode", [MULTICALL3, code])
    try:
        counted.reset_counts()
        answers = run(counted.url, twice)
    finally:
        rpc(
            chain.rpc_url,
            "anvil_setCode",
            [MULTICALL3, load_artifact("Multicall3")["deployedBytecode"]],
        )
    assert answers[0] == expected
    # the first moment: aggregate3 answered nothing usable, then each read alone;
    # the second: each alone at once, aggregate3 not asked again
    assert dict(counted.counts().asked) == {"eth_call": 1 + 3, "eth_getBalance": 1 + 2}


def test_log_searches_of_one_contract_asked_together_are_one_request(
    chain: RunningChain, counted: Any
) -> None:
    usdc = chain.contracts["MockUSDC"]
    transfer = "0x" + keccak(text="Transfer(address,address,uint256)").hex()

    async def all_transfers(client: EvmRpc) -> Any:
        return await client.get_logs(address=usdc, topics=[transfer], from_block=0)

    received = sorted({log.topics[2] for log in run(counted.url, all_transfers)})
    assert len(received) >= 2, "the world funds at least two accounts with USDC"
    first, second = received[:2]

    def search(client: EvmRpc, to: str, from_block: int) -> Any:
        return client.get_logs(address=usdc, topics=[transfer, None, to], from_block=from_block)

    alone = [run(counted.url, lambda c, to=to: search(c, to, 1)) for to in (first, second)]
    assert alone[0] and alone[1]
    later = max(log.block_number or 0 for log in alone[1])

    async def together(client: EvmRpc) -> Any:
        return await asyncio.gather(search(client, first, 1), search(client, second, later))

    counted.reset_counts()
    mine, theirs = run(counted.url, together)
    assert mine == alone[0]  # each its own, from its own block
    assert theirs == [log for log in alone[1] if (log.block_number or 0) >= later]
    assert dict(counted.counts().asked) == {"eth_getLogs": 1}


class Refusing:
    """The chain behind a loopback JSON-RPC server that refuses, with a
    provider's JSON-RPC error, the calls ``refuses`` picks (a limit), and
    forwards the others (a batch's each); what it was asked, by method."""

    def __init__(self, upstream: str, refuses: Any) -> None:
        from http.server import BaseHTTPRequestHandler

        asked = self.asked = list[str]()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                calls = body if isinstance(body, list) else [body]  # a batch: each call
                answers = []
                for call in calls:
                    asked.append(call["method"])
                    if refuses(call):
                        answers.append(
                            {"jsonrpc": "2.0", "id": call["id"],
                             "error": {"code": -32005, "message": "limit exceeded"}}
                        )  # fmt: skip
                    else:
                        answers.append(httpx.post(upstream, json=call, timeout=10).json())
                answer = json.dumps(answers if isinstance(body, list) else answers[0]).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._loopback = Loopback(Handler)
        self.url = self._loopback.url

    def stop(self) -> None:
        self._loopback.stop()


def test_a_merged_log_search_refused_is_asked_again_search_by_search(
    chain: RunningChain,
) -> None:
    usdc = chain.contracts["MockUSDC"]
    transfer = "0x" + keccak(text="Transfer(address,address,uint256)").hex()
    recent = int(rpc(chain.rpc_url, "eth_blockNumber"), 16) - 50
    # a provider that serves at most the last ~50 blocks a search
    proxy = Refusing(
        chain.rpc_url,
        lambda call: (
            call["method"] == "eth_getLogs" and int(call["params"][0]["fromBlock"], 16) < recent
        ),
    )
    try:

        async def both(client: EvmRpc) -> Any:
            return await asyncio.gather(
                client.get_logs(address=usdc, topics=[transfer], from_block=1),
                client.get_logs(address=usdc, topics=[transfer], from_block=recent),
                return_exceptions=True,
            )

        old, new = run(proxy.url, both)
        alone = run(
            chain.rpc_url,
            lambda c: c.get_logs(address=usdc, topics=[transfer], from_block=recent),
        )
    finally:
        proxy.stop()
    assert isinstance(old, RpcError)  # refused alone, as it would have been
    assert new == alone  # the recent search answered, though merged it was refused
    assert proxy.asked == ["eth_getLogs"] * 3  # merged, then each alone


def test_a_limit_answered_to_the_batch_fails_its_reads_and_keeps_multicall3(
    chain: RunningChain,
) -> None:
    usdc = chain.contracts["MockUSDC"]
    owners = accounts(chain)
    refused: list[int] = []

    def first_batch(call: Any) -> bool:
        if call["method"] == "eth_call" and call["params"][0]["to"] == MULTICALL3 and not refused:
            refused.append(1)
            return True
        return False

    proxy = Refusing(chain.rpc_url, first_batch)
    try:

        async def twice(client: EvmRpc) -> Any:
            reads = [balance_of(client, usdc, a, max_age_s=SHARED_S) for a in owners]
            failed = await asyncio.gather(*reads, return_exceptions=True)
            again = await asyncio.gather(*(client.balance(a, max_age_s=SHARED_S) for a in owners))
            return failed, again

        failed, again = run(proxy.url, twice)
    finally:
        proxy.stop()
    assert all(isinstance(f, RpcError) and f.kind is RpcErrorKind.OTHER for f in failed)
    assert all(isinstance(a, int) for a in again)
    # the limit did not turn Multicall3 off: the second moment is one batch too
    assert proxy.asked == ["eth_call", "eth_call"]


def transfer(to: str, amount: int) -> bytes:
    return ERC20_TRANSFER + bytes(12) + bytes.fromhex(to[2:]) + amount.to_bytes(32, "big")


def reads(chain: RunningChain, sender: str, to: str) -> Any:
    usdc = chain.contracts["MockUSDC"]

    async def asked(client: EvmRpc) -> list[Any]:
        return list(
            await asyncio.gather(
                client.transaction_count(sender, "pending"),
                client.base_fee(),
                client.max_priority_fee(),
                client.estimate_gas(sender, usdc, transfer(to, 0)),
                return_exceptions=True,
            )
        )

    return asked


def test_a_submits_reads_asked_together_are_one_request_each_answered_as_alone(
    chain: RunningChain, counted: Any
) -> None:
    sender, to = (str(a).lower() for a in rpc(chain.rpc_url, "eth_accounts")[:2])
    alone = [run(chain.rpc_url, lambda c, r=r: r(c)) for r in _one_by_one(chain, sender, to)]
    counted.reset_counts()
    together = run(counted.url, reads(chain, sender, to))
    counts = counted.counts()
    assert len(counts.admitted) == 1  # one HTTP request
    assert dict(counts.asked) == {
        "eth_getTransactionCount": 1,
        "eth_getBlockByNumber": 1,
        "eth_maxPriorityFeePerGas": 1,
        "eth_estimateGas": 1,
    }
    assert together[0] == alone[0] and together[2] == alone[2] and together[3] == alone[3]
    assert together[1] > 0  # the base fee (a block may be mined between the two reads)


def _one_by_one(chain: RunningChain, sender: str, to: str) -> list[Any]:
    usdc = chain.contracts["MockUSDC"]
    return [
        lambda c: c.transaction_count(sender, "pending"),
        lambda c: c.base_fee(),
        lambda c: c.max_priority_fee(),
        lambda c: c.estimate_gas(sender, usdc, transfer(to, 0)),
    ]


def test_a_call_that_fails_in_a_batch_raises_its_own_error_the_others_answered(
    chain: RunningChain, counted: Any
) -> None:
    sender, to = (str(a).lower() for a in rpc(chain.rpc_url, "eth_accounts")[:2])
    broke = "0x" + "42" * 20  # holds no USDC: its transfer reverts
    usdc = chain.contracts["MockUSDC"]

    async def asked(client: EvmRpc) -> list[Any]:
        return list(
            await asyncio.gather(
                client.transaction_count(sender, "pending"),
                client.estimate_gas(broke, usdc, transfer(to, 10**12)),
                client.chain_id(),
                return_exceptions=True,
            )
        )

    counted.reset_counts()
    nonce, refused, chain_id = run(counted.url, asked)
    assert len(counted.counts().admitted) == 1
    assert isinstance(nonce, int) and chain_id == chain.chain_id
    assert isinstance(refused, RpcError) and refused.kind is RpcErrorKind.REVERTED


class NoBatches:
    """A provider without batch support in front of ``upstream``: a JSON array
    is answered with one error object (as such providers answer), a single
    call forwarded; each POST's shape recorded."""

    def __init__(self, upstream: str, status: int = 200) -> None:
        self.shapes: list[str] = []
        outer = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                call = json.loads(body)
                outer.shapes.append("batch" if isinstance(call, list) else call["method"])
                if isinstance(call, list):
                    error = {"code": -32600, "message": "batch requests are not supported"}
                    self.send_json(status, {"jsonrpc": "2.0", "id": None, "error": error})
                    return
                self.send_json(200, httpx.post(upstream, json=call, timeout=10).json())

        self.loopback = Loopback(Handler)
        self.url = self.loopback.url


def test_a_provider_that_refuses_batches_is_asked_call_by_call(chain: RunningChain) -> None:
    sender, to = (str(a).lower() for a in rpc(chain.rpc_url, "eth_accounts")[:2])
    provider = NoBatches(chain.rpc_url)
    usdc = chain.contracts["MockUSDC"]

    async def twice(client: EvmRpc) -> tuple[list[Any], list[Any]]:
        first = await reads(chain, sender, to)(client)
        second = list(
            await asyncio.gather(
                client.chain_id(), client.estimate_gas(sender, usdc, transfer(to, 0))
            )
        )
        return first, second

    try:
        first, second = run(provider.url, twice)
    finally:
        provider.loopback.stop()
    assert not any(isinstance(x, Exception) for x in first), first
    assert second[0] == chain.chain_id and second[1] == first[3]
    # one batch tried, its calls asked again alone; then no batch is tried again
    assert provider.shapes[0] == "batch"
    assert "batch" not in provider.shapes[1:]
    assert len(provider.shapes) == 1 + 4 + 2


def test_a_429_to_a_batch_throttles_each_call_and_batches_stay(chain: RunningChain) -> None:
    answers = iter([429])
    shapes: list[str] = []
    upstream = chain.rpc_url

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            shapes.append("batch" if isinstance(body, list) else body["method"])
            if next(answers, 200) == 429:
                error = {"code": -32005, "message": "Too Many Requests"}
                self.send_json(
                    429, {"jsonrpc": "2.0", "id": None, "error": error}, {"Retry-After": "1"}
                )
                return
            self.send_json(200, httpx.post(upstream, json=body, timeout=10).json())

    provider = Loopback(Handler)

    async def asked(client: EvmRpc) -> tuple[list[Any], list[Any]]:
        def both() -> Any:
            return asyncio.gather(client.chain_id(), client.block_number(), return_exceptions=True)

        first = list(await both())
        return first, list(await both())  # after the endpoint's pause

    try:
        throttled, answered = run(provider.url, asked)
    finally:
        provider.stop()
    assert all(isinstance(x, RpcThrottled) for x in throttled), throttled
    assert answered[0] == chain.chain_id and isinstance(answered[1], int)
    assert shapes == ["batch", "batch"]


def test_a_broadcast_goes_alone(chain: RunningChain, counted: Any) -> None:
    async def asked(client: EvmRpc) -> list[Any]:
        return list(
            await asyncio.gather(
                client.chain_id(),
                client.send_raw_transaction(b"\x02" + b"\x00" * 10),  # malformed: refused
                client.block_number(),
                return_exceptions=True,
            )
        )

    counted.reset_counts()
    chain_id, refused, head = run(counted.url, asked)
    assert chain_id == chain.chain_id and isinstance(head, int)
    assert isinstance(refused, RpcError)
    assert len(counted.counts().admitted) == 2  # the reads together, the broadcast alone
