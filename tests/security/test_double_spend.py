"""No runner login produces a second side effect for a node.

The two paths that once did, played with the runner's own login and the real
sim executor (its side effects are rows of qtg_sim.side_effects, keyed by the
intent's idempotency key):

(a) turn the executor's side effect off, then report a retryable failure after
    the money moved, hoping for a retry: the flag cannot be turned off, and the
    failure sends the node to recovery, which finds the side effect;
(b) claim the node in recovery and report NOT_SUBMITTED without evidence,
    hoping for a fresh dispatch: refused while the intent is prepared or sent;
    recovery resubmits the prepared payload itself, which lands once.

(c) claim the node in recovery (its dispatcher's lease ran out, or the
    dispatcher was declared stopped), then report through the dispatcher's
    calls with the recovery's secret (fail_submit retryable, release_nodes,
    complete_submit settled), hoping for READY and a fresh intent: a
    dispatcher's call refuses a recovery's claim (QT021) and changes nothing.

Each ends with exactly one side effect. A fresh one takes two operators
(requeue_node, tests/procedures/test_requeue_node.py).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import SIM_SCHEMA, add_lanes, bind, create_started, node, pin_clock, plan, snapshot
from rows import T0, iso_at
from runner_helpers import side_effects

from qtg_runner.db import procs
from qtg_runner.db.pool import open_pool
from qtg_runner.executors.base import NodeWork, Prepared, RecoveryOutcome
from qtg_runner.executors.sim import SimExecutor

Conn = psycopg.Connection[Any]


@pytest.fixture
def runner(db: TestDatabase) -> Conn:
    """The runner's login, its clock pinned with the test's (a test database)."""
    login = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(login, T0.isoformat())
    return login


def with_sim(db: TestDatabase, act: Any) -> Any:
    """Run ``act(sim)`` with a SimExecutor on a pool of the runner's login."""

    async def scenario() -> Any:
        pool = open_pool(
            db.runner_dsn("testnet") + " options='-c search_path=testnet,qtg'", name="sfx"
        )
        await pool.open(wait=True)
        try:
            return await act(SimExecutor(pool, "testnet"))
        finally:
            await pool.close()

    return asyncio.run(scenario())


def claimed_and_sent(db: TestDatabase, runner: Conn) -> tuple[procs.ClaimedNode, NodeWork]:
    """The dispatcher's path up to the side effect: claim, prepare, record, submit."""
    (claimed,) = procs.claim_ready_nodes("w1", 1, 60).all(runner)
    work = NodeWork.from_claim(claimed, "testnet")

    async def send(sim: SimExecutor) -> None:
        prepared = await sim.prepare(work)
        procs.record_intent_prepared(
            claimed.node_id,
            claimed.claim_secret,
            external_request_id=prepared.external_request_id,
            payload=prepared.payload,
        ).one(runner)
        await sim.submit(work, prepared)

    with_sim(db, send)
    return claimed, work


def recover_once(db: TestDatabase, runner: Conn) -> str:
    """One recovery round as node_recovery runs it: claim, recover(), report."""
    (rec,) = procs.claim_recovery_nodes("rec", 1, 60).all(runner)
    work = NodeWork.from_claim(rec, "testnet")
    result = with_sim(db, lambda sim: sim.recover(work))
    return str(
        procs.complete_recovery(
            rec.node_id,
            rec.claim_secret,
            result.outcome.value,
            evidence=result.evidence,
            external_ref=result.external_ref,
        ).one(runner)
    )


def test_a_retryable_failure_after_the_money_moved_is_sent_once(
    db: TestDatabase, conn: Conn, runner: Conn
) -> None:
    add_lanes(conn, "instant")
    create_started(conn, plan(node("a", lane="instant")), "twice-a")
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as flip:
        runner.execute(
            "SELECT register_executor('sim', false, %s::jsonb)", (json.dumps(SIM_SCHEMA),)
        )
    assert flip.value.sqlstate in ("QT041", "42501")
    assert snapshot(conn) == before

    claimed, _ = claimed_and_sent(db, runner)
    state = procs.fail_submit(claimed.node_id, claimed.claim_secret, "timeout", True).one(runner)
    assert state == "UNKNOWN"
    assert procs.claim_ready_nodes("w2", 10).all(runner) == []
    assert recover_once(db, runner) == "COMPLETED"
    assert side_effects(conn) == {claimed.node_id: [1]}


def test_not_submitted_without_evidence_is_refused_and_the_node_sent_once(
    db: TestDatabase, conn: Conn, runner: Conn
) -> None:
    add_lanes(conn, "instant")
    create_started(conn, plan(node("a", lane="instant")), "twice-b")
    claimed, _ = claimed_and_sent(db, runner)
    pin_clock(runner, iso_at(60))  # the dispatcher's lease ran out
    (rec,) = procs.claim_recovery_nodes("rec", 1, 60).all(runner)
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as refused:
        procs.complete_recovery(rec.node_id, rec.claim_secret, "NOT_SUBMITTED").one(runner)
    assert refused.value.sqlstate == "QT021"
    assert snapshot(conn) == before
    assert procs.claim_ready_nodes("w2", 10).all(runner) == []

    pin_clock(runner, iso_at(120))  # the recovery lease ran out
    assert recover_once(db, runner) == "COMPLETED"
    assert side_effects(conn) == {claimed.node_id: [1]}


RECOVERY_CLAIM_MISUSED = {
    "fail_submit": "SELECT fail_submit(%(id)s, %(secret)s, 'timeout', true, 0)",
    "fail_submit_permanent": "SELECT fail_submit(%(id)s, %(secret)s, 'gone', false)",
    "release_nodes": "SELECT * FROM release_nodes(ARRAY[%(id)s], ARRAY[%(secret)s], 'x', 0)",
    "complete_submit": (
        "SELECT * FROM complete_submit_batch(ARRAY[%(id)s], ARRAY[%(secret)s], ARRAY['0xother'],"
        " NULL, ARRAY[true])"
    ),
    "record_intent_prepared": (
        "SELECT * FROM record_intent_prepared_batch(ARRAY[%(id)s], ARRAY[%(secret)s],"
        " p_external_request_ids => ARRAY['fresh'], p_payloads => ARRAY['{}'::jsonb])"
    ),
}


@pytest.mark.parametrize("how", sorted(RECOVERY_CLAIM_MISUSED))
@pytest.mark.parametrize("stopped", [False, True], ids=["lease_ran_out", "declared_stopped"])
def test_a_recovery_claim_reported_as_a_dispatchers_is_refused_and_the_node_sent_once(
    db: TestDatabase, conn: Conn, runner: Conn, how: str, stopped: bool
) -> None:
    add_lanes(conn, "instant")
    create_started(conn, plan(node("a", lane="instant")), f"twice-d-{how}")
    if stopped:  # the honest dispatcher, still working, declared stopped by the runner login
        procs.heartbeat("node_dispatcher", "host:1:d1", "core", 5).one(runner)
        (claimed,) = procs.claim_ready_nodes("node_dispatcher", 1, 300, "host:1:d1").all(runner)
        work = NodeWork.from_claim(claimed, "testnet")

        async def send(sim: SimExecutor) -> None:
            prepared = await sim.prepare(work)
            procs.record_intent_prepared(
                claimed.node_id, claimed.claim_secret, **_recorded(prepared)
            ).one(runner)
            await sim.submit(work, prepared)

        with_sim(db, send)
        assert procs.worker_stopped("node_dispatcher", "host:1:d1").one(runner)
    else:
        claimed, _ = claimed_and_sent(db, runner)
        pin_clock(runner, iso_at(60))  # the dispatcher's lease ran out
    assert side_effects(conn) == {claimed.node_id: [1]}
    (rec,) = procs.claim_recovery_nodes("evil", 1, 60).all(runner)
    before = snapshot(conn)

    refusal: tuple[str | None, str | None]
    try:
        rows = runner.execute(
            RECOVERY_CLAIM_MISUSED[how], {"id": rec.node_id, "secret": rec.claim_secret}
        ).fetchall()
    except psycopg.Error as exc:
        refusal = (exc.sqlstate, str(exc))
    else:  # a batch call answers in the node's row
        ((*_, code, message),) = rows
        refusal = (code, message)
    assert refusal[0] == "QT021", refusal
    assert "held by a recovery's claim" in str(refusal[1])
    assert snapshot(conn) == before
    assert procs.claim_ready_nodes("w2", 10).all(runner) == []

    # the node is recovery's to settle: it finds the side effect, and none is added
    pin_clock(runner, iso_at(240))
    assert recover_once(db, runner) == "COMPLETED"
    assert side_effects(conn) == {claimed.node_id: [1]}


def test_a_prepared_payload_that_never_left_is_resubmitted_as_it_is(
    db: TestDatabase, conn: Conn, runner: Conn
) -> None:
    # the dispatcher died between recording the intent and sending it
    add_lanes(conn, "instant")
    create_started(conn, plan(node("a", lane="instant")), "twice-c")
    (claimed,) = procs.claim_ready_nodes("w1", 1, 60).all(runner)
    work = NodeWork.from_claim(claimed, "testnet")
    prepared = with_sim(db, lambda sim: sim.prepare(work))
    procs.record_intent_prepared(claimed.node_id, claimed.claim_secret, **_recorded(prepared)).one(
        runner
    )
    assert side_effects(conn) == {}

    pin_clock(runner, iso_at(60))
    (rec,) = procs.claim_recovery_nodes("rec", 1, 60).all(runner)
    result = with_sim(db, lambda sim: sim.recover(NodeWork.from_claim(rec, "testnet")))
    assert result.outcome is RecoveryOutcome.IN_FLIGHT
    assert result.external_ref == f"sim:testnet:{claimed.idempotency_key}"
    procs.complete_recovery(
        rec.node_id, rec.claim_secret, "IN_FLIGHT", external_ref=result.external_ref
    ).one(runner)
    # a second recovery of the same payload lands nowhere new
    again = with_sim(db, lambda sim: sim.submit(work, prepared))
    assert again.external_ref == result.external_ref
    assert list(side_effects(conn)) == [claimed.node_id]
    assert len(side_effects(conn)[claimed.node_id]) == 1


def _recorded(prepared: Prepared) -> dict[str, Any]:
    return {
        k: v
        for k, v in asdict(prepared).items()
        if k in ("external_request_id", "payload") and v is not None
    }
