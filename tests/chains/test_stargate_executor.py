"""The stargate executor end to end: the real dispatcher and observer batches as
a runner login, the real local chains, and the Stargate relayer running beside
them for the module (qtg_world.stargate, at the tests' time scale; it
drives a bus after 100 protocol seconds, 1 s here).

The contracts are Stargate v2's own over LayerZero's EndpointV2
(qtg_world.chains.stargate). What a treasury relies on: a taxi and a bus each
send their amount once from the source pool and complete only on the
destination's OFTReceived for the guid (the bus's from the BusDriven that
TokenMessaging emits for the ticket of the send's BusRode, also
TokenMessaging's, the pool's OFTSent carrying none); a payout
the destination pool could not make stays PENDING while cached and completes
on the OFTReceived of the retry that follows; a recipient that is allow-listed
on the source but not on the destination is never signed for (QT032)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from chain_support import LocalChainSet
from evm_support import head, make_due, node_state, superuser
from stargate_support import (
    SCALE,
    Side,
    oft_received_by,
    oft_sent_from,
    register_stargate,
    run_sg_batch,
    start_send,
)
from web3 import Web3

from qtg_runner.db import procs
from qtg_runner.workers import node_dispatcher, node_observer
from qtg_world import stargate as relayer
from qtg_world.chains.stargate import stargate_fee
from qtg_world.stargate import BUS_RODE_TOPIC

pytestmark = [pytest.mark.chain, pytest.mark.slow]

FINISHED = {"COMPLETED", "FAILED", "UNKNOWN"}


@pytest.fixture(scope="module")
def relay(local_chain_set: LocalChainSet) -> Iterator[relayer.RelayerHandle]:
    handle = relayer.serve(
        local_chain_set.chains,
        relayer.RelayerConfig(bus_wait_s=100.0, retry_every_s=60.0, time_scale=SCALE),
    )
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet, relay: relayer.RelayerHandle) -> Any:
    conn = superuser(db)
    register_stargate(conn, local_chain_set)
    return conn


def observe_until(
    db: Any,
    conn: Any,
    chain_set: LocalChainSet,
    node_id: int,
    done: Any = lambda state, evidence: state in FINISHED,
    deadline_s: float = 60.0,
) -> tuple[str, dict[str, Any]]:
    """Observer batches (the node made due each time) until ``done`` holds."""
    deadline = time.monotonic() + deadline_s
    while True:
        make_due(conn, node_id)
        run_sg_batch(db, node_observer.batch, chain_set)
        state, evidence = conn.execute(
            "SELECT node_state::text, evidence FROM movement_request_nodes WHERE id = %s",
            (node_id,),
        ).fetchone()
        if done(state, evidence or {}):
            return state, evidence or {}
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node_id} stayed {state}: {evidence}")
        time.sleep(0.3)


@pytest.mark.parametrize("mode", ["taxi", "bus"])
def test_a_send_moves_once_and_completes_on_the_destinations_oft_received(
    db: Any, world: Any, local_chain_set: LocalChainSet, mode: str
) -> None:
    a, b = (Side(c) for c in local_chain_set.chains)
    sender, recipient = (k.address for k in local_chain_set.treasury)
    amount = 3_210_000 if mode == "taxi" else 4_320_000
    start_a, start_b = head(a.chain) + 1, head(b.chain) + 1
    sender_before, recipient_before = a.balance(sender), b.balance(recipient)
    _, node_id = start_send(
        world, a.chain.key, b.chain.key, sender, recipient, Decimal(amount) / 10**6, mode, mode
    )
    assert run_sg_batch(db, node_dispatcher.batch, local_chain_set) == 1
    assert node_state(world, node_id) == "SUBMITTED"
    state, evidence = observe_until(db, world, local_chain_set, node_id)
    assert state == "COMPLETED", evidence

    received = amount - stargate_fee(amount)  # the fee library's 1 bp, rounded up
    (sent,) = oft_sent_from(a, sender, start_a)
    guid = "0x" + bytes(sent["guid"]).hex()
    if mode == "taxi":
        assert guid == evidence["guid"]
    else:
        # a bus ride's OFTSent carries no guid: the BusDriven for its ticket
        # brings it, and both BusRode and BusDriven are TokenMessaging's
        assert guid == "0x" + "00" * 32
        send = a.w3.eth.get_transaction_receipt(evidence["tx_hash"])
        assert BUS_RODE_TOPIC not in a.topics(send, a.pool)
        (rode,) = a.events(send, "BusRode", a.tm)
        assert rode["ticketId"] == evidence["ticket_id"] and rode["dstEid"] == b.eid
        drive = a.w3.eth.get_transaction_receipt(evidence["bus"]["tx_hash"])
        (bus,) = a.events(drive, "BusDriven", a.tm)
        assert bus["startTicketId"] == evidence["bus"]["start_ticket_id"] <= rode["ticketId"]
        assert rode["ticketId"] < bus["startTicketId"] + bus["numPassengers"]
        assert "0x" + bytes(bus["guid"]).hex() == evidence["guid"] != guid
    assert (sent["amountSentLD"], sent["amountReceivedLD"]) == (amount, received)
    (got,) = oft_received_by(b, recipient, start_b)
    assert "0x" + bytes(got["guid"]).hex() == evidence["guid"]
    assert got["amountReceivedLD"] == received
    assert evidence["oft_received"]["amount"] == str(received)
    assert evidence["oft_received"]["confirmations"] >= 3
    assert a.balance(sender) == sender_before - amount
    assert b.balance(recipient) == recipient_before + received


def test_a_cached_payout_stays_pending_and_completes_on_the_retry(
    db: Any, world: Any, local_chain_set: LocalChainSet, relay: relayer.RelayerHandle
) -> None:
    a, b = (Side(c) for c in local_chain_set.chains)
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start_b = head(b.chain) + 1
    recipient_before = b.balance(recipient)
    retried_before = relay.counts["retried"]
    with b.payouts_held():
        _, node_id = start_send(
            world, a.chain.key, b.chain.key, sender, recipient, Decimal("2"), "cached"
        )
        run_sg_batch(db, node_dispatcher.batch, local_chain_set)
        state, evidence = observe_until(
            db, world, local_chain_set, node_id, lambda s, e: "payout_cached" in e
        )
        assert state == "OBSERVING"
        assert evidence["payout_cached"]["guid"] == evidence["guid"]
        assert b.balance(recipient) == recipient_before
    state, evidence = observe_until(db, world, local_chain_set, node_id)
    assert state == "COMPLETED", evidence
    assert relay.counts["retried"] == retried_before + 1
    (got,) = oft_received_by(b, recipient, start_b)
    assert "0x" + bytes(got["guid"]).hex() == evidence["guid"]
    assert b.balance(recipient) == recipient_before + 2_000_000 - stargate_fee(2_000_000)


def test_a_recipient_allowed_only_on_the_source_is_never_signed_for(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    a, b = local_chain_set.chains
    sender = Web3.to_checksum_address(local_chain_set.treasury[0].address)
    outsider = "0x" + "5e" * 20
    procs.allow_destination(a.key, outsider, "a counterparty on the source only").one(world)
    nonce_before = Side(a).w3.eth.get_transaction_count(sender)
    _, node_id = start_send(world, a.key, b.key, sender, outsider, Decimal("1"), "out-1")
    run_sg_batch(db, node_dispatcher.batch, local_chain_set)
    row = world.execute(
        "SELECT node_state::text, last_error FROM movement_request_nodes WHERE id = %s",
        (node_id,),
    ).fetchone()
    assert row[0] == "FAILED"
    assert "QT032" in row[1] and "destination chain" in row[1]
    assert world.execute("SELECT count(*) FROM evm_transactions").fetchone()[0] == 0
    assert Side(a).w3.eth.get_transaction_count(sender) == nonce_before
