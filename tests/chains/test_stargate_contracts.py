"""Stargate v2's published contracts over LayerZero's EndpointV2 on the local
chains (deployed and configured by the same code as `qtg chains up`): the
paths wired as a real deployment's (peers, credits, fees, fares); a taxi whose
packet only the trusted verifier can verify and that executes once; a bus
whose rides carry an empty guid and whose BusRode and BusDriven come from
TokenMessaging, not the pool (driving it takes the passengers as BusRode gave
them and quoteDriveBus's fee); a payout the pool cannot make cached and paid
later by anyone, once; the refusals the executor relies on (slippage, fee,
path, LZ token)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from chain_support import LocalChainSet
from stargate_support import Side, revert_name, send_param

from qtg_world.chains import layerzero
from qtg_world.chains.stargate import ASSET_ID, POOL_LIQUIDITY, stargate_fee
from qtg_world.stargate import BUS_DRIVEN_TOPIC, BUS_RODE_TOPIC

pytestmark = [pytest.mark.chain, pytest.mark.slow]

ZERO_GUID = bytes(32)


@pytest.fixture(scope="module")
def sides(local_chain_set: LocalChainSet) -> tuple[Side, Side]:
    a, b = local_chain_set.chains
    return Side(a), Side(b)


def _sender(side: Side, amount: int) -> str:
    sender = side.w3.eth.accounts[6]
    side.fund(sender, amount)
    return str(sender)


def _send(src: Side, sender: str, param: tuple[Any, ...]) -> Any:
    fee = src.pool.functions.quoteSend(param, False).call()
    return src.mined(
        src.pool.functions.send(param, tuple(fee), sender).transact(
            {"from": sender, "value": fee[0]}
        )
    )


def test_the_paths_are_wired_as_a_deployment(sides: tuple[Side, Side]) -> None:
    a, b = sides
    assert (a.eid, b.eid) == (50111, 50112)
    for side, other in ((a, b), (b, a)):
        assert side.endpoint.functions.eid().call() == side.eid
        assert side.pool.functions.localEid().call() == side.eid
        config = side.pool.functions.getAddressConfig().call()
        assert (config[1], config[3]) == (side.relayer, side.tm.address)  # planner, messaging
        assert side.tm.functions.assetIds(side.pool.address).call() == ASSET_ID
        assert side.tm.functions.peers(other.eid).call() == layerzero.address_word(other.tm.address)
        assert side.tm.functions.planner().call() == side.relayer
        # the credit the other chain sent for this path, and the liquidity behind it
        assert side.pool.functions.paths(other.eid).call() >= POOL_LIQUIDITY // 2
        assert side.balance(side.pool.address) >= POOL_LIQUIDITY // 2
        # only the relayer verifies; every message pays the library's fee
        assert side.lib.functions.whitelistCaller().call() == side.relayer
        assert side.lib.functions.nativeFee().call() == layerzero.MESSAGE_FEE
        _max, fare, _drop, _waiting, _first = side.tm.functions.busQueues(other.eid).call()
        assert 0 < fare < layerzero.MESSAGE_FEE
    # the OFT selectors the engine signs and quotes with (IOFT.send, quoteSend, quoteOFT)
    param = send_param(b.eid, a.owner, 1, 1)
    assert a.pool.functions.send(param, (0, 0), a.owner).selector == "0xc7c7f5b3"
    assert a.pool.functions.quoteSend(param, False).selector == "0x3b6f743b"
    assert a.pool.functions.quoteOFT(param).selector == "0x0d35b415"


def test_a_taxi_is_verified_by_the_relayer_and_executed_once(sides: tuple[Side, Side]) -> None:
    a, b = sides
    a.relay(b)  # whatever an earlier test left on the path
    amount = 250_000_000
    sender, receiver = _sender(a, amount), b.w3.eth.accounts[7]
    limit, details, oft = a.pool.functions.quoteOFT(send_param(b.eid, receiver, amount, 0)).call()
    received = amount - stargate_fee(amount)
    assert limit[1] >= amount and tuple(oft) == (amount, received)
    assert tuple(details[0]) == (-stargate_fee(amount), "protocol fee")
    param = send_param(b.eid, receiver, amount, received)
    pool_before, receiver_before = a.balance(a.pool.address), b.balance(receiver)
    receipt = _send(a, sender, param)
    (sent,) = a.events(receipt, "OFTSent")
    guid = bytes(sent["guid"])
    assert guid != ZERO_GUID and sent["dstEid"] == b.eid and sent["fromAddress"] == sender
    assert (sent["amountSentLD"], sent["amountReceivedLD"]) == (amount, received)
    assert a.balance(a.pool.address) == pool_before + amount
    # the message is LayerZero's packet from TokenMessaging to its peer
    (packet,) = [p for p in a.packets(b, receipt["blockNumber"]) if p.guid == guid]
    assert packet.sender == layerzero.address_word(a.tm.address)
    assert packet.receiver == b.tm.address and packet.executor.lz_receive_gas > 0

    # only the verifier the library trusts may verify
    stranger = b.w3.eth.accounts[9]
    verify = layerzero.verify_call(b.lib, packet)
    assert revert_name(verify, {"from": stranger}) == "OnlyWhitelistCaller"
    assert revert_name(layerzero.receive_call(b.endpoint, packet), {"from": stranger}) == (
        "LZ_InvalidNonce"
    )  # not verified: nothing to execute
    executed = layerzero.deliver_now(packet, b.chain, b.relayer)
    (got,) = b.events(executed, "OFTReceived")
    assert (bytes(got["guid"]), got["srcEid"], got["toAddress"], got["amountReceivedLD"]) == (
        guid, a.eid, receiver, received,
    )  # fmt: skip
    assert b.balance(receiver) == receiver_before + received
    # a packet executes once
    assert layerzero.deliver_now(packet, b.chain, b.relayer) is None
    assert revert_name(layerzero.receive_call(b.endpoint, packet), {"from": stranger}) == (
        "LZ_PayloadHashNotFound"
    )
    assert revert_name(verify, {"from": b.relayer}) == "LZ_PathNotVerifiable"


def test_a_bus_rides_on_token_messaging_and_carries_its_guid_when_driven(
    sides: tuple[Side, Side],
) -> None:
    a, b = sides
    a.relay(b)
    amount = 10_000_000
    sender = _sender(a, 2 * amount)
    receivers = [b.w3.eth.accounts[7], b.w3.eth.accounts[8]]
    rides = []
    for receiver in receivers:
        receipt = _send(a, sender, send_param(b.eid, receiver, amount, 0, bus=True))
        (sent,) = a.events(receipt, "OFTSent")
        assert bytes(sent["guid"]) == ZERO_GUID
        # the ticket is TokenMessaging's event, not the pool's; no packet yet
        assert BUS_RODE_TOPIC not in a.topics(receipt, a.pool)
        (rode,) = a.events(receipt, "BusRode", a.tm)
        assert rode["dstEid"] == b.eid
        assert not any(p.dst_eid == b.eid for p in a.packets(b, receipt["blockNumber"]))
        rides.append(rode["ticketId"])
    assert rides[1] == rides[0] + 1
    first, waiting = a.waiting(b)
    assert first <= rides[0] and rides[1] == first + waiting - 1

    passengers = a.passengers(b)
    fee = a.tm.functions.quoteDriveBus(b.eid, passengers).call()[0]
    assert fee == layerzero.MESSAGE_FEE
    drive = a.tm.functions.driveBus(b.eid, passengers)
    assert revert_name(drive, {"from": a.owner, "value": 0}) == "LZ_InsufficientFee"
    forged = passengers[:-1] + bytes([passengers[-1] ^ 1])
    assert revert_name(a.tm.functions.driveBus(b.eid, forged), {"from": a.owner, "value": fee}) == (
        "Bus_InvalidPassenger"
    )
    driven = a.drive(b, a.w3.eth.accounts[9])  # anyone may drive
    assert BUS_DRIVEN_TOPIC not in a.topics(driven, a.pool)
    (bus,) = a.events(driven, "BusDriven", a.tm)
    guid = bytes(bus["guid"])
    assert guid != ZERO_GUID and bus["dstEid"] == b.eid
    assert (bus["startTicketId"], bus["numPassengers"]) == (first, waiting)
    assert a.waiting(b)[1] == 0
    (packet,) = [p for p in a.packets(b, driven["blockNumber"]) if p.guid == guid]

    (executed,) = [r for r in a.relay(b) if b.events(r, "OFTReceived")]
    got = b.events(executed, "OFTReceived")
    assert {bytes(g["guid"]) for g in got} == {guid}
    assert {g["toAddress"] for g in got} >= set(receivers)
    assert layerzero.deliver_now(packet, b.chain, b.relayer) is None


def test_a_cached_payout_is_retried_once_by_anyone(sides: tuple[Side, Side]) -> None:
    a, b = sides
    a.relay(b)
    amount = 5_000_000
    sender, receiver = _sender(a, amount), b.w3.eth.accounts[8]
    receipt = _send(a, sender, send_param(b.eid, receiver, amount, 0))
    guid = bytes(a.events(receipt, "OFTSent")[0]["guid"])
    received = amount - stargate_fee(amount)
    stranger = b.w3.eth.accounts[9]
    with b.payouts_held():
        before = b.balance(receiver)
        (delivery,) = a.relay(b)
        assert b.events(delivery, "OFTReceived") == []
        (cached,) = b.events(delivery, "UnreceivedTokenCached")
        assert (bytes(cached["guid"]), cached["index"], cached["srcEid"]) == (guid, 0, a.eid)
        assert (cached["receiver"], cached["amountLD"], bytes(cached["composeMsg"])) == (
            receiver, received, b"",
        )  # fmt: skip
        assert b.balance(receiver) == before
        retry = b.pool.functions.retryReceiveToken(guid, 0, a.eid, receiver, received, b"")
        # still held: the retry fails and the cache stays
        assert revert_name(retry, {"from": stranger}) == "Stargate_OutflowFailed"
    # a wrong amount is not the cached payout
    wrong = b.pool.functions.retryReceiveToken(guid, 0, a.eid, receiver, received + 1, b"")
    assert revert_name(wrong, {"from": stranger}) == "Stargate_UnreceivedTokenNotFound"
    paid = b.mined(retry.transact({"from": stranger}))
    (got,) = b.events(paid, "OFTReceived")
    assert (bytes(got["guid"]), got["toAddress"], got["amountReceivedLD"]) == (
        guid, receiver, received,
    )  # fmt: skip
    assert b.balance(receiver) == before + received
    assert revert_name(retry, {"from": stranger}) == "Stargate_UnreceivedTokenNotFound"
    # and the message itself is not executed again
    assert a.relay(b) == []


def test_sends_the_pool_refuses(sides: tuple[Side, Side]) -> None:
    a, b = sides
    amount = 1_000_000
    sender = _sender(a, amount)
    receiver = b.w3.eth.accounts[7]
    param = send_param(b.eid, receiver, amount, amount)  # no room for the fee
    fee = a.pool.functions.quoteSend(param, False).call()
    tx = {"from": sender, "value": fee[0]}
    assert revert_name(a.pool.functions.send(param, tuple(fee), sender), tx) == (
        "Stargate_SlippageTooHigh"
    )
    ok = send_param(b.eid, receiver, amount, 0)
    assert revert_name(a.pool.functions.send(ok, (0, 0), sender), {"from": sender}) == (
        "LZ_InsufficientFee"
    )
    bus = send_param(b.eid, receiver, amount, 0, bus=True)
    assert revert_name(a.pool.functions.send(bus, (0, 0), sender), {"from": sender}) == (
        "Stargate_InsufficientFare"
    )
    assert revert_name(a.pool.functions.quoteSend(ok, True), {"from": sender}) == (
        "LZ_LzTokenUnavailable"
    )
    # a chain without a path: no credit to send with, no peer to quote
    unknown = send_param(40161, receiver, amount, 0)
    limit, _details, _oft = a.pool.functions.quoteOFT(unknown).call()
    assert limit[1] == 0
    assert revert_name(a.pool.functions.quoteSend(unknown, False), {"from": sender}) == "NoPeer"
    assert revert_name(a.pool.functions.send(unknown, tuple(fee), sender), tx) == (
        "Path_InsufficientCredit"
    )


def test_the_worlds_serve_process_relays_a_taxi_and_drives_a_bus(
    sides: tuple[Side, Side], local_chain_set: LocalChainSet
) -> None:
    """`qtg world up`'s serve process hosts the relayer: a taxi is delivered and a
    bus driven (after its scaled wait) and delivered without anyone else."""
    from chain_support import TEST_KDF_ITERATIONS, light_keystore

    from qtg_world.bybit import ensure_exchange_keys
    from qtg_world.chains.registry import fund_treasury
    from qtg_world.local import start_world, stop_world

    a, b = sides
    state_dir = local_chain_set.state_dir
    light_keystore(state_dir)
    keys = ensure_exchange_keys(state_dir, kdf_iterations=TEST_KDF_ITERATIONS)
    for chain in local_chain_set.chains:
        fund_treasury(chain, [keys.hot])
    state, _ = start_world(state_dir, time_scale=100.0, stargate_bus_wait=200.0)
    try:
        assert state.stargate_eids == {a.chain.key: a.eid, b.chain.key: b.eid}
        amount = 3_000_000
        sender, receiver = _sender(a, 2 * amount), b.w3.eth.accounts[7]
        start = b.w3.eth.block_number
        taxi = _send(a, sender, send_param(b.eid, receiver, amount, 0))
        bus = _send(a, sender, send_param(b.eid, receiver, amount, 0, bus=True))
        taxi_guid = bytes(a.events(taxi, "OFTSent")[0]["guid"])
        ticket = a.events(bus, "BusRode", a.tm)[0]["ticketId"]
        deadline = time.monotonic() + 60
        while True:
            got = b.pool.events.OFTReceived().get_logs(
                from_block=start, argument_filters={"toAddress": receiver}
            )
            guids = {bytes(e["args"]["guid"]) for e in got}
            if taxi_guid in guids and len(guids) >= 2:
                break
            assert time.monotonic() < deadline, f"delivered so far: {guids}"
            time.sleep(0.5)
        driven = a.tm.events.BusDriven().get_logs(from_block=bus["blockNumber"])
        covering = [
            e["args"]
            for e in driven
            if e["args"]["startTicketId"]
            <= ticket
            < e["args"]["startTicketId"] + e["args"]["numPassengers"]
        ]
        assert len(covering) == 1 and bytes(covering[0]["guid"]) in guids
    finally:
        stop_world(state_dir)
