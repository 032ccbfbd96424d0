"""Request budgets (qtg_runner.budget) and the RPC client's use of them.

What a treasury relies on: a runner never calls an endpoint faster than the
rate it was given (a burst of a second's rate, then one turn per interval);
a turn too far away is refused before anything is sent; a 429 pauses the
endpoint for its Retry-After for every caller of the process and halves its
rate, which comes back a tenth at a time without 429s; the processes sharing
an endpoint split its rate and honour each other's pauses; a rate setting
that is not a positive number is refused with the variable's name. The
clock is driven, never slept on.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from qtg_runner.budget import (
    DEFAULT_RATES,
    LOCAL_RATE,
    RECOVERY_STEP,
    SLOW_RECOVERY_S,
    BudgetError,
    EndpointBudget,
    EndpointThrottled,
    configured_rate,
)
from qtg_runner.chains.evm_rpc import EvmRpc, RpcThrottled
from qtg_runner.ports import LOOPBACK
from qtg_world.json_http import JsonHandler


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def budget(rate: float, clock: Clock) -> EndpointBudget:
    return EndpointBudget("rpc:qtg_rpc_test", rate, clock=clock, wall=clock)


def test_a_budget_spaces_its_turns_one_interval_apart_without_a_burst() -> None:
    """A provider counts its limit over any second: at 10 requests a second,
    turns 0.1 s apart from the first, however many ask at once: never more
    than the rate in any second."""
    clock = Clock()
    b = budget(10, clock)
    waits = [b.reserve(max_wait=10) for _ in range(20)]
    assert waits == pytest.approx([i / 10 for i in range(20)], abs=1e-9)
    assert sum(1 for w in waits if w < 1.0 - 1e-9) == 10
    # an idle budget saves no turns for later
    clock.now += 5
    assert [b.reserve(), b.reserve()] == pytest.approx([0.0, 0.1])


def test_a_turn_beyond_the_wait_is_refused_and_takes_nothing() -> None:
    clock = Clock()
    b = budget(1, clock)
    assert b.reserve(max_wait=0) == 0.0
    with pytest.raises(
        EndpointThrottled, match=r"throttled: rpc:qtg_rpc_test is at its rate"
    ) as exc:
        b.reserve(max_wait=0.5)
    assert exc.value.wait_s == pytest.approx(1.0)
    with pytest.raises(EndpointThrottled) as again:
        b.reserve(max_wait=0.5)
    assert again.value.wait_s == pytest.approx(1.0)  # the refusal reserved nothing


def test_a_429_pauses_the_endpoint_halves_its_rate_and_the_rate_comes_back() -> None:
    clock = Clock()
    b = budget(20, clock)
    assert b.slowed(7) == 7
    assert b.rate == 10
    with pytest.raises(EndpointThrottled, match="paused after a 429") as exc:
        b.reserve(max_wait=5)
    assert exc.value.wait_s == pytest.approx(7)
    assert b.slowed(None) == 1  # no Retry-After: the least pause
    assert b.rate == 5
    assert b.slowed(10_000) == 600  # a Retry-After beyond reason: the most
    clock.now += SLOW_RECOVERY_S * 3
    b.reserve(max_wait=1000)
    assert b.factor == pytest.approx(0.125 + 3 * RECOVERY_STEP)
    clock.now += SLOW_RECOVERY_S * 100
    b.reserve(max_wait=1000)
    assert b.rate == 20


def test_processes_sharing_an_endpoint_split_its_rate_and_honour_each_others_pauses() -> None:
    clock = Clock()
    b = budget(30, clock)
    b.leased(3, None)
    assert b.rate == 10
    b.leased(1, clock.now + 4)  # another process was told to wait 4 s
    assert b.rate == 30
    with pytest.raises(EndpointThrottled) as exc:
        b.reserve(max_wait=1)
    assert exc.value.wait_s == pytest.approx(4)
    b.leased(1, clock.now - 1)  # a pause in the past changes nothing
    clock.now += 4
    assert b.reserve() == 0.0


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "nan", "inf", "1e9"])
def test_a_rate_that_is_not_a_positive_number_is_refused_by_name(raw: str) -> None:
    with pytest.raises(BudgetError, match=rf"QTG_RPC_X_RATE='{raw}' is not a rate"):
        configured_rate({"QTG_RPC_X_RATE": raw}, "QTG_RPC_X", "rpc", "https://rpc.example/k")


def test_an_unset_rate_is_the_kinds_default_and_a_local_endpoints_is_unlimited() -> None:
    remote = "https://base-sepolia.example/v2/KEY"
    assert configured_rate({}, "QTG_RPC_X", "rpc", remote) == DEFAULT_RATES["rpc"]
    assert configured_rate({}, "QTG_IRIS_URL", "iris", "https://iris.example") == 30
    assert configured_rate({}, "QTG_RPC_X", "rpc", "http://127.0.0.1:8545") == LOCAL_RATE
    given = {"QTG_IRIS_URL_RATE": "12.5"}
    assert configured_rate(given, "QTG_IRIS_URL", "iris", "http://127.0.0.1:1") == 12.5


def test_a_caller_waiting_for_its_turn_waits_out_a_pause_set_meanwhile() -> None:
    """A turn given before a 429 sends nothing into the pause the 429 set:
    the waiting caller waits it out, or is throttled past its wait."""
    budget = EndpointBudget("rpc:qtg_rpc_test", 10)

    async def scenario() -> tuple[float, str]:
        budget.reserve()  # the turn now is taken: the next one is 0.1 s away
        start = asyncio.get_running_loop().time()
        waiting = asyncio.create_task(budget.acquire(max_wait=5))
        await asyncio.sleep(0)  # it has its turn and sleeps for it
        budget.slowed(0.5)  # a 429 meanwhile: paused 1 s (the least pause)
        await waiting
        elapsed = asyncio.get_running_loop().time() - start
        budget.reserve()  # the turn now is taken again
        late = asyncio.create_task(budget.acquire(max_wait=0.5))
        await asyncio.sleep(0)
        budget.slowed(30)  # a 429 while it waits: a pause past its wait
        with pytest.raises(EndpointThrottled) as refused:
            await late
        return elapsed, str(refused.value)

    elapsed, refusal = asyncio.run(scenario())
    assert elapsed >= 0.99
    assert "paused after a 429" in refusal


class Parked:
    """A budget's sleep that returns only when the test lets it: the event
    loop busy elsewhere until the test moves the clock on."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[None]] = []

    async def __call__(self, seconds: float) -> None:
        waiting = asyncio.get_running_loop().create_future()
        self.waiting.append(waiting)
        await waiting

    async def wake_all(self) -> None:
        woken, self.waiting = self.waiting, []
        for waiting in woken:
            waiting.set_result(None)
        for _ in range(5):  # let every woken caller run to its call or its next sleep
            await asyncio.sleep(0)


def test_callers_woken_late_for_their_turns_start_no_burst() -> None:
    """At 10 a second, 15 callers take turns 0.1 s apart; the loop is busy
    until all their turns have passed and wakes them at once: 10 start then
    (the second before holds none), the other 5 a second later. No second
    ever holds more than 10 starts."""
    clock, parked = Clock(), Parked()
    b = EndpointBudget("rpc:qtg_rpc_test", 10, clock=clock, wall=clock, sleep=parked)
    started: list[float] = []

    async def call() -> None:  # a call answered at once
        await b.acquire(max_wait=10)
        started.append(clock.now)
        b.done()

    async def scenario() -> None:
        calls = [asyncio.create_task(call()) for _ in range(15)]
        await asyncio.sleep(0)
        assert started == [1000.0]  # the first turn is now; 14 sleep for theirs
        clock.now = 1001.45  # every turn has passed
        await parked.wake_all()
        assert started.count(1001.45) == 10
        clock.now = 1002.45
        await parked.wake_all()
        await asyncio.gather(*calls)

    asyncio.run(scenario())
    assert sorted(started) == [1000.0] + [1001.45] * 10 + [1002.45] * 4
    assert max(sum(1 for t in started if s <= t < s + 1.0) for s in started) == 10


def test_a_call_holds_its_place_while_in_flight_and_a_second_after() -> None:
    """A provider counts a call when it arrives, somewhere between its start
    and its answer: at 10 a second, with 10 calls unanswered the 11th waits
    for one to end, and a second more (no second at the provider can then
    hold 11)."""
    clock = Clock()

    async def sleep(seconds: float) -> None:  # the time passes, the loop goes on
        clock.now += seconds
        await asyncio.sleep(0)

    b = EndpointBudget("rpc:qtg_rpc_test", 10, clock=clock, wall=clock, sleep=sleep)

    async def scenario() -> tuple[float, float]:
        for _ in range(10):  # at 1000.0, 1000.1, ... 1000.9, none answered
            await b.acquire(max_wait=10)
        eleventh = asyncio.create_task(b.acquire(max_wait=10))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not eleventh.done()  # its turn (1001.0) has come, no place has
        answered_at = clock.now
        b.done()  # the first call answered
        await eleventh
        return answered_at, clock.now

    answered_at, eleventh_at = asyncio.run(scenario())
    assert eleventh_at == pytest.approx(answered_at + 1.0)


@pytest.fixture
def throttling_node() -> Iterator[tuple[str, list[str]]]:
    """A loopback JSON-RPC endpoint that answers every call 429, Retry-After 7."""
    heard: list[str] = []

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            heard.append(json.loads(self.rfile.read(length))["method"])
            self.send_json(
                429, {"jsonrpc": "2.0", "id": None, "error": {"code": 429, "message": "slow down"}},
                {"Retry-After": "7"},
            )  # fmt: skip

    server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{LOOPBACK}:{server.server_address[1]}", heard
    server.shutdown()
    server.server_close()


def test_the_rpc_client_reads_a_429s_retry_after_and_sends_nothing_while_paused(
    throttling_node: tuple[str, list[str]],
) -> None:
    url, heard = throttling_node
    shared = EndpointBudget("rpc:qtg_rpc_test", 25)

    async def calls() -> tuple[RpcThrottled, RpcThrottled]:
        first_client, second_client = EvmRpc(url, budget=shared), EvmRpc(url, budget=shared)
        try:
            with pytest.raises(RpcThrottled) as first:
                await first_client.block_number()
            with pytest.raises(RpcThrottled) as second:
                await second_client.chain_id()
            return first.value, second.value
        finally:
            await first_client.aclose()
            await second_client.aclose()

    first, second = asyncio.run(calls())
    assert "HTTP 429" in str(first) and first.wait_s == 7
    assert shared.throttled == 1 and shared.rate == 12.5
    # the other client of the endpoint waits too: nothing more was sent
    assert "paused after a 429" in str(second) and 6 < second.wait_s <= 7
    assert heard == ["eth_blockNumber"]
