"""LayerZero's part in a rehearsal: a Stargate taxi's packet, sent on the
source chain's fork, verified and executed on the destination chain's fork,
as LayerZero's DVNs and executor do on the real chains.

No DVN signs for a fork, and none is needed: the endpoint (EndpointV2, the
protocol's own, on the fork as on the chain) takes a packet's payload hash
from the receive library it has for the path (``getReceiveLibrary``), so the
rehearsal impersonates that library (``anvil_impersonateAccount``) and calls
``EndpointV2.verify`` as it, then ``lzReceive`` as any executor may, with the
value the packet's executor options ask for, then each compose it queued.
The same steps serve a fork of a real chain (its ReceiveUln302) and of the
local chains (their SimpleMessageLib).

A bus ride is driven on the source's fork as Stargate's planner would drive
it (``driveBus`` is permissionless): the bus takes the passengers from the
head of its queue, so the rehearsal finds the bytes of each ticket queued
before its own (``BusRode``, read from the chain the fork forks, through the
relay, a few thousand blocks a search), quotes the drive (``quoteDriveBus``)
and drives as many buses as it takes to carry its ticket; the bus's packet
is then delivered as a taxi's is. Each round reads every fork's PacketSent
and BusRode since the last round; a packet to a chain that is not forked is
left (there is no destination to deliver on). ``ForkDeliveries(forks,
stargate)`` starts the rounds in a thread; ``lines()`` says what was
delivered or could not be; ``stop()`` ends them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from qtg_rehearsal.forks import Fork, impersonating, rpc
from qtg_world.chains import layerzero
from qtg_world.chains.stargate import token_messaging_abi

log = logging.getLogger(__name__)

ROUND_S = 0.25
"""How often the forks are read for packets sent."""
MAX_TRIES = 40
"""How many rounds a packet's delivery is tried before the rehearsal says
why it could not be (about 10 s)."""
EXECUTOR = to_checksum_address("0x" + "e1" * 20)
"""The account that executes the packets on a fork: anyone may call lzReceive
once a packet is verified; this one is given the ether its value needs."""
ETHER = 10**21
"""What the impersonated library and the executor are given for gas on a fork."""
MINED_S = 20.0
_ENDPOINT = keccak(text="endpoint()")[:4]
"""An OApp's endpoint(): TokenMessaging names its chain's EndpointV2."""
SEARCH_BLOCKS = 2_000
"""The blocks one search for earlier passengers reads (a provider's range cap
is seldom lower)."""
SEARCH_DEPTH = 200_000
"""How far back before the fork the earlier passengers are looked for; a
ticket older than that is said, and its bus not driven."""


@dataclass
class _Side:
    chain_key: str
    fork: Fork
    eid: int
    endpoint: Any
    w3: Any
    scanned: int
    messaging: Any = None
    """Stargate's TokenMessaging on the fork (its buses)."""
    rides: dict[tuple[int, int], bytes] = field(default_factory=dict)
    """(destination eid, ticket) -> the passenger's bytes, as BusRode gave them."""
    searched_to: int | None = None
    """The oldest block read for earlier passengers (None: none read yet)."""


class ForkDeliveries:
    """The rounds that deliver the forks' Stargate packets (see the module)."""

    def __init__(self, forks: Mapping[str, Fork], stargate: Sequence[Mapping[str, Any]]) -> None:
        """``stargate``: the registry's Stargate rows (chain_key, remote_id
        the chain's LayerZero eid, contracts.TokenMessaging) of the forked
        chains; each fork's endpoint is read from its TokenMessaging."""
        from web3 import HTTPProvider, Web3

        self._sides: dict[int, _Side] = {}
        self._lines: list[str] = []
        self._done: set[bytes] = set()
        self._tries: dict[bytes, int] = {}
        abi = layerzero.npm_artifact(*layerzero.ENDPOINT_ARTIFACT)["abi"]
        for row in stargate:
            fork = forks.get(str(row["chain_key"]))
            messaging = (row.get("contracts") or {}).get("TokenMessaging")
            if fork is None or not messaging:
                continue
            try:
                w3 = Web3(HTTPProvider(fork.anvil_url, request_kwargs={"timeout": 30}))
                endpoint_word = w3.eth.call(
                    {"to": Web3.to_checksum_address(messaging), "data": _ENDPOINT}
                )
                endpoint = w3.eth.contract(
                    address=Web3.to_checksum_address("0x" + bytes(endpoint_word)[-20:].hex()),
                    abi=abi,
                )
                side = _Side(
                    fork.chain_key,
                    fork,
                    int(row["remote_id"]),
                    endpoint,
                    w3,
                    w3.eth.block_number,
                    w3.eth.contract(
                        address=Web3.to_checksum_address(messaging), abi=token_messaging_abi()
                    ),
                )
                rpc(fork.anvil_url, "anvil_setBalance", [EXECUTOR, hex(ETHER)])
            except Exception as exc:  # a registry row the fork does not bear out: said
                self._lines.append(
                    f"layerzero: no deliveries on {fork.chain_key}'s fork: its Stargate "
                    f"TokenMessaging {messaging} names no endpoint there ({str(exc)[:200]})"
                )
                continue
            self._sides[side.eid] = side
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rehearsal-deliveries", daemon=True)
        if self._sides:
            self._thread.start()

    def lines(self) -> list[str]:
        return list(self._lines)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def __enter__(self) -> ForkDeliveries:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(ROUND_S):
            for side in self._sides.values():
                try:
                    self._round(side)
                except Exception as exc:  # a fork gone, a reverted step: said, tried again
                    log.warning("rehearsal deliveries on %s: %s", side.chain_key, exc)

    def _round(self, side: _Side) -> None:
        head = side.w3.eth.block_number
        if head <= side.scanned:
            return
        self._drive_buses(side, side.scanned + 1, head)
        packets = layerzero.packets_sent(side.w3, side.endpoint.address, side.scanned + 1, head)
        for packet in packets:
            if self._stop.is_set():
                return  # the rehearsal is over: its forks are going
            if packet.guid in self._done:
                continue
            destination = self._sides.get(packet.dst_eid)
            if destination is None:
                self._lines.append(
                    f"layerzero: packet {packet.guid_hex} from {side.chain_key} goes to eid "
                    f"{packet.dst_eid}, which is not forked: not delivered"
                )
                self._done.add(packet.guid)
                continue
            try:
                deliver(destination, packet)
            except Exception as exc:
                tries = self._tries[packet.guid] = self._tries.get(packet.guid, 0) + 1
                if tries < MAX_TRIES:
                    return  # this round ends here: the path's later packets wait behind it
                self._done.add(packet.guid)
                self._lines.append(
                    f"layerzero: packet {packet.guid_hex} from {side.chain_key} could not be "
                    f"delivered on {destination.chain_key}'s fork: {str(exc)[:300]}"
                )
                continue
            self._done.add(packet.guid)
            self._lines.append(
                f"layerzero: packet {packet.guid_hex} from {side.chain_key} verified and executed "
                f"on {destination.chain_key}'s fork (its receive library impersonated)"
            )
        side.scanned = head

    def _drive_buses(self, side: _Side, start: int, head: int) -> None:
        """Drive the buses that carry the rides taken on ``side``'s fork in
        blocks ``start`` to ``head`` to a forked chain (see the module)."""
        rides = _rides(side, start, head)
        side.rides.update(rides)
        ours = sorted(key for key in rides if key[0] in self._sides)
        for eid, ticket in ours:
            if self._stop.is_set():
                return
            try:
                drive_bus(side, eid, ticket)
            except Exception as exc:
                self._lines.append(
                    f"stargate: the bus from {side.chain_key} to eid {eid} carrying ticket "
                    f"{ticket} could not be driven on the fork: {str(exc)[:300]}"
                )
                continue
            self._lines.append(
                f"stargate: the bus from {side.chain_key} to {self._sides[eid].chain_key} "
                f"carrying ticket {ticket} driven on the fork, as Stargate's planner would"
            )


def _rides(side: _Side, start: int, end: int) -> dict[tuple[int, int], bytes]:
    """The BusRode of ``side``'s TokenMessaging in blocks ``start`` to ``end``."""
    found = side.messaging.events.BusRode().get_logs(from_block=start, to_block=end)
    return {
        (int(e["args"]["dstEid"]), int(e["args"]["ticketId"])): bytes(e["args"]["passenger"])
        for e in found
    }


def _passenger(side: _Side, eid: int, ticket: int) -> bytes:
    """The bytes of ticket ``ticket`` to ``eid``: from the rides read, else from
    the chain before the fork, searched back SEARCH_BLOCKS at a time (anvil
    reads blocks before its fork from the forked chain, through the relay)."""
    while (eid, ticket) not in side.rides:
        oldest = side.fork.block + 1 if side.searched_to is None else side.searched_to
        if oldest <= 0 or side.fork.block + 1 - oldest >= SEARCH_DEPTH:
            raise RuntimeError(
                f"ticket {ticket}, queued before the rehearsal's, was not found in the "
                f"{SEARCH_DEPTH:,} blocks before the fork"
            )
        start = max(0, oldest - SEARCH_BLOCKS)
        side.rides.update(_rides(side, start, oldest - 1))
        side.searched_to = start
    return side.rides[eid, ticket]


def drive_bus(side: _Side, eid: int, ticket: int) -> None:
    """Drive buses from ``side``'s fork to ``eid``, each with the passengers at
    the head of the queue (as many as a bus takes), until ``ticket`` has ridden;
    the driver (EXECUTOR, impersonated) pays the quoted fee."""
    tm, w3, url = side.messaging, side.w3, side.fork.anvil_url
    while True:
        most, _fare, _drop_fare, queued, first = tm.functions.busQueues(eid).call()
        if ticket < first:
            return  # driven
        count = min(int(queued), int(most))
        if count == 0:
            raise RuntimeError(f"the queue to eid {eid} is empty, ticket {ticket} not in it")
        passengers = b"".join(_passenger(side, eid, t) for t in range(first, first + count))
        fee = int(tm.functions.quoteDriveBus(eid, passengers).call()[0])
        with impersonating(url, EXECUTOR):
            sent = tm.functions.driveBus(eid, passengers).transact({"from": EXECUTOR, "value": fee})
            _mined(w3, sent, f"driving the bus to eid {eid} from ticket {first}")


def deliver(side: _Side, packet: layerzero.Packet) -> None:
    """Verify ``packet`` on ``side``'s endpoint as the path's receive library,
    then execute it and its composes as LayerZero's executor."""
    endpoint, w3, url = side.endpoint, side.w3, side.fork.anvil_url
    if layerzero.delivered(endpoint, packet):
        return
    if not layerzero.verified(endpoint, packet):
        library, _default = endpoint.functions.getReceiveLibrary(
            packet.receiver, packet.src_eid
        ).call()
        with impersonating(url, library, ETHER):
            payload_hash = keccak(packet.guid + packet.message)
            sent = endpoint.functions.verify(packet.origin, packet.receiver, payload_hash).transact(
                {"from": library}
            )
            _mined(w3, sent, f"verifying packet {packet.guid_hex}")
    with impersonating(url, EXECUTOR):
        layerzero.execute_now(
            w3,
            endpoint,
            packet,
            EXECUTOR,
            lambda tx, what: _mined(w3, tx, f"{what} of {packet.guid_hex}"),
        )


def _mined(w3: Any, tx_hash: Any, what: str) -> Any:
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=MINED_S, poll_latency=0.1)
    if receipt["status"] != 1:
        raise RuntimeError(f"{what} reverted on the fork")
    return receipt
