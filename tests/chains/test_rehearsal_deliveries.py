"""A rehearsal's deliveries on the destination's fork (qtg_rehearsal.deliveries,
.ccip_delivery), forking the local chains as a rehearsal forks real ones: a
Stargate taxi's packet verified and executed, a bus driven then delivered, a
CCIP message on a v1.6 lane committed and executed by the lane's OffRamp;
a bus that cannot be driven and a CCIP message that cannot be delivered
each failing the rehearsal with why;
what cannot be delivered on a fork is named by step.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from chain_support import LocalChainSet
from engine import as_person, node, plan
from evm_support import register_world, superuser
from rehearsal_support import UNITS, real_state, rehearse_as_alice, rpc_only_env

from qtg_runner.db import procs
from qtg_runner.executors.registry import registration

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def queue_a_passenger(chain_set: LocalChainSet, account: int) -> tuple[Any, Any]:
    """anvil account ``account`` takes a 5 USDC bus ride from the first chain to
    the second on the real chain, its bus not driven: (source, destination)."""
    from stargate_support import Side, send_param

    source, destination = Side(chain_set.chains[0]), Side(chain_set.chains[1])
    waiting = source.w3.eth.accounts[account]
    source.fund(waiting, 5 * UNITS)
    param = send_param(destination.eid, waiting, 5 * UNITS, 0, bus=True)
    fee = source.pool.functions.quoteSend(param, False).call()
    source.mined(
        source.pool.functions.send(param, tuple(fee), waiting).transact(
            {"from": waiting, "value": fee[0]}
        )
    )
    return source, destination


def test_a_stargate_taxi_and_a_bus_are_delivered_on_the_destinations_fork(
    db: Any, local_chain_set: LocalChainSet
) -> None:
    """Two Stargate sends of one movement rehearsed end to end, each sent on
    the source's fork by the real executor: a taxi, whose packet is verified
    and executed on the destination's fork through the real EndpointV2 (its
    receive library impersonated: no DVN signs for a fork); and a bus ride,
    whose bus the rehearsal drives first with the passenger already waiting
    in the real chain's queue (its BusRode read from before the fork,
    through the relay). Both COMPLETE on the OFTReceived they find there; the
    recipient's USDC rises on the destination's fork by at least the nodes'
    minimum, and no real chain, nor its bus queue, moves."""
    from stargate_support import register_stargate, stargate_plan

    a, b = local_chain_set.chains
    source, destination = queue_a_passenger(local_chain_set, 7)
    queue = source.tm.functions.busQueues(destination.eid).call()
    assert queue[3] >= 1  # a passenger waits on the real chain

    sender, recipient = (k.address.lower() for k in local_chain_set.treasury)
    sends = [
        {**stargate_plan(a.key, b.key, sender, recipient, mode)["nodes"][0], "key": mode}
        for mode in ("taxi", "bus")
    ]
    conn = superuser(db)
    try:
        register_stargate(conn, local_chain_set)
        with as_person(conn, "alice"):
            movement_id = int(
                procs.create_movement("rehearsed-stargate", Decimal(20), plan={"nodes": sends})
                .one(conn)
                .movement_id
            )
        before = real_state(local_chain_set)
        summary = rehearse_as_alice(conn, movement_id, rpc_only_env(local_chain_set), timeout_s=120)
    finally:
        conn.close()
    assert real_state(local_chain_set) == before
    assert source.tm.functions.busQueues(destination.eid).call() == queue
    assert summary.outcome == "passed", "\n".join(summary.lines)
    assert {s["state"] for s in summary.record["steps"]} == {"COMPLETED"}, summary.lines
    assert len(summary.record["steps"]) == 2
    assert any("driven on the fork" in line for line in summary.lines), summary.lines
    assert any("verified and executed on" in line for line in summary.lines), summary.lines
    moved = {
        (x["chain"], x["address"], x["asset"]): int(x["after"]) - int(x["before"])
        for x in summary.record["balances"]
    }
    assert moved[a.key, sender, "USDC"] == -40 * UNITS
    # at most 10 bps of slippage (stargate_plan), at least what the pool paid
    assert 40 * UNITS * 9990 // 10000 <= moved[b.key, recipient, "USDC"] <= 40 * UNITS


def test_a_bus_that_cannot_be_driven_fails_the_rehearsal_with_why(
    db: Any, local_chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A passenger waits in the real chain's queue ahead of the movement's bus
    ride, and the rehearsal looks for earlier passengers in no block before
    the fork: its bus cannot be driven. After its tries the rehearsal ends
    without waiting out its timeout, and fails with the reason on the step."""
    from stargate_support import register_stargate, stargate_plan

    from qtg_rehearsal import deliveries

    monkeypatch.setattr(deliveries, "SEARCH_DEPTH", 0)
    monkeypatch.setattr(deliveries, "MAX_TRIES", 3)
    a, b = local_chain_set.chains
    queue_a_passenger(local_chain_set, 8)
    sender, recipient = (k.address.lower() for k in local_chain_set.treasury)
    ride = {**stargate_plan(a.key, b.key, sender, recipient, "bus")["nodes"][0], "key": "ride"}
    conn = superuser(db)
    try:
        register_stargate(conn, local_chain_set)
        with as_person(conn, "alice"):
            movement_id = int(
                procs.create_movement("undriven-bus", Decimal(20), plan={"nodes": [ride]})
                .one(conn)
                .movement_id
            )
        summary = rehearse_as_alice(conn, movement_id, rpc_only_env(local_chain_set), timeout_s=120)
    finally:
        conn.close()
    step, shown = undelivered_step(summary, "step ride (stargate)")
    assert "could not be driven" in step, shown
    assert any(
        x.startswith("stargate: the bus from") and "not found in the 0 blocks before" in x
        for x in summary.lines
    ), shown


def undelivered_step(summary: Any, step: str) -> tuple[str, str]:
    """A rehearsal of one step whose message was given up: it failed before
    its timeout, the step still OBSERVING and its line saying it was not
    delivered. The step's line and the whole summary."""
    shown = "\n".join(summary.lines)
    assert summary.outcome == "failed", shown
    assert not summary.record["timed_out"], shown
    assert [s["state"] for s in summary.record["steps"]] == ["OBSERVING"], shown
    line = next(x for x in summary.lines if x.startswith(step))
    assert "not delivered on the fork" in line, shown
    return line, shown


def ccip_movement(conn: Any, chain_set: LocalChainSet, external_id: str, amount: Decimal) -> int:
    """alice's one-send CCIP movement on the local chains' v1.6 lane, awaiting approval."""
    from qtg_runner.executors.ccip import CcipExecutor

    a, b = chain_set.chains
    sender, recipient = (k.address.lower() for k in chain_set.treasury)
    send = node("send", executor=CcipExecutor.key, lane="ccip", chain=a.key,
                destination_chain=b.key, **{"from": sender, "to": recipient})  # fmt: skip
    register_world(conn, chain_set)
    registration(CcipExecutor).one(conn)
    procs.upsert_lane_baseline("ccip", 60, min_poll_seconds=1).one(conn)
    with as_person(conn, "alice"):
        created = procs.create_movement(external_id, amount, plan=plan(send)).one(conn)
    return int(created.movement_id)


def test_a_ccip_message_is_committed_and_executed_on_the_destinations_fork(
    db: Any, local_chain_set: LocalChainSet
) -> None:
    """A CCIP send on a v1.6 lane rehearsed end to end: sent on the source's
    fork by the real executor, its message committed on the destination's
    fork (the root written into the OffRamp: no DON signs for a fork) and
    executed there by the OffRamp itself with the Iris double's attestation
    of its USDC burn. The step COMPLETES on the ExecutionStateChanged the
    engine's observer finds; the recipient's USDC rises on the destination's
    fork by the amount, and no real chain moves."""
    a, b = local_chain_set.chains
    sender, recipient = (k.address.lower() for k in local_chain_set.treasury)
    conn = superuser(db)
    try:
        movement_id = ccip_movement(conn, local_chain_set, "rehearsed-ccip", Decimal(15))
        before = real_state(local_chain_set)
        summary = rehearse_as_alice(conn, movement_id, rpc_only_env(local_chain_set), timeout_s=180)
    finally:
        conn.close()
    assert real_state(local_chain_set) == before
    shown = "\n".join(summary.lines)
    assert summary.outcome == "passed", shown
    assert [s["state"] for s in summary.record["steps"]] == ["COMPLETED"], shown
    assert any("committed and executed on" in x and "SUCCESS" in x for x in summary.lines), shown
    moved = {
        (x["chain"], x["address"], x["asset"]): int(x["after"]) - int(x["before"])
        for x in summary.record["balances"]
    }
    assert moved[a.key, sender, "USDC"] == -15 * UNITS
    assert moved[b.key, recipient, "USDC"] == 15 * UNITS


def test_a_ccip_message_that_cannot_be_delivered_fails_the_rehearsal_with_why(
    db: Any, local_chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Iris double on the protocol's own clock (a standard burn attested
    after 15 minutes) and a rehearsal that waits 3 s for it: the message is
    not delivered, the rehearsal ends without waiting out its timeout, and
    fails with the reason on the step and in its lines."""
    from qtg_rehearsal import deliveries, rehearse

    monkeypatch.setattr(rehearse, "IRIS_TIME_SCALE", 1.0)
    monkeypatch.setattr(deliveries, "ATTESTED_WITHIN_S", 3.0)
    conn = superuser(db)
    try:
        movement_id = ccip_movement(conn, local_chain_set, "undelivered-ccip", Decimal(5))
        summary = rehearse_as_alice(conn, movement_id, rpc_only_env(local_chain_set), timeout_s=120)
    finally:
        conn.close()
    step, shown = undelivered_step(summary, "step send (ccip)")
    assert "not attested" in step, shown


def test_what_is_not_delivered_on_a_fork_is_named_by_step() -> None:
    """A CCIP send waits for what does not run on a fork where its lane is not
    a registered v1.6 lane (a v1.5 lane, or none), and its line says so; one
    on a v1.6 lane is delivered, as a Stargate taxi is and a bus driven and
    delivered, and they are not among them."""
    from qtg_rehearsal.rehearse import FAR_SIDE, far_side

    def send(key: str, source: str, dest: str) -> dict[str, Any]:
        return {"key": key, "executor": "ccip",
                "config": {"chain": source, "destination_chain": dest}}  # fmt: skip

    plan = {
        "nodes": [
            send("new", "a", "b"),
            send("old", "b", "a"),
            send("unknown", "a", "c"),
            {"key": "ride", "executor": "stargate", "config": {"mode": "bus"}},
            {"key": "taxi", "executor": "stargate", "config": {"mode": "taxi"}},
            {"key": "plain", "executor": "stargate", "config": {}},  # a taxi by default
        ]
    }
    lanes = [
        {"source_chain_key": "a", "dest_chain_key": "b", "version": "1.6"},
        {"source_chain_key": "b", "dest_chain_key": "a", "version": "1.5"},
    ]
    assert far_side(plan, lanes) == {"old": FAR_SIDE["ccip"], "unknown": FAR_SIDE["ccip"]}


def test_a_commit_finds_the_offramps_roots_and_a_contract_without_them_is_left_as_it_was(
    local_chain_set: LocalChainSet,
) -> None:
    """The commit a rehearsal writes (qtg_rehearsal.ccip_delivery.commit):
    on the OffRamp, s_roots is found and the root reads back committed, at
    the slot found when asked again, committed (its slot unknown) when
    asked without it; on a contract that is no v1.6 OffRamp (the Router)
    the refusal (NoRoots) says so: no retry could commit there, while a
    fork that does not answer is ForkUnreachable, to be tried again. Every
    entry the search tried and missed is put back as it was."""
    from qtg_rehearsal import ccip_delivery
    from qtg_rehearsal.forks import ForkUnreachable
    from qtg_runner.chains.ccip import SentMessage, merkle_root_calldata
    from qtg_runner.ports import free_port
    from qtg_world.chains.ccip import ccip_selector
    from qtg_world.chains.local import rpc

    a, b = local_chain_set.chains
    message = SentMessage(
        version="1.6", message_id=bytes(range(32)), source_selector=ccip_selector(a),
        dest_selector=ccip_selector(b), sequence_number=10**9, nonce=0,
        sender="0x" + "11" * 20, data=b"", receiver="0x" + "22" * 20, gas_limit=0,
        extra_args=b"", fee_token="0x" + "00" * 20, fee_amount=0, tokens=(),
        onramp=a.contracts["CcipOnRamp"].lower(), tx_hash="0x" + "33" * 32,
        block_number=1, log_index=0,
    )  # fmt: skip
    offramp = b.contracts["CcipOffRamp"]
    entries = [  # the first slots: the double's s_roots is among them
        ccip_delivery._roots_entry(s, message.source_selector, message.leaf()) for s in range(16)
    ]
    before = [rpc(b.rpc_url, "eth_getStorageAt", [offramp, e, "latest"]) for e in entries]
    slot = ccip_delivery.commit(b.rpc_url, offramp, message)
    after = [rpc(b.rpc_url, "eth_getStorageAt", [offramp, e, "latest"]) for e in entries]
    assert 0 < slot < len(entries)  # a miss or more first, each put back as it was
    changed = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
    assert changed == [slot]
    root = merkle_root_calldata(message.source_selector, message.leaf())
    committed = rpc(b.rpc_url, "eth_call", [{"to": offramp, "data": "0x" + root.hex()}, "latest"])
    assert int(committed, 16) == ccip_delivery.OLD_COMMIT
    assert ccip_delivery.commit(b.rpc_url, offramp, message, slot) == slot
    # committed by a try that did not return its slot: committed, slot unknown
    assert ccip_delivery.commit(b.rpc_url, offramp, message) is None
    # a fork that does not answer now is tried again, not given up as rootless
    with pytest.raises(ForkUnreachable):
        ccip_delivery.commit(f"http://127.0.0.1:{free_port()}", offramp, message)

    with pytest.raises(ccip_delivery.NoRoots, match="does not answer getMerkleRoot"):
        ccip_delivery.commit(b.rpc_url, b.contracts["CcipRouter"], message)


def test_a_ticket_taken_on_the_fork_is_never_searched_for_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bus's passengers are read from the fork's rides, and those queued
    before the fork from the chain it forks (through the relay, a provider's
    calls). A ticket after one already taken on the fork was taken on the
    fork too, in a block a later round reads: the search before the fork is
    never made for it; a ticket before every fork ride is searched for."""
    from types import SimpleNamespace

    from qtg_rehearsal import deliveries

    searched: list[tuple[int, int]] = []

    def rides(_side: Any, start: int, end: int) -> dict[tuple[int, int], tuple[bytes, str]]:
        searched.append((start, end))
        return {(30102, 6): (b"earlier", "0x" + "66" * 32)}

    monkeypatch.setattr(deliveries, "_rides", rides)
    side: Any = SimpleNamespace(
        fork=SimpleNamespace(block=5_000),
        rides={(30102, 7): b"first on the fork"},
        riders={(30102, 7): "0x" + "77" * 32},
        searched_to=None,
    )
    with pytest.raises(RuntimeError, match="rode on the fork after the blocks read"):
        deliveries._passenger(side, 30102, 8)
    assert searched == []
    assert deliveries._passenger(side, 30102, 6) == b"earlier"
    assert searched == [(5_001 - deliveries.SEARCH_BLOCKS, 5_000)]
