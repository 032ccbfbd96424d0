"""One bad node never stops the others, nor the worker (the core workers in-process).

What an operator relies on when one node's config, executor or outcome is poison:
  * a node the real sim executor crashes on (SimCrash at submit, inside a
    busy batch of 30 submitted in one submit_many call) is quarantined with
    its error, the 30 are submitted one by one and complete, and the batch
    returns normally; nodes with absurd configs that passed an older schema
    (a time scale of 1e-300, latencies of 1e13 s) are clamped by the sim and
    run like the others;
  * a crash at prepare quarantines the node before anything is signed; an
    outage at prepare is a retry (READY again), not a claim left to its lease;
  * an executor call that never answers is cut off at its worker's deadline
    and the batch goes on: a prepare is a retry, a submit or a group's
    submit_many makes its nodes UNKNOWN for recovery at once, a recover()
    concludes nothing and recovery goes on to the next node;
  * a report the engine cannot apply to one node (QT050) quarantines that node
    and the others' reports stand;
  * the observer and recovery quarantine a node whose observe() or recover()
    crashes, in the claim's own transaction for the observer, and go on with
    the others; so does the observer a node whose report the engine refuses;
  * evidence and errors beyond the network's limits are cut, not refused;
  * a chain whose RPC takes connections and answers nothing costs the
    observer one wait (its nodes' calls side by side): its endpoint's circuit
    opens, and the next batches report its nodes unreachable without a call;
  * a pooled connection whose backend was terminated is replaced before use;
  * a batch that runs longer than its worker's interval keeps the heartbeat
    beating, so its claims are not taken for a dead worker's.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from endpoint_support import Endpoint
from engine import bind, claim, create_started, node, node_ids, plan, submit
from psycopg.types.json import Jsonb
from rows import T0, Conn, fail, node_row, plant_rule, prepare
from runner_helpers import register_runner_sim

from qtg_runner.chains.evm_rpc import EvmRpc
from qtg_runner.circuit import endpoint_circuit
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.base import (
    ExecutorError,
    HealthResult,
    HealthStatus,
    NodeWork,
    ObserveResult,
    ObserveStatus,
    Prepared,
    RecoveryOutcome,
    RecoveryResult,
    SubmitResult,
)
from qtg_runner.executors.evm_tx import RETRY_LATER_S, chain_errors
from qtg_runner.executors.sim import SimExecutor
from qtg_runner.limits import ReportLimits
from qtg_runner.loop import WorkerContext, WorkerEntry, run_worker
from qtg_runner.workers import node_dispatcher, node_observer, node_recovery

NETWORK = "testnet"
Batch = Callable[[WorkerContext, str], Awaitable[int]]


@pytest.fixture
def runner_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Pins the runner connections' clock at T0 + s seconds (PGOPTIONS, as a drill does)."""
    monkeypatch.delenv("QTG_RUNNER_DATABASE_URL", raising=False)

    def pin(seconds: float) -> None:
        at = (T0 + timedelta(seconds=seconds)).isoformat()
        monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={at}")

    pin(1)
    return pin


@pytest.fixture
def sim_conn(conn: Conn) -> Conn:
    """``conn`` with the runner's own sim executor (its real schema) and its lanes."""
    register_runner_sim(conn)
    for lane in ("instant", "cctp_fast", "default"):
        procs.upsert_lane_baseline(lane, 60).one(conn)
    return conn


WATCHDOG_S = 60
"""The longest a test lets one batch run: a batch that would hang fails the test."""


def run_batch(
    db: Any,
    batch: Batch,
    executors: Callable[[Any], list[Any]] = lambda pool: [SimExecutor(pool, NETWORK)],
    limits: ReportLimits | None = None,
) -> int:
    """One batch of a worker, as a runner carrying ``executors`` runs it (within
    WATCHDOG_S)."""

    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "poison-test")
        async with (
            open_pool(conninfo, name="poison-engine") as pool,
            open_pool(conninfo, name="poison-executors") as side,
        ):
            carried = {e.key: e for e in executors(side)}
            ctx = WorkerContext(NETWORK, pool, carried, "poison-test:1")
            if limits is not None:
                ctx.limits = limits
            return await asyncio.wait_for(batch(ctx, "worker@poison-test:1"), WATCHDOG_S)

    return asyncio.run(scenario())


def side_effects(conn: Conn) -> dict[int, int]:
    """node id -> how many sim side effects it has."""
    rows = conn.execute(
        "SELECT node_id, count(*) FROM qtg_sim.side_effects WHERE network = 'testnet' GROUP BY 1"
    ).fetchall()
    return {int(n): int(c) for n, c in rows}


def quarantined(conn: Conn) -> dict[int, str]:
    rows = conn.execute("SELECT node_id, reason FROM quarantined_nodes").fetchall()
    return {int(n): str(r) for n, r in rows}


def one_node_movements(conn: Conn, prefix: str, count: int, **config: Any) -> list[int]:
    """``count`` started one-node movements; their node ids."""
    return [
        node_ids(conn, create_started(conn, plan(node("a", **config)), f"{prefix}-{i}"))["a"]
        for i in range(count)
    ]


def legacy_config(conn: Conn, node_id: int, config: dict[str, Any]) -> None:
    """Give a node a config the sim's schema refuses today (as if it was created
    under an older one)."""
    conn.execute(
        "UPDATE movement_request_nodes SET node_config = %s WHERE id = %s", (Jsonb(config), node_id)
    )


# -- the dispatcher ------------------------------------------------------------------------


def test_a_node_the_sim_crashes_on_in_a_busy_batch_of_30_is_quarantined_and_the_30_complete(
    db: Any, sim_conn: Conn, runner_clock: Any
) -> None:
    good = one_node_movements(sim_conn, "good", 30, lane="instant")
    [poison] = one_node_movements(sim_conn, "poison", 1, lane="instant", crash_at="submit")
    tiny, huge = one_node_movements(sim_conn, "legacy", 2, lane="cctp_fast")
    legacy_config(sim_conn, tiny, {"lane": "cctp_fast", "time_scale": 1e-300})
    legacy_config(
        sim_conn, huge, {"lane": "cctp_fast", "min_latency_s": 1e13, "max_latency_s": 1e20}
    )

    assert run_batch(db, node_dispatcher.batch) == 33

    states = {n: node_row(sim_conn, n)["node_state"] for n in [*good, poison, tiny, huge]}
    assert {states[n] for n in good} == {"COMPLETED"}
    assert (states[tiny], states[huge]) == ("SUBMITTED", "SUBMITTED")
    assert states[poison] == "SUBMITTING"
    assert side_effects(sim_conn) == dict.fromkeys([*good, tiny, huge], 1)
    reason = quarantined(sim_conn)[poison]
    assert reason.startswith("node_dispatcher submit: SimCrash: ")
    assert f"sim node {poison} crashes at submit" in reason
    # the clamped latencies: at most a week
    latency = sim_conn.execute(
        "SELECT max(completes_at - submitted_at) FROM qtg_sim.side_effects WHERE node_id = %s",
        (huge,),
    ).fetchone()
    assert latency is not None and latency[0] <= timedelta(days=7, seconds=1)


def test_a_crash_at_prepare_quarantines_the_node_before_anything_is_signed(
    db: Any, sim_conn: Conn, runner_clock: Any
) -> None:
    [ok] = one_node_movements(sim_conn, "ok", 1, lane="instant")
    [poison] = one_node_movements(sim_conn, "poison", 1, lane="instant", crash_at="prepare")

    run_batch(db, node_dispatcher.batch)

    assert node_row(sim_conn, ok)["node_state"] == "COMPLETED"
    assert node_row(sim_conn, poison)["node_state"] == "SUBMITTING"
    intent = sim_conn.execute(
        "SELECT intent_state FROM node_intents WHERE node_id = %s", (poison,)
    ).fetchone()
    assert intent == ("CLAIMED",)
    assert "prepare: SimCrash" in quarantined(sim_conn)[poison]
    assert side_effects(sim_conn) == {ok: 1}


class Unreachable(SimExecutor):
    """The sim, whose service cannot be reached before anything is signed."""

    async def preflight(self, work: NodeWork) -> None:
        raise ConnectionRefusedError("the service refused the connection")


def test_an_outage_at_prepare_is_a_retry_not_a_claim_left_to_its_lease(
    db: Any, sim_conn: Conn, runner_clock: Any
) -> None:
    [node_id] = one_node_movements(sim_conn, "away", 1, lane="instant")

    run_batch(db, node_dispatcher.batch, lambda pool: [Unreachable(pool, NETWORK)])

    row = node_row(sim_conn, node_id)
    assert (row["node_state"], row["quarantined_at"]) == ("READY", None)
    assert "ConnectionRefusedError" in row["last_error"]


def test_a_report_the_engine_cannot_apply_quarantines_its_node_and_the_others_stand(
    db: Any, sim_conn: Conn, runner_clock: Any
) -> None:
    good = one_node_movements(sim_conn, "good", 5, lane="instant")
    movement = create_started(sim_conn, plan(node("poison", lane="instant")), "poison")
    poison = node_ids(sim_conn, movement)["poison"]
    plant_rule(
        sim_conn,
        "movement_request_nodes",
        "NEW.node_key = 'poison' AND NEW.node_state = 'COMPLETED'",
    )

    run_batch(db, node_dispatcher.batch)

    assert {node_row(sim_conn, n)["node_state"] for n in good} == {"COMPLETED"}
    assert node_row(sim_conn, poison)["node_state"] == "SUBMITTING"
    assert "report: QT050" in quarantined(sim_conn)[poison]
    # its side effect went out: recovery concludes from it once an operator releases it
    assert side_effects(sim_conn)[poison] == 1


class Stalling(SimExecutor):
    """The sim, one node at a time (a BatchSubmitter no more), which never
    answers prepare(), submit() or recover() for the nodes named in ``stall``
    under that step (a signer or a venue that hangs, whatever the bounds of
    each of its own calls)."""

    key = "stalling"
    submit_many = None  # type: ignore[assignment]  # not a BatchSubmitter

    def __init__(self, pool: Any, stall: dict[str, set[int]]) -> None:
        super().__init__(pool, NETWORK)
        self.stall = stall

    async def _maybe_stall(self, step: str, work: NodeWork) -> None:
        if work.node_id in self.stall.get(step, set()):
            await asyncio.Event().wait()

    async def prepare(self, work: NodeWork) -> Prepared:
        await self._maybe_stall("prepare", work)
        return await super().prepare(work)

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        await self._maybe_stall("submit", work)
        return await super().submit(work, prepared)

    async def recover(self, work: NodeWork) -> RecoveryResult:
        await self._maybe_stall("recover", work)
        return await super().recover(work)


DEADLINE_S = 2.0
"""The executor calls' deadlines in these tests: long enough for a call that
answers on a busy machine, short enough to wait for one that never does."""


def intent_state(conn: Conn, node_id: int) -> str:
    row = conn.execute("SELECT intent_state FROM node_intents WHERE node_id = %s", (node_id,))
    return str(row.fetchone()[0])  # type: ignore[index]


def test_a_prepare_or_submit_that_never_answers_is_cut_off_and_recovery_takes_the_submit(
    db: Any, sim_conn: Conn, runner_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the dispatcher's batch waits for its slowest node: a prepare or a submit
    # that never answers would hold it, its claims and the loop for good
    procs.register_executor("stalling", True, SimExecutor.node_config_schema).one(sim_conn)
    ok, at_prepare, at_submit, at_both = one_node_movements(
        sim_conn, "stall", 4, lane="cctp_fast", executor="stalling"
    )
    monkeypatch.setattr(node_dispatcher, "PREPARE_DEADLINE_S", DEADLINE_S)
    monkeypatch.setattr(node_dispatcher, "SUBMIT_DEADLINE_S", DEADLINE_S)
    monkeypatch.setattr(node_recovery, "RECOVER_DEADLINE_S", DEADLINE_S)
    stall = {"prepare": {at_prepare}, "submit": {at_submit, at_both}}
    assert run_batch(db, node_dispatcher.batch, lambda pool: [Stalling(pool, stall)]) == 4

    assert node_row(sim_conn, ok)["node_state"] == "SUBMITTED"
    # nothing it signed was recorded (the claim's intent closed, never PREPARED):
    # a retry after the backoff
    row = node_row(sim_conn, at_prepare)
    assert (row["node_state"], intent_state(sim_conn, at_prepare)) == ("READY", "FAILED")
    assert row["last_error"] == "prepare() gave no answer in 2 s"
    assert row["not_before"] > T0 + timedelta(seconds=1)
    # the intents are recorded and the side effects may be out: recovery's now
    for node_id in (at_submit, at_both):
        row = node_row(sim_conn, node_id)
        assert (row["node_state"], intent_state(sim_conn, node_id)) == ("UNKNOWN", "PREPARED")
        assert row["last_error"] == "submit() gave no answer in 2 s"
    assert quarantined(sim_conn) == {}
    assert side_effects(sim_conn) == {ok: 1}

    # recovery takes them one at a time: the one whose recover() never answers
    # concludes nothing, and the next is recovered (its prepared payload sent)
    recovering = lambda pool: [Stalling(pool, {"recover": {at_both}})]  # noqa: E731
    assert run_batch(db, node_recovery.batch, recovering) == 2
    row = node_row(sim_conn, at_both)
    assert row["node_state"] == "UNKNOWN"
    assert row["evidence"] == {"error": "recover() gave no answer in 2 s"}
    assert node_row(sim_conn, at_submit)["node_state"] == "SUBMITTED"
    assert side_effects(sim_conn) == {ok: 1, at_submit: 1}


class StallingGroup(SimExecutor):
    """The sim, whose submit_many (its nodes' one INSERT) never answers."""

    async def submit_many(self, items: Any) -> list[SubmitResult]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_a_group_submit_that_never_answers_leaves_each_of_its_nodes_to_recovery(
    db: Any, sim_conn: Conn, runner_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = one_node_movements(sim_conn, "group", 3, lane="cctp_fast")
    monkeypatch.setattr(node_dispatcher, "SUBMIT_DEADLINE_S", DEADLINE_S)

    assert run_batch(db, node_dispatcher.batch, lambda pool: [StallingGroup(pool, NETWORK)]) == 3

    for node_id in nodes:
        row = node_row(sim_conn, node_id)
        assert (row["node_state"], row["last_error"]) == (
            "UNKNOWN",
            "submit_many() gave no answer in 2 s",
        )
    # the real sim's recovery sends each prepared payload, once
    assert run_batch(db, node_recovery.batch) == 3
    assert {node_row(sim_conn, n)["node_state"] for n in nodes} == {"SUBMITTED"}
    assert side_effects(sim_conn) == dict.fromkeys(nodes, 1)


class Wordy(SimExecutor):
    """The sim, refusing with an error far beyond the network's text limit."""

    async def preflight(self, work: NodeWork) -> None:
        raise ExecutorError("no " * 5000, retryable=True, retry_after=5)


def test_an_error_beyond_the_limits_is_cut_not_refused(
    db: Any, sim_conn: Conn, runner_clock: Any
) -> None:
    [node_id] = one_node_movements(sim_conn, "wordy", 1, lane="instant")

    run_batch(db, node_dispatcher.batch, lambda pool: [Wordy(pool, NETWORK)])

    row = node_row(sim_conn, node_id)
    assert row["node_state"] == "READY"
    assert len(row["last_error"].encode()) <= 4096
    assert row["last_error"].endswith("[cut: 15000 bytes]")


# -- the observer and recovery -------------------------------------------------------------


class Chatty:
    """An executor without a side effect whose observe() answers 100 KiB of evidence."""

    key = "chatty"
    has_side_effect = False
    deduplicated_by = "nothing is sent"
    node_config_schema = SimExecutor.node_config_schema
    description = "test double"

    async def preflight(self, work: NodeWork) -> None:
        return None

    async def prepare(self, work: NodeWork) -> Prepared:
        return Prepared(external_request_id=work.idempotency_key)

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        return SubmitResult(f"ref-{work.node_id}")

    async def observe(self, work: NodeWork) -> ObserveResult:
        return ObserveResult(ObserveStatus.PENDING, {"log": "x" * 100_000, "price": float("nan")})

    async def recover(self, work: NodeWork) -> RecoveryResult:
        return RecoveryResult(RecoveryOutcome.STILL_UNKNOWN, {"log": "y" * 100_000})

    async def health(self) -> HealthResult:
        return HealthResult(HealthStatus.HEALTHY)


class Hanging(Chatty):
    """An executor whose observe() never answers for the nodes of its ``hung``
    set (a service that takes the connection and says nothing) and answers
    PENDING for the others."""

    key = "hanging"

    def __init__(self, hung: set[int]) -> None:
        self.hung = hung

    async def observe(self, work: NodeWork) -> ObserveResult:
        if work.node_id in self.hung:
            await asyncio.Event().wait()
        return ObserveResult(ObserveStatus.PENDING, {"seen": True})


def submitted(conn: Conn, count: int, prefix: str, **config: Any) -> list[int]:
    """``count`` one-node movements, their nodes SUBMITTED at T0 (first look at 42 s)."""
    ids = one_node_movements(conn, prefix, count, **config)
    for claimed in claim(conn, "dispatcher-1"):
        if claimed["node_id"] in ids:
            submit(conn, claimed)
    return ids


def test_the_observer_quarantines_a_node_whose_observe_crashes_and_observes_the_others(
    db: Any, sim_conn: Conn, runner_clock: Callable[[float], None]
) -> None:
    good = submitted(sim_conn, 3, "good", lane="default")
    [poison] = submitted(sim_conn, 1, "poison", lane="default", crash_at="observe")
    runner_clock(50)

    assert run_batch(db, node_observer.batch) == 4

    assert {node_row(sim_conn, n)["observe_count"] for n in good} == {1}
    row = node_row(sim_conn, poison)
    assert (row["node_state"], row["observe_count"]) == ("SUBMITTED", 0)
    assert "node_observer observe: SimCrash" in quarantined(sim_conn)[poison]
    # quarantined: not a candidate any more, however due
    runner_clock(3600)
    assert run_batch(db, node_observer.batch) == 0
    assert node_row(sim_conn, poison)["observe_count"] == 0


def on_quarantine(conn: Conn, trigger: str, body: str, *, at_commit: bool = False) -> None:
    """A trigger ``trigger`` on a node's quarantine running the PL/pgSQL
    ``body`` as the superuser (SECURITY DEFINER): as the row is written, or
    ``at_commit`` (a deferred constraint trigger)."""
    conn.execute(
        f"CREATE FUNCTION public.{trigger}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER"
        f" AS $$ BEGIN {body} RETURN NEW; END $$"
    )
    conn.execute(
        (
            f"CREATE CONSTRAINT TRIGGER {trigger} AFTER UPDATE ON movement_request_nodes"
            " DEFERRABLE INITIALLY DEFERRED"
            if at_commit
            else f"CREATE TRIGGER {trigger} BEFORE UPDATE ON movement_request_nodes"
        )
        + " FOR EACH ROW WHEN (NEW.quarantined_at IS NOT NULL)"
        f" EXECUTE FUNCTION public.{trigger}()"
    )


def observe_logged(db: Any, caplog: pytest.LogCaptureFixture) -> str:
    """One observer batch; what it logged."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="qtg"):
        run_batch(db, node_observer.batch)
    return caplog.text


def test_the_observer_says_a_quarantine_only_once_its_transaction_commits(
    db: Any,
    sim_conn: Conn,
    runner_clock: Callable[[float], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the quarantine is made on the chunk's transaction: a COMMIT that fails
    # (here a serialization failure raised at commit by a deferred trigger on
    # the quarantined row) undoes it, and no log line may say it happened
    [poison] = submitted(sim_conn, 1, "poison", lane="default", crash_at="observe")
    on_quarantine(
        sim_conn,
        "fail_at_commit",
        "RAISE EXCEPTION 'the commit fails' USING ERRCODE = '40001';",
        at_commit=True,
    )
    runner_clock(50)

    logged = observe_logged(db, caplog)
    assert poison not in quarantined(sim_conn)
    assert "event=observe_failed" in logged
    assert "event=node_quarantined" not in logged

    sim_conn.execute("DROP TRIGGER fail_at_commit ON movement_request_nodes")
    observe_logged(db, caplog)
    assert "node_observer observe: SimCrash" in quarantined(sim_conn)[poison]
    said = [r.getMessage() for r in caplog.records if "event=node_quarantined" in r.getMessage()]
    assert len(said) == 1 and f"node={poison} " in said[0]


def test_the_observer_says_nothing_of_a_chunk_whose_connection_it_lost(
    db: Any,
    sim_conn: Conn,
    runner_clock: Callable[[float], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the connection dies inside the quarantine (its savepoint): the quarantine
    # swallows the error, but the chunk's transaction is gone with it, so the
    # chunk ends as failed and no line says a node was quarantined
    [poison] = submitted(sim_conn, 1, "poison", lane="default", crash_at="observe")
    on_quarantine(
        sim_conn,
        "lose_the_connection",
        "PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5);",
    )
    runner_clock(50)

    logged = observe_logged(db, caplog)
    assert poison not in quarantined(sim_conn)
    assert "event=quarantine_failed" in logged
    assert "the transaction did not commit" in logged  # the chunk's observe_failed
    assert "event=node_quarantined" not in logged


def test_a_report_the_engine_refuses_quarantines_the_observed_node_and_not_the_others(
    db: Any, sim_conn: Conn, runner_clock: Callable[[float], None]
) -> None:
    # the observer reports a chunk of nodes in one call, sent with its COMMIT:
    # the engine refuses the one report in its row (QT050) and applies the
    # others, and the observer quarantines that node by its claim's secret
    good = submitted(sim_conn, 2, "good", lane="default")
    [poison] = submitted(sim_conn, 1, "poison", lane="default")
    plant_rule(sim_conn, "movement_request_nodes", f"NEW.id = {poison} AND NEW.observe_count > 0")
    runner_clock(50)

    assert run_batch(db, node_observer.batch) == 3

    assert {node_row(sim_conn, n)["observe_count"] for n in good} == {1}
    row = node_row(sim_conn, poison)
    assert (row["node_state"], row["observe_count"]) == ("SUBMITTED", 0)
    assert "node_observer complete_observe: " in quarantined(sim_conn)[poison]
    assert "planted rule" in quarantined(sim_conn)[poison]


def test_an_observe_that_never_answers_is_an_error_and_the_chunk_is_reported(
    db: Any, sim_conn: Conn, runner_clock: Callable[[float], None], monkeypatch: Any
) -> None:
    # the chunk's nodes are locked until its slowest observe() answers: one that
    # never does is cut off at the deadline, and its neighbours are reported
    procs.register_executor("hanging", False, SimExecutor.node_config_schema).one(sim_conn)
    nodes = submitted(sim_conn, 3, "hang", lane="default", executor="hanging")
    monkeypatch.setattr(node_observer, "OBSERVE_DEADLINE_S", 0.5)
    runner_clock(50)

    assert run_batch(db, node_observer.batch, lambda pool: [Hanging({nodes[1]})]) == 3

    answered, hung = node_row(sim_conn, nodes[0]), node_row(sim_conn, nodes[1])
    assert (answered["node_state"], answered["evidence"]) == ("OBSERVING", {"seen": True})
    assert hung["node_state"] == "OBSERVING" and hung["observe_count"] == 1
    assert hung["evidence"] == {"error": "observe() gave no answer in 0.5 s"}
    # looked at again after the lane's observe_error_retry_seconds (5 s)
    assert hung["next_observe_at"] == hung["last_observed_at"] + timedelta(seconds=5)
    assert node_row(sim_conn, nodes[2])["evidence"] == {"seen": True}


class ChainReader(Chatty):
    """An executor whose observe() reads a chain's block number over JSON-RPC
    (the executors' EvmRpc, with its circuit) and answers PENDING."""

    key = "chain_reader"

    def __init__(self, url: str) -> None:
        self.rpc = EvmRpc(url, timeout=0.5)

    async def observe(self, work: NodeWork) -> ObserveResult:
        async with chain_errors("silent"):
            return ObserveResult(ObserveStatus.PENDING, {"block": await self.rpc.block_number()})


def test_a_chain_that_stops_answering_costs_the_observer_one_wait_not_one_a_batch(
    db: Any, sim_conn: Conn, runner_clock: Callable[[float], None], endpoint: Endpoint
) -> None:
    # a chain's RPC takes the connection and says nothing: the first batch waits
    # for its nodes' calls (asked together: one JSON-RPC batch, one timeout),
    # which opens the endpoint's circuit; from then on its nodes are reported
    # unreachable without a call, so they no longer hold the other nodes of
    # their chunk
    procs.register_executor("chain_reader", False, SimExecutor.node_config_schema).one(sim_conn)
    silent = submitted(sim_conn, 3, "silent", lane="default", executor="chain_reader")
    carried = lambda pool: [SimExecutor(pool, NETWORK), ChainReader(endpoint.url)]  # noqa: E731
    runner_clock(50)

    assert run_batch(db, node_observer.batch, carried) == 3
    assert len(endpoint.requests) == 1
    for node_id in silent:
        assert "no answer within 0.5s" in node_row(sim_conn, node_id)["evidence"]["error"]

    # due again (the chain's retry hint), with sim nodes due beside them, in a
    # runner started since: the same endpoint, the same circuit
    others = submitted(sim_conn, 3, "other", lane="default")
    runner_clock(50 + RETRY_LATER_S)
    assert run_batch(db, node_observer.batch, carried) == 6
    assert len(endpoint.requests) == 1
    for node_id in silent:
        row = node_row(sim_conn, node_id)
        assert (row["node_state"], row["observe_count"]) == ("OBSERVING", 2)
        assert "not sent: " in row["evidence"]["error"]
        assert "gave no answer to a call" in row["evidence"]["error"]
    assert {node_row(sim_conn, n)["observe_count"] for n in others} == {1}
    endpoint_circuit(endpoint.url, "").answered()  # leave the process's circuit closed


def test_evidence_beyond_the_limits_is_cut_not_refused_round_after_round(
    db: Any, sim_conn: Conn, runner_clock: Callable[[float], None]
) -> None:
    procs.register_executor("chatty", False, SimExecutor.node_config_schema).one(sim_conn)
    [node_id] = submitted(sim_conn, 1, "chatty", lane="default", executor="chatty")
    runner_clock(50)

    assert run_batch(db, node_observer.batch, lambda pool: [Chatty()]) == 1

    row = node_row(sim_conn, node_id)
    assert row["node_state"] == "OBSERVING"
    evidence = row["evidence"]
    assert evidence["cut"] is True and evidence["bytes"] > 100_000
    assert len(evidence["head"].encode()) <= 65536 // 2
    # small evidence is kept whole, with a NaN as text
    assert ReportLimits().document({"price": float("nan"), "n": 1}) == {"price": "nan", "n": 1}


def test_recovery_quarantines_a_node_whose_recover_crashes_and_recovers_the_others(
    db: Any, sim_conn: Conn, runner_clock: Callable[[float], None]
) -> None:
    [ok] = one_node_movements(sim_conn, "ok", 1, lane="instant")
    [poison] = one_node_movements(sim_conn, "poison", 1, lane="instant", crash_at="recover")
    for claimed in claim(sim_conn, "dispatcher-1"):
        prepare(sim_conn, claimed)
        assert fail(sim_conn, claimed, retryable=True) == "UNKNOWN"

    assert run_batch(db, node_recovery.batch) == 2

    # ok: prepared, never seen: the prepared payload is resubmitted, in flight
    assert node_row(sim_conn, ok)["node_state"] == "SUBMITTED"
    assert node_row(sim_conn, poison)["node_state"] == "UNKNOWN"
    assert "node_recovery recover: SimCrash" in quarantined(sim_conn)[poison]
    runner_clock(3600)
    assert run_batch(db, node_recovery.batch) == 0


# -- the pool and the heartbeat ------------------------------------------------------------


def test_a_pooled_connection_whose_backend_was_terminated_is_replaced_before_use(
    db: Any, runner_clock: Any
) -> None:
    admin = db.connect()

    async def scenario() -> tuple[int, int]:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "pool-check")
        async with open_pool(conninfo, name="pool-check", min_size=1, max_size=1) as pool:
            async with pool.connection() as c:
                first = (await (await c.execute("SELECT pg_backend_pid()")).fetchone() or [0])[0]
            # pg_terminate_backend waits (up to its timeout) for the backend to end
            terminated = admin.execute("SELECT pg_terminate_backend(%s, 5000)", (first,)).fetchone()
            assert terminated == (True,)
            async with pool.connection() as c:
                row = await (
                    await c.execute("SELECT pg_backend_pid(), clock() IS NOT NULL")
                ).fetchone()
            assert row is not None
            return first, row[0]

    first, second = asyncio.run(scenario())
    assert second != first


def test_a_batch_longer_than_the_interval_keeps_the_heartbeat_beating(
    db: Any, runner_clock: Any
) -> None:
    interval = 0.1
    ticks: list[int] = []
    notes: list[str | None] = []
    reader = bind(db.connect())

    def beats() -> int:
        row = reader.execute(
            "SELECT coalesce(max(ticks), 0) FROM worker_heartbeats WHERE worker_name = 'slow'"
        ).fetchone()
        return int(row[0]) if row else 0

    def note() -> str | None:
        row = reader.execute(
            "SELECT last_error FROM worker_heartbeats WHERE worker_name = 'slow'"
        ).fetchone()
        return row[0] if row else None

    async def batch(ctx: WorkerContext, worker_id: str) -> int:
        ticks.append(beats())
        # a long batch: its end is a condition, the heartbeat row beating on
        for _ in range(400):
            if beats() >= ticks[0] + 12:
                break
            if beats() == ticks[0] + 3:
                notes.append(note())
            await asyncio.sleep(interval / 2)
        ticks.append(beats())
        notes.append(note())
        return 0

    async def stop_after_one(delay: float, stop: asyncio.Event, wake: asyncio.Event) -> None:
        stop.set()

    async def scenario() -> None:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "beat-test")
        async with open_pool(conninfo, name="beat-test") as pool:
            ctx = WorkerContext(NETWORK, pool, {}, "beat-test:1")
            entry = WorkerEntry("slow", batch, interval=interval, jitter=0.0, tier="core")
            await run_worker(entry, ctx, sleep=stop_after_one, rng=random.Random(1))

    asyncio.run(scenario())
    assert ticks[0] == 1  # the tick before the batch
    assert ticks[1] >= 13, ticks  # and one an interval while it ran
    # after ten intervals, the heartbeat says the batch runs long
    assert notes[0] is None
    assert notes[-1] is not None and notes[-1].startswith("batch running for "), notes
