"""The deliveries of a rehearsal: what the bridges' off-chain parties do
between two forks. LayerZero's part: a Stargate taxi's packet, sent on the
source chain's fork, verified and executed on the destination chain's fork,
as LayerZero's DVNs and executor do on the real chains. CCIP's part (a v1.6
lane's message committed and executed on the destination's fork) is
qtg_rehearsal.ccip_delivery's; its rounds run here beside LayerZero's.

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
is then delivered as a taxi's is. Each round reads every fork's PacketSent,
BusRode and CCIPMessageSent since the last round; a packet or message to a
chain that is not forked is left (there is no destination to deliver on).
``ForkDeliveries(forks, stargate, ccip)`` starts the rounds in a thread;
``lines()`` says what was delivered or could not be, ``busy()`` whether a
CCIP message is still being delivered, ``given_up(hashes)`` why a send's
message, packet or bus will not be (a rehearsal with such a send fails,
``failures()``); ``stop()`` ends them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from qtg_rehearsal import ccip_delivery
from qtg_rehearsal.ccip_delivery import Lane, NoRoots, NotYet, Undecodable
from qtg_rehearsal.forks import Fork, impersonating, rpc
from qtg_runner.chains.ccip import SentMessage
from qtg_world.chains import layerzero
from qtg_world.chains.stargate import bus_at_head, token_messaging_abi

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
ATTESTED_WITHIN_S = 120.0
"""How long a CCIP message's USDC burn may wait for the Iris double's
attestation (a standard burn's takes 9 s on the rehearsal's clock)."""


@dataclass(frozen=True)
class CcipForks:
    """What CCIP's deliveries need: the lanes between forked chains, each
    chain's CCIP selector, and the rehearsal's Iris double (None: none runs)."""

    lanes: Sequence[Lane] = ()
    selectors: Mapping[int, str] = field(default_factory=dict)
    iris_url: str | None = None


@dataclass
class _Message:
    message: SentMessage
    lane: Lane
    since: float
    tries: int = 0


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
    drives: dict[tuple[int, int], int] = field(default_factory=dict)
    """(destination eid, ticket) of a ride of the rehearsal's whose bus is not
    driven yet -> the rounds that tried."""
    riders: dict[tuple[int, int], str] = field(default_factory=dict)
    """(destination eid, ticket) of a ride taken on the fork -> the fork's hash
    of the transaction that took it."""
    drove: dict[str, list[str]] = field(default_factory=dict)
    """The fork's hash of a drive -> those of the rides its bus carried."""

    def sends_behind(self, fork_hash: str | None) -> list[str]:
        """The engine's sends (their hashes as it recorded them) behind the
        fork's transaction ``fork_hash``: the send itself, or the rides of a
        bus the rehearsal drove."""
        if fork_hash is None:
            return []
        recorded = {f.lower(): r for r, f in self.fork.proxy.recorded_hashes().items()}
        if fork_hash.lower() in recorded:
            return [recorded[fork_hash.lower()]]
        rides = self.drove.get(fork_hash.lower(), [])
        return [recorded[r.lower()] for r in rides if r.lower() in recorded]


class ForkDeliveries:
    """The rounds that deliver the forks' Stargate packets (see the module)."""

    def __init__(
        self,
        forks: Mapping[str, Fork],
        stargate: Sequence[Mapping[str, Any]],
        ccip: CcipForks | None = None,
    ) -> None:
        """``stargate``: the registry's Stargate rows (chain_key, remote_id
        the chain's LayerZero eid, contracts.TokenMessaging) of the forked
        chains; each fork's endpoint is read from its TokenMessaging.
        ``ccip``: the lanes whose v1.6 messages are delivered."""
        from web3 import HTTPProvider, Web3

        self._forks = forks
        self._sides: dict[int, _Side] = {}
        self._lines: list[str] = []
        self._done: set[bytes] = set()
        self._tries: dict[bytes, int] = {}
        self._ccip = ccip or CcipForks()
        self._onramps: dict[tuple[str, str], int] = {}
        """(source chain, v1.6 OnRamp) -> the last block read."""
        self._sent: dict[bytes, _Message] = {}
        self._given_up: dict[str, str] = {}
        """A CCIP send's transaction, by the hash the engine recorded -> why its
        message is not delivered."""
        self._failures: list[str] = []
        self._slots: dict[str, int] = {}
        """An OffRamp -> the slot of its s_roots, once found."""
        self._lock = threading.Lock()
        for lane in self._ccip.lanes:
            if lane.version != ccip_delivery.DELIVERED_VERSION:
                continue
            self._onramps[lane.source, lane.onramp] = int(
                str(rpc(forks[lane.source].anvil_url, "eth_blockNumber")), 16
            )
            rpc(forks[lane.dest].anvil_url, "anvil_setBalance", [EXECUTOR, hex(ETHER)])
        if self._onramps:
            self._lines.append(
                "ccip: not rehearsed: whether the DON commits a message and RMN blesses its "
                "root (the rehearsal writes the commit), nor how long that takes"
            )
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
        if self._sides or self._onramps:
            self._thread.start()

    def lines(self) -> list[str]:
        return list(self._lines)

    def busy(self) -> bool:
        """Whether a CCIP message seen is still being delivered."""
        with self._lock:
            return bool(self._sent)

    def given_up(self, recorded: Sequence[str]) -> str | None:
        """Why the message of a send whose recorded transactions are
        ``recorded`` (a CCIP message, a Stargate taxi's packet or its bus)
        will not be delivered on its fork; None when it may be."""
        with self._lock:
            return next(
                (self._given_up[h.lower()] for h in recorded if h.lower() in self._given_up), None
            )

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def __enter__(self) -> ForkDeliveries:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        failing: dict[str, int] = {}  # a part of the rounds -> the rounds in a row it failed
        while not self._stop.wait(ROUND_S):
            parts = [(s.chain_key, lambda s=s: self._round(s)) for s in self._sides.values()]
            for part, round_of in [*parts, ("ccip", self._ccip_round)]:
                try:
                    round_of()
                    failing.pop(part, None)
                except Exception as exc:  # a fork gone, a reverted step: said, tried again
                    log.warning("rehearsal deliveries (%s): %s", part, exc)
                    failing[part] = failing.get(part, 0) + 1
                    if failing[part] == MAX_TRIES:  # said once in the summary
                        self._lines.append(
                            f"deliveries ({part}): {MAX_TRIES} rounds in a row failed, the "
                            f"last with: {str(exc)[:300]}; still tried"
                        )

    def _ccip_round(self) -> None:
        """Read the v1.6 OnRamps' new messages, then try each one waiting (an
        OnRamp that cannot be read now is read again next round)."""
        for (chain, onramp), scanned in list(self._onramps.items()):
            url = self._forks[chain].url  # through the proxy: the hashes the engine recorded
            try:
                head = int(str(rpc(url, "eth_blockNumber")), 16)
                found = (
                    [] if head <= scanned else ccip_delivery.sent(url, onramp, scanned + 1, head)
                )
            except Exception as exc:
                log.warning("rehearsal: CCIP OnRamp %s on %s not read: %s", onramp, chain, exc)
                continue
            for message in found:
                if isinstance(message, Undecodable):
                    self._give_up(message.tx_hash, message.tx_hash, message.why, failed=True)
                else:
                    self._seen(chain, message)
            self._onramps[chain, onramp] = max(head, scanned)
        for key, sent in list(self._sent.items()):
            if self._stop.is_set():
                return
            self._try_ccip(key, sent)

    def _seen(self, chain: str, message: SentMessage) -> None:
        dest = self._ccip.selectors.get(message.dest_selector)
        lane = next((x for x in self._ccip.lanes if (x.source, x.dest) == (chain, dest)), None)
        if lane is None or lane.version != ccip_delivery.DELIVERED_VERSION:
            self._give_up(
                message.message_id_hex,
                message.tx_hash,
                f"it goes to {dest or f'selector {message.dest_selector}'}, which is not forked"
                if lane is None
                else f"its lane is v{lane.version}: a rehearsal commits on v1.6 OffRamps only",
            )
            return
        with self._lock:
            self._sent.setdefault(message.message_id, _Message(message, lane, time.monotonic()))

    def _try_ccip(self, key: bytes, sent: _Message) -> None:
        message, lane = sent.message, sent.lane
        url = self._forks[lane.dest].anvil_url
        named, sent_by = message.message_id_hex, message.tx_hash
        try:
            data = ccip_delivery.token_data(self._ccip.iris_url, lane, message)
            slot = ccip_delivery.commit(url, lane.offramp, message, self._slots.get(lane.offramp))
            if slot is not None:
                self._slots[lane.offramp] = slot
            with impersonating(url, EXECUTOR):
                ccip_delivery.execute(url, lane.offramp, EXECUTOR, message, data)
            state = ccip_delivery.execution_state(url, lane.offramp, message)
        except NotYet as exc:
            if time.monotonic() - sent.since > ATTESTED_WITHIN_S:
                self._give_up(named, sent_by, f"{exc} after {ATTESTED_WITHIN_S:.0f} s", failed=True)
            return
        except NoRoots as exc:  # no try can commit it
            why = f"it cannot be committed on {lane.dest}'s fork: {exc}"
            self._give_up(named, sent_by, why, failed=True)
            return
        except Exception as exc:
            sent.tries += 1
            if sent.tries >= MAX_TRIES:
                self._give_up(
                    named, sent_by, f"it could not be executed on {lane.dest}'s fork: {exc}", True
                )
            return
        ended = ccip_delivery.STATES.get(state, str(state))
        self._lines.append(
            f"ccip: message {named} from {lane.source} committed and executed on "
            f"{lane.dest}'s fork by its OffRamp: {ended} (its commit written: no DON signs for a "
            "fork)"
        )
        if ended != "SUCCESS":
            because = (
                "the OffRamp skipped it (an ordered message waits for its sender's earlier ones)"
                if ended == "UNTOUCHED"
                else "the pool's release or the receiver refused it (on the chains it would "
                "wait for a manual execution)"
            )
            self._give_up(named, sent_by, f"its execution ended {ended}: {because}", failed=True)
            return
        with self._lock:
            del self._sent[key]

    def failures(self) -> list[str]:
        """Why each CCIP message that should have been delivered was not."""
        with self._lock:
            return list(self._failures)

    def _give_up(self, named: str, tx_hash: str, why: str, failed: bool = False) -> None:
        """Say why the message ``named`` (sent by ``tx_hash``, as the engine
        recorded it) is not delivered. ``failed``: it should have been (not
        a lane the rehearsal cannot deliver on): the rehearsal fails."""
        self._lines.append(f"ccip: message {named} not delivered: {why}")
        with self._lock:
            for key in [k for k, m in self._sent.items() if m.message.tx_hash == tx_hash]:
                del self._sent[key]
        self._not_delivered([tx_hash], why, failed)

    def _not_delivered(self, sends: Sequence[str], why: str, failed: bool = True) -> None:
        """The engine's ``sends`` (hashes as it recorded them) will not be
        delivered, for ``why``; ``failed``: they should have been, and the
        rehearsal fails (said once for all of them)."""
        with self._lock:
            for tx_hash in sends:
                self._given_up[tx_hash.lower()] = why
            if failed:
                self._failures.append(why)

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
                why = (
                    f"packet {packet.guid_hex} from {side.chain_key} goes to eid "
                    f"{packet.dst_eid}, which is not forked: not delivered"
                )
                self._lines.append(f"layerzero: {why}")
                self._done.add(packet.guid)
                sends = side.sends_behind(packet.tx_hash)
                self._not_delivered(sends, why, failed=bool(sends))
                continue
            try:
                deliver(destination, packet)
            except Exception as exc:
                tries = self._tries[packet.guid] = self._tries.get(packet.guid, 0) + 1
                if tries < MAX_TRIES:
                    return  # this round ends here: the path's later packets wait behind it
                self._done.add(packet.guid)
                why = (
                    f"packet {packet.guid_hex} from {side.chain_key} could not be delivered on "
                    f"{destination.chain_key}'s fork: {str(exc)[:300]}"
                )
                self._lines.append(f"layerzero: {why}")
                sends = side.sends_behind(packet.tx_hash)
                self._not_delivered(sends, why, failed=bool(sends))
                continue
            self._done.add(packet.guid)
            self._lines.append(
                f"layerzero: packet {packet.guid_hex} from {side.chain_key} verified and executed "
                f"on {destination.chain_key}'s fork (its receive library impersonated)"
            )
        side.scanned = head

    def _drive_buses(self, side: _Side, start: int, head: int) -> None:
        """Drive the buses that carry the rides taken on ``side``'s fork in
        blocks ``start`` to ``head`` to a forked chain (see the module), and
        those a round before could not drive: each is tried up to MAX_TRIES
        rounds (a drive can fail while a fork is busy, or the ticket's bytes
        are not read yet), then said."""
        rides = _rides(side, start, head)
        new = sorted(key for key in rides if key not in side.riders)  # a round read again
        side.rides.update({key: passenger for key, (passenger, _) in rides.items()})
        side.riders.update({key: tx_hash for key, (_, tx_hash) in rides.items()})
        for eid, ticket in new:
            if eid in self._sides:
                side.drives[eid, ticket] = 0
                continue
            why = (
                f"the bus from {side.chain_key} carrying ticket {ticket} goes to eid {eid}, "
                "which is not forked: not driven"
            )
            self._lines.append(f"stargate: {why}")
            sends = side.sends_behind(side.riders[eid, ticket])
            self._not_delivered(sends, why, failed=bool(sends))
        for (eid, ticket), tries in sorted(side.drives.items()):
            if self._stop.is_set():
                return
            try:
                drive_bus(side, eid, ticket)
            except Exception as exc:
                side.drives[eid, ticket] = tries + 1
                if tries + 1 >= MAX_TRIES:
                    del side.drives[eid, ticket]
                    why = (
                        f"the bus from {side.chain_key} to eid {eid} carrying ticket {ticket} "
                        f"could not be driven on the fork: {str(exc)[:300]}"
                    )
                    self._lines.append(f"stargate: {why}")
                    sends = side.sends_behind(side.riders.get((eid, ticket)))
                    self._not_delivered(sends, why, failed=bool(sends))
                continue
            del side.drives[eid, ticket]
            self._lines.append(
                f"stargate: the bus from {side.chain_key} to {self._sides[eid].chain_key} "
                f"carrying ticket {ticket} driven on the fork, as Stargate's planner would"
            )


def _rides(side: _Side, start: int, end: int) -> dict[tuple[int, int], tuple[bytes, str]]:
    """The BusRode of ``side``'s TokenMessaging in blocks ``start`` to ``end``:
    (destination eid, ticket) -> the passenger's bytes and the ride's
    transaction hash."""
    found = side.messaging.events.BusRode().get_logs(from_block=start, to_block=end)
    return {
        (int(e["args"]["dstEid"]), int(e["args"]["ticketId"])): (
            bytes(e["args"]["passenger"]),
            "0x" + bytes(e["transactionHash"]).hex(),
        )
        for e in found
    }


def _passenger(side: _Side, eid: int, ticket: int) -> bytes:
    """The bytes of ticket ``ticket`` to ``eid``: from the rides read, else from
    the chain before the fork, searched back SEARCH_BLOCKS at a time (anvil
    reads blocks before its fork from the forked chain, through the relay).
    A ticket after one taken on the fork was taken on the fork too, in a
    block not read yet: read by a later round, never searched for."""
    on_fork = [t for e, t in side.riders if e == eid]
    if (eid, ticket) not in side.rides and on_fork and ticket > min(on_fork):
        raise RuntimeError(f"ticket {ticket} to eid {eid} rode on the fork after the blocks read")
    while (eid, ticket) not in side.rides:
        oldest = side.fork.block + 1 if side.searched_to is None else side.searched_to
        if oldest <= 0 or side.fork.block + 1 - oldest >= SEARCH_DEPTH:
            raise RuntimeError(
                f"ticket {ticket}, queued before the rehearsal's, was not found in the "
                f"{SEARCH_DEPTH:,} blocks before the fork"
            )
        start = max(0, oldest - SEARCH_BLOCKS)
        side.rides.update(
            {key: passenger for key, (passenger, _) in _rides(side, start, oldest - 1).items()}
        )
        side.searched_to = start
    return side.rides[eid, ticket]


def drive_bus(side: _Side, eid: int, ticket: int) -> None:
    """Drive buses from ``side``'s fork to ``eid``, each with the passengers at
    the head of the queue (as many as a bus takes), until ``ticket`` has ridden;
    the driver (EXECUTOR, impersonated) pays the quoted fee."""
    tm, w3, url = side.messaging, side.w3, side.fork.anvil_url
    while True:
        if ticket < _first(tm, eid):
            return  # driven
        bus = bus_at_head(tm, eid, lambda t: _passenger(side, eid, t))
        if bus is None:
            raise RuntimeError(f"the queue to eid {eid} is empty, ticket {ticket} not in it")
        with impersonating(url, EXECUTOR):
            sent = tm.functions.driveBus(eid, bus.passengers).transact(
                {"from": EXECUTOR, "value": bus.fee}
            )
            side.drove["0x" + bytes(sent).hex()] = [  # before it is mined: it may be, late
                side.riders[eid, t] for t in range(bus.first, bus.first + bus.count)
                if (eid, t) in side.riders
            ]  # fmt: skip
            _mined(w3, sent, f"driving the bus to eid {eid} from ticket {bus.first}")


def _first(token_messaging: Any, eid: int) -> int:
    """The ticket at the head of the queue to ``eid`` (the next to ride)."""
    return int(token_messaging.functions.busQueues(eid).call()[4])


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
