"""Calls asked in one moment go to the provider as one JSON-RPC batch
(qtg_runner.chains.evm_rpc), each answered by its id as it alone would be.

Pins, on a local chain behind the throttling double (which counts HTTP
requests and, apart, the calls in them): a submit's reads asked together
(the pending count, the base fee, the tip, the gas estimate) are one HTTP
request of four calls, each answered as when asked alone; a call that fails
in the batch (an estimate that reverts) raises its own error and the others
are answered; a broadcast always goes alone. Behind a provider that refuses
batches (a loopback one that answers a JSON array with one error object, as
providers without batch support do), the calls are asked again one by one,
answered alike, and every later moment goes call by call; a 429 answered to
a batch fails each of its calls as throttled, and batches stay in use.
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

from qtg_runner.chains.evm import ERC20_TRANSFER
from qtg_runner.chains.evm_rpc import EvmRpc, RpcError, RpcErrorKind, RpcThrottled
from qtg_world import throttle
from qtg_world.chains.local import RunningChain, rpc
from qtg_world.json_http import JsonHandler

pytestmark = pytest.mark.chain


@pytest.fixture
def chain(local_chains: list[RunningChain]) -> RunningChain:
    anvil_or_skip()
    return local_chains[0]


@pytest.fixture
def counted(chain: RunningChain) -> Iterator[Any]:
    handle = throttle.serve(chain.rpc_url, rate_per_s=10_000)
    try:
        yield handle
    finally:
        handle.stop()


def run(url: str, calls: Any) -> Any:
    async def main() -> Any:
        async with EvmRpc(url) as client:
            return await calls(client)

    return asyncio.run(main())


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
