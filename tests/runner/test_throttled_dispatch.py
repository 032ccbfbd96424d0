"""A prepare throttled by an endpoint's request budget (an ExecutorError
``throttled``: the provider's limit, not the node's fault) gives the node
back without spending an attempt; an observation it holds back is not the
node's time observing.

What a treasury relies on: however long a provider throttles, a node whose
prepare is throttled goes back to READY after the endpoint's wait with its
attempts untouched and the reason in its last_error (the waiting_nodes view
shows it), so that no movement FAILS for a rate limit; a node's own
retryable failures still count toward its attempts as before; runner
processes calling one endpoint share its rate and its pauses through the
database; and however long a provider throttles the reads of a node in
flight, the node is not taken to its lane's fatal wait (UNKNOWN, recovery)
for it: it waits, its reason in in_flight_nodes, and goes on when it is read.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from engine import claim, create_started, node, node_ids, plan, submit
from rows import T0, Conn, node_row, set_clock
from runner_helpers import register_runner_sim

from qtg_runner.budget import EndpointBudget, EndpointThrottled, endpoint_budget, forget_budgets
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.base import ExecutorError, NodeWork, ObserveResult, ObserveStatus
from qtg_runner.executors.sim import SimExecutor
from qtg_runner.loop import WorkerContext
from qtg_runner.workers import endpoint_budget_lease, node_dispatcher, node_observer

NETWORK = "testnet"
WAIT_S = 42.0


class Throttled(SimExecutor):
    """The sim, whose endpoint's budget has no turn for it."""

    async def preflight(self, work: NodeWork) -> None:
        raise ExecutorError(
            "chain a: throttled: rpc:qtg_rpc_a is at its rate (20 requests/s here)",
            retryable=True,
            retry_after=WAIT_S,
            throttled=True,
        )


class Failing(SimExecutor):
    """The sim, whose node's own call fails (retryably)."""

    async def preflight(self, work: NodeWork) -> None:
        raise ExecutorError("the node's own failure", retryable=True, retry_after=1.0)


class ObserveThrottled(SimExecutor):
    """The sim, whose reads its endpoint's budget holds back."""

    async def observe(self, work: NodeWork) -> ObserveResult:
        raise ExecutorError(
            "chain a: throttled: rpc:qtg_rpc_a is paused after a 429; its next turn in 42 s",
            retryable=True,
            retry_after=WAIT_S,
            throttled=True,
        )


class ObservePending(SimExecutor):
    """The sim, whose send is still on its way."""

    async def observe(self, work: NodeWork) -> ObserveResult:
        return ObserveResult(ObserveStatus.PENDING, {"seen": "pending"})


@pytest.fixture
def sim_conn(conn: Conn) -> Conn:
    register_runner_sim(conn)
    procs.upsert_lane_baseline("instant", 60).one(conn)
    return conn


def dispatch_at(
    db: Any,
    monkeypatch: pytest.MonkeyPatch,
    seconds: float,
    executor: type[SimExecutor],
    worker: Any = node_dispatcher,
) -> None:
    """One ``worker`` batch (the dispatcher's) at T0 + ``seconds`` (the
    runner's pinned clock)."""
    at = (T0 + timedelta(seconds=seconds)).isoformat()
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={at}")
    monkeypatch.delenv("QTG_RUNNER_DATABASE_URL", raising=False)

    async def scenario() -> None:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "throttle-test")
        async with (
            open_pool(conninfo, name="throttle-engine") as pool,
            open_pool(conninfo, name="throttle-executors") as side,
        ):
            ctx = WorkerContext(NETWORK, pool, {"sim": executor(side, NETWORK)}, "throttle:1")
            await asyncio.wait_for(worker.batch(ctx, "worker@throttle:1"), 60)

    asyncio.run(scenario())


def started(conn: Conn, name: str) -> int:
    return node_ids(conn, create_started(conn, plan(node("a", lane="instant")), name))["a"]


def test_a_throttled_prepare_gives_the_node_back_without_spending_an_attempt(
    db: Any, sim_conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_id = started(sim_conn, "throttled")
    at = 1.0
    for _ in range(15):  # beyond the 10 attempts a node's own failures get
        dispatch_at(db, monkeypatch, at, Throttled)
        row = node_row(sim_conn, node_id)
        assert row["node_state"] == "READY"
        assert row["submit_attempts"] == 0
        assert row["last_error"].startswith("chain a: throttled: rpc:qtg_rpc_a")
        assert row["not_before"] == T0 + timedelta(seconds=at + WAIT_S)
        at += WAIT_S + 1
    waiting = sim_conn.execute(
        "SELECT last_error FROM waiting_nodes WHERE node_id = %s", (node_id,)
    ).fetchone()
    assert waiting is not None and "throttled" in waiting[0]


def test_a_nodes_own_failures_still_count(
    db: Any, sim_conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_id = started(sim_conn, "failing")
    at = 1.0
    states: list[str] = []
    for _ in range(10):
        dispatch_at(db, monkeypatch, at, Failing)
        states.append(node_row(sim_conn, node_id)["node_state"])
        at += 2
    assert states[:9] == ["READY"] * 9 and states[9] == "FAILED"


def test_reads_held_back_past_the_lanes_fatal_wait_leave_the_node_in_flight(
    db: Any, sim_conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instant lane's fatal wait is 600 s observing; its node's reads are
    held back for 20 minutes, then made."""
    node_id = started(sim_conn, "held")
    set_clock(sim_conn, 0)
    (claimed,) = claim(sim_conn)
    assert submit(sim_conn, claimed) == "SUBMITTED"
    at = 42.0  # its first poll
    while at < 1200:
        dispatch_at(db, monkeypatch, at, ObserveThrottled, node_observer)
        row = node_row(sim_conn, node_id)
        assert (row["node_state"], row["observe_count"]) == ("SUBMITTED", 0)
        assert row["next_observe_at"] == T0 + timedelta(seconds=at + WAIT_S)
        at += WAIT_S
    held = sim_conn.execute(
        "SELECT held_seconds, held_reason FROM in_flight_nodes WHERE node_id = %s", (node_id,)
    ).fetchone()
    assert held is not None and held[0] >= 1200 - 42
    assert held[1].startswith("chain a: throttled: rpc:qtg_rpc_a is paused after a 429")

    dispatch_at(db, monkeypatch, at, ObservePending, node_observer)
    row = node_row(sim_conn, node_id)
    assert (row["node_state"], row["observe_count"], row["observe_phase"]) == (
        "OBSERVING",
        1,
        "pre_baseline",
    )
    assert row["observe_held_reason"] is None


def lease_as(db: Any, instance: str) -> None:
    """One round of the endpoint_budget_lease worker, as runner process ``instance``."""

    async def scenario() -> None:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "lease-test")
        async with open_pool(conninfo, name="lease-engine") as pool:
            ctx = WorkerContext(NETWORK, pool, {}, instance)
            await endpoint_budget_lease.batch(ctx, f"endpoint_budget_lease@{instance}")

    asyncio.run(scenario())


def test_runner_processes_share_an_endpoints_rate_and_its_pauses(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runner processes (each its own budgets: forget_budgets between
    them) calling one endpoint at 30 requests/s: each takes half once both
    lease it, and a 429 one of them was told pauses the other too."""
    monkeypatch.delenv("PGOPTIONS", raising=False)
    url = "https://rpc.example/v2/KEY"

    def process_budget() -> EndpointBudget:
        forget_budgets()
        budget = endpoint_budget(url, "rpc:qtg_rpc_a", 30)
        budget.used = True
        return budget

    first = process_budget()
    lease_as(db, "host-a:1")
    assert (first.sharers, first.rate) == (1, 30)

    second = process_budget()
    second.slowed(20)  # a 429 with Retry-After: 20
    lease_as(db, "host-b:2")
    assert second.sharers == 2

    first_again = process_budget()
    lease_as(db, "host-a:1")
    assert first_again.sharers == 2 and first_again.rate == 15
    with pytest.raises(EndpointThrottled, match="paused after a 429"):
        first_again.reserve(max_wait=5)
    forget_budgets()
