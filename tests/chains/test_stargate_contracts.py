"""The Stargate v2 double on the local chains (deployed and wired by the same code
as `qtg chains up`): a taxi from test-a to test-b delivered by the relayer's key
once; a bus whose rides carry an empty guid until it is driven (BusDriven
brings the guid, the delivery's OFTReceived carries it); a payout the pool
cannot make cached and paid later by anyone, once; the refusals the executor
relies on (slippage, fee, path, lzToken, delivery by another key, replay)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from chain_support import LocalChainSet
from stargate_support import Side, revert_name, send_param

from qtg_runner.chains.stargate import POOL_LIQUIDITY, stargate_eid

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


def test_the_pools_are_wired(sides: tuple[Side, Side]) -> None:
    a, b = sides
    assert (a.eid, b.eid) == (50111, 50112)
    for side, other in ((a, b), (b, a)):
        assert side.pool.functions.localEid().call() == side.eid
        assert side.pool.functions.peers(other.eid).call() == other.pool.address
        assert side.pool.functions.relayer().call() == side.relayer
        assert side.balance(side.pool.address) >= POOL_LIQUIDITY // 2
    # the OFT selectors are the real ones (IOFT.send, quoteSend, quoteOFT)
    param = send_param(b.eid, a.owner, 1, 1)
    assert a.pool.functions.send(param, (0, 0), a.owner).selector == "0xc7c7f5b3"
    assert a.pool.functions.quoteSend(param, False).selector == "0x3b6f743b"
    assert a.pool.functions.quoteOFT(param).selector == "0x0d35b415"


def test_a_taxi_is_delivered_by_the_relayer_once(sides: tuple[Side, Side]) -> None:
    a, b = sides
    amount = 250_000_000
    sender, receiver = _sender(a, amount), b.w3.eth.accounts[7]
    limit, details, oft = a.pool.functions.quoteOFT(send_param(b.eid, receiver, amount, 0)).call()
    assert limit[1] >= amount and oft[0] == amount and oft[1] == amount - amount // 10_000
    assert details[0][0] == -(amount // 10_000)
    param = send_param(b.eid, receiver, amount, oft[1])
    pool_before, receiver_before = a.balance(a.pool.address), b.balance(receiver)
    receipt = _send(a, sender, param)
    (sent,) = a.events(receipt, "OFTSent")
    guid = bytes(sent["guid"])
    assert guid != ZERO_GUID and sent["dstEid"] == b.eid and sent["fromAddress"] == sender
    assert (sent["amountSentLD"], sent["amountReceivedLD"]) == (amount, oft[1])
    assert a.balance(a.pool.address) == pool_before + amount
    dst_eid, _, to, amount_ld = a.pool.functions.taxiMessage(guid).call()
    assert (dst_eid, to, amount_ld) == (b.eid, receiver, oft[1])

    deliver = b.pool.functions.deliverTaxi(guid, a.eid, receiver, oft[1])
    assert revert_name(deliver, {"from": b.owner}) == "NotRelayer"
    received = b.mined(deliver.transact({"from": b.relayer}))
    (got,) = b.events(received, "OFTReceived")
    assert (bytes(got["guid"]), got["srcEid"], got["toAddress"], got["amountReceivedLD"]) == (
        guid, a.eid, receiver, oft[1],
    )  # fmt: skip
    assert b.balance(receiver) == receiver_before + oft[1]
    assert b.pool.functions.delivered(a.eid, guid).call()
    # a guid is delivered once
    assert revert_name(deliver, {"from": b.relayer}) == "AlreadyDelivered"


def test_a_bus_carries_an_empty_guid_until_driven(sides: tuple[Side, Side]) -> None:
    a, b = sides
    amount = 10_000_000
    sender = _sender(a, 2 * amount)
    receivers = [b.w3.eth.accounts[7], b.w3.eth.accounts[8]]
    rides = []
    for receiver in receivers:
        receipt = _send(a, sender, send_param(b.eid, receiver, amount, 0, bus=True))
        (sent,) = a.events(receipt, "OFTSent")
        assert bytes(sent["guid"]) == ZERO_GUID
        (rode,) = a.events(receipt, "BusRode")
        assert rode["dstEid"] == b.eid
        rides.append(rode["ticketId"])
    assert rides[1] == rides[0] + 1
    # driving needs the fee
    assert revert_name(a.pool.functions.driveBus(b.eid), {"from": a.owner, "value": 0}) == (
        "InsufficientFee"
    )
    fee = a.pool.functions.quoteDriveBus(b.eid).call()[0]
    stranger = a.w3.eth.accounts[9]
    driven = a.mined(a.pool.functions.driveBus(b.eid).transact({"from": stranger, "value": fee}))
    (bus,) = a.events(driven, "BusDriven")
    guid = bytes(bus["guid"])
    assert guid != ZERO_GUID and bus["dstEid"] == b.eid
    assert (
        bus["startTicketId"] <= rides[0] and rides[1] < bus["startTicketId"] + bus["numPassengers"]
    )
    # an empty bus is not driven
    assert revert_name(a.pool.functions.driveBus(b.eid), {"from": a.owner, "value": fee}) == (
        "BusEmpty"
    )
    tickets = [
        a.pool.functions.tickets(b.eid, t).call()
        for t in range(bus["startTicketId"], bus["startTicketId"] + bus["numPassengers"])
    ]
    received = b.mined(
        b.pool.functions.deliverBus(
            guid, a.eid, [t[0] for t in tickets], [t[1] for t in tickets]
        ).transact({"from": b.relayer})
    )
    got = b.events(received, "OFTReceived")
    assert {bytes(g["guid"]) for g in got} == {guid}
    assert {g["toAddress"] for g in got} >= set(receivers)


def test_a_cached_payout_is_retried_once_by_anyone(sides: tuple[Side, Side]) -> None:
    a, b = sides
    amount = 5_000_000
    sender, receiver = _sender(a, amount), b.w3.eth.accounts[8]
    receipt = _send(a, sender, send_param(b.eid, receiver, amount, 0))
    guid = bytes(a.events(receipt, "OFTSent")[0]["guid"])
    received_ld = amount - amount // 10_000
    b.mined(b.pool.functions.setPayoutsHeld(True).transact({"from": b.owner}))
    try:
        before = b.balance(receiver)
        delivery = b.mined(
            b.pool.functions.deliverTaxi(guid, a.eid, receiver, received_ld).transact(
                {"from": b.relayer}
            )
        )
        assert b.events(delivery, "OFTReceived") == []
        (cached,) = b.events(delivery, "UnreceivedTokenCached")
        assert (bytes(cached["guid"]), cached["index"], cached["srcEid"]) == (guid, 0, a.eid)
        assert (cached["receiver"], cached["amountLD"], bytes(cached["composeMsg"])) == (
            receiver, received_ld, b"",
        )  # fmt: skip
        assert b.balance(receiver) == before
        retry = b.pool.functions.retryReceiveToken(guid, 0, a.eid, receiver, received_ld, b"")
        # still held: the retry fails and the cache stays
        assert revert_name(retry, {"from": b.w3.eth.accounts[9]}) == "OutflowFailed"
    finally:
        b.mined(b.pool.functions.setPayoutsHeld(False).transact({"from": b.owner}))
    # a wrong amount is not the cached payout
    wrong = b.pool.functions.retryReceiveToken(guid, 0, a.eid, receiver, received_ld + 1, b"")
    assert revert_name(wrong, {"from": b.w3.eth.accounts[9]}) == "UnreceivedTokenNotFound"
    paid = b.mined(retry.transact({"from": b.w3.eth.accounts[9]}))
    (got,) = b.events(paid, "OFTReceived")
    assert (bytes(got["guid"]), got["toAddress"], got["amountReceivedLD"]) == (
        guid, receiver, received_ld,
    )  # fmt: skip
    assert b.balance(receiver) == before + received_ld
    assert revert_name(retry, {"from": b.w3.eth.accounts[9]}) == "UnreceivedTokenNotFound"
    # and the delivery itself is not replayed
    again = b.pool.functions.deliverTaxi(guid, a.eid, receiver, received_ld)
    assert revert_name(again, {"from": b.relayer}) == "AlreadyDelivered"


def test_sends_the_pool_refuses(sides: tuple[Side, Side], local_chain_set: LocalChainSet) -> None:
    a, b = sides
    amount = 1_000_000
    sender = _sender(a, amount)
    receiver = b.w3.eth.accounts[7]
    param = send_param(b.eid, receiver, amount, amount)  # no room for the fee
    fee = a.pool.functions.quoteSend(param, False).call()
    tx = {"from": sender, "value": fee[0]}
    assert revert_name(a.pool.functions.send(param, tuple(fee), sender), tx) == "SlippageTooHigh"
    ok = send_param(b.eid, receiver, amount, 0)
    assert revert_name(a.pool.functions.send(ok, (0, 0), sender), {"from": sender}) == (
        "InsufficientFee"
    )
    assert revert_name(a.pool.functions.quoteSend(ok, True), {"from": sender}) == (
        "LzTokenUnavailable"
    )
    unknown = send_param(stargate_eid(local_chain_set.chains[0]), receiver, amount, 0)
    assert revert_name(a.pool.functions.quoteOFT(unknown), {"from": sender}) == "InvalidPath"
    odd = (*ok[:6], b"\x00\x00")
    assert revert_name(a.pool.functions.quoteSend(odd, False), {"from": sender}) == (
        "InvalidOftCmd"
    )


def test_the_worlds_serve_process_relays_a_taxi_and_drives_a_bus(
    sides: tuple[Side, Side], local_chain_set: LocalChainSet
) -> None:
    """`qtg world up`'s serve process hosts the relayer: a taxi is delivered and a
    bus driven (after its scaled wait) and delivered without anyone else."""
    from chain_support import TEST_KDF_ITERATIONS, light_keystore

    from qtg_runner.chains.registry import fund_treasury
    from qtg_runner.world.bybit import ensure_exchange_keys
    from qtg_runner.world.local import start_world, stop_world

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
        ticket = a.events(bus, "BusRode")[0]["ticketId"]
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
        driven = a.pool.events.BusDriven().get_logs(from_block=bus["blockNumber"])
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
