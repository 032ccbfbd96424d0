"""Circuits (qtg_runner.circuit): an endpoint that stops answering costs one
wait, not one per call. Against a real loopback HTTP server that takes each
request and says nothing until told to answer, for each client the runner
calls services with (a chain's JSON-RPC, Iris, Bybit): the first call waits
its timeout; the calls after it fail at once as the client's "unavailable"
and are never sent (the server sees no request); a probe goes out in the
background once the cool-down has passed (on the circuit's clock, driven
here), and its answer lets the calls through again. The cool-down doubles
after each probe that gets no answer, to a ceiling, and after a probe's
answer that the next call's silence belies; a refused connection is an
answer, not silence."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from endpoint_support import Endpoint

from qtg_runner.chains.cctp_client import IrisClient, IrisStatus
from qtg_runner.chains.evm_rpc import EvmRpc, RpcUnavailable
from qtg_runner.circuit import (
    COOL_DOWN_S,
    MAX_COOL_DOWN_S,
    TRIAL_S,
    Circuit,
    endpoint_circuit,
)
from qtg_runner.exchanges.bybit import BybitClient, BybitUnavailable
from qtg_runner.ports import LOOPBACK, free_port

TIMEOUT_S = 0.3


@dataclass(frozen=True)
class Service:
    """How the test calls one client: ``call`` answers ("answered", value) or
    ("unavailable", the client's reason)."""

    name: str
    probe: str
    client: Callable[[str, Circuit, httpx.AsyncClient | None], Any]
    """The client of the service at a URL, over an httpx client of its own
    (None) or the one given."""
    call: Callable[[Any], Awaitable[tuple[str, Any]]]


async def _chain_id(rpc: EvmRpc) -> tuple[str, Any]:
    try:
        return "answered", await rpc.chain_id()
    except RpcUnavailable as exc:
        return "unavailable", str(exc)


async def _iris_lookup(iris: IrisClient) -> tuple[str, Any]:
    answer = await iris.messages(6, "0x" + "11" * 32)
    if answer.status is IrisStatus.UNAVAILABLE:
        return "unavailable", answer.detail
    return "answered", answer.status


async def _bybit_time(bybit: BybitClient) -> tuple[str, Any]:
    try:
        return "answered", await bybit.server_time()
    except BybitUnavailable as exc:
        return "unavailable", str(exc)


SERVICES = [
    Service(
        "evm_rpc",
        "POST /",
        lambda url, circuit, http: EvmRpc(
            url + "/", timeout=TIMEOUT_S, client=http, circuit=circuit
        ),
        _chain_id,
    ),
    Service(
        "iris",
        "GET /v2/messages/0",
        lambda url, circuit, http: IrisClient(url, timeout=TIMEOUT_S, client=http, circuit=circuit),
        _iris_lookup,
    ),
    Service(
        "bybit",
        "GET /v5/market/time",
        lambda url, circuit, http: BybitClient(
            url, "key", "secret", timeout=TIMEOUT_S, client=http, circuit=circuit
        ),
        _bybit_time,
    ),
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.name)
def test_a_silent_endpoint_is_called_once_then_refused_unsent_until_it_answers_a_probe(
    endpoint: Endpoint, service: Service
) -> None:
    clock = Clock()
    circuit = Circuit(f"{service.name} at {endpoint.url}", clock=clock)

    async def scenario() -> None:
        client = service.client(endpoint.url, circuit, None)
        try:
            # the first call waits its timeout and opens the circuit
            kind, reason = await service.call(client)
            assert kind == "unavailable" and "not sent" not in reason
            assert circuit.is_open and len(endpoint.requests) == 1
            # the next ones fail at once, unsent, saying why
            for _ in range(3):
                kind, reason = await service.call(client)
                assert kind == "unavailable"
                assert "not sent" in reason and "gave no answer" in reason
            assert len(endpoint.requests) == 1

            # the endpoint answers again: nothing is sent before the cool-down
            endpoint.answer()
            clock.now += COOL_DOWN_S - 0.5
            assert (await service.call(client))[0] == "unavailable"
            await asyncio.sleep(0.05)
            assert len(endpoint.requests) == 1

            # after it, a refused call sends the probe in the background, and
            # its answer closes the circuit
            clock.now += 1
            assert (await service.call(client))[0] == "unavailable"
            await _until(lambda: not circuit.is_open, "the probe's answer closes the circuit")
            assert endpoint.requests == [endpoint.requests[0], service.probe]
            kind, value = await service.call(client)
            assert kind == "answered", value
            assert len(endpoint.requests) == 3
        finally:
            await client.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.name)
def test_an_answer_dripped_a_byte_at_a_time_is_cut_off_and_counts_as_silence(
    service: Service, endpoint: Endpoint
) -> None:
    # each read comes within httpx's timeout, the whole answer never: the
    # client's deadline for the whole exchange (twice its timeout) ends it
    circuit = Circuit(service.name)
    endpoint.drip()

    async def scenario() -> tuple[str, Any]:
        client = service.client(endpoint.url, circuit, None)
        try:
            return await service.call(client)
        finally:
            await client.aclose()

    kind, reason = asyncio.run(scenario())
    assert kind == "unavailable" and "not sent" not in reason, reason
    assert circuit.is_open
    assert len(endpoint.requests) == 1  # sent, and dripped


def test_each_probe_without_an_answer_doubles_the_wait_to_the_next_up_to_the_ceiling() -> None:
    clock = Clock()
    circuit = Circuit("a service", clock=clock)
    probes: list[float] = []
    answers = False

    async def probe() -> None:  # what a client does: tell the circuit what came back
        probes.append(clock.now)
        if answers:
            circuit.answered()
        else:
            circuit.silent()

    async def refused_at(at: float) -> None:
        clock.now = at
        assert circuit.refusal(probe) is not None
        for _ in range(3):  # the probe task's turn, if one was started
            await asyncio.sleep(0)

    async def scenario() -> None:
        nonlocal answers
        clock.now = 0.0
        circuit.silent()
        waits = [COOL_DOWN_S]
        while waits[-1] < MAX_COOL_DOWN_S:
            waits.append(min(MAX_COOL_DOWN_S, waits[-1] * 2))
        waits.append(MAX_COOL_DOWN_S)  # and stays there
        at = 0.0
        for wait in waits:
            await refused_at(at + wait - 0.1)  # not yet
            await refused_at(at + wait)
            at += wait
            assert probes[-1] == at
        assert len(probes) == len(waits)
        # a call's answer closes it; the next silence opens it with the first wait
        circuit.answered()
        assert circuit.refusal(probe) is None
        circuit.silent()
        await refused_at(at + COOL_DOWN_S)
        assert probes[-1] == at + COOL_DOWN_S
        answers = True
        at += COOL_DOWN_S + 2 * COOL_DOWN_S
        await refused_at(at)
        assert circuit.refusal(probe) is None and not circuit.is_open
        # the probe answers and the next call does not (an endpoint that serves
        # its probe and not the calls): the circuit opens with the next wait
        circuit.silent()
        await refused_at(at + 4 * COOL_DOWN_S - 0.1)
        await refused_at(at + 4 * COOL_DOWN_S)
        assert probes[-1] == at + 4 * COOL_DOWN_S and not circuit.is_open
        # a call answers after the probe: the next silence starts from the first
        circuit.answered()
        at += 4 * COOL_DOWN_S
        circuit.silent()
        await refused_at(at + COOL_DOWN_S)
        assert probes[-1] == at + COOL_DOWN_S and not circuit.is_open

    asyncio.run(scenario())


def test_without_a_probe_one_call_goes_out_as_the_probe_once_the_wait_is_over() -> None:
    # a callback receiver has no read that changes nothing: a delivery is the probe
    clock = Clock()
    circuit = Circuit("a receiver", clock=clock)

    async def scenario() -> None:
        circuit.silent()
        opened = clock.now
        clock.now += COOL_DOWN_S - 0.1
        assert circuit.refusal(None) is not None
        clock.now += 0.1
        assert circuit.refusal(None) is None  # this call is the probe
        assert circuit.refusal(None) is not None  # one at a time
        circuit.silent()  # the probe's silence: twice the wait to the next
        clock.now += 2 * COOL_DOWN_S - 0.1
        assert circuit.refusal(None) is not None
        clock.now += 0.1
        assert circuit.refusal(None) is None
        # a probe whose caller never tells what came back holds the next for TRIAL_S
        clock.now += TRIAL_S - 0.1
        assert circuit.refusal(None) is not None
        clock.now += 0.1
        assert circuit.refusal(None) is None
        circuit.answered()
        assert not circuit.is_open and circuit.refusal(None) is None
        assert clock.now - opened == 3 * COOL_DOWN_S + TRIAL_S

    asyncio.run(scenario())


def test_a_refused_connection_is_an_answer_and_opens_nothing() -> None:
    url = f"http://{LOOPBACK}:{free_port()}/"
    rpc = EvmRpc(url, timeout=TIMEOUT_S)

    async def twice() -> list[str]:
        errors = []
        for _ in range(2):
            with pytest.raises(RpcUnavailable) as caught:
                await rpc.chain_id()
            errors.append(str(caught.value))
        await rpc.aclose()
        return errors

    errors = asyncio.run(twice())
    assert all("ConnectError" in e and "not sent" not in e for e in errors)
    assert not rpc.circuit.is_open


def test_every_client_of_an_endpoint_shares_its_circuit(endpoint: Endpoint) -> None:
    # an executor's client and a sidecar's, of the same RPC URL: the silence one
    # of them met spares the other the wait
    first, second = EvmRpc(endpoint.url, timeout=TIMEOUT_S), EvmRpc(endpoint.url)
    assert first.circuit is second.circuit is endpoint_circuit(endpoint.url, "shown")
    assert EvmRpc(endpoint.url + "/other").circuit is not first.circuit

    async def scenario() -> str:
        with pytest.raises(RpcUnavailable):
            await first.chain_id()
        with pytest.raises(RpcUnavailable) as caught:
            await second.chain_id()
        await first.aclose()
        await second.aclose()
        return str(caught.value)

    assert "not sent" in asyncio.run(scenario())
    assert len(endpoint.requests) == 1
    endpoint.answer()
    first.circuit.answered()  # leave the shared circuit as found
