"""The Stargate v2 relayer for the local chains (qtg_world.chains.stargate):
what LayerZero's DVN and executor and Stargate's planner do for the real
contracts deployed there, in one thread of the world's serve process.

Every ``poll_s`` it reads each chain's logs since the last block it read (from
the first block at start: a restart finds what is owed again, and the
endpoint executes a message once, so nothing is delivered twice):

- ``PacketSent`` on LayerZero's EndpointV2 (a taxi or a bus from
  TokenMessaging, credits from CreditMessaging): ``taxi_delay_s`` after it was
  seen (``bus_delay_s`` for a bus), the packet is verified on the destination
  through its SimpleMessageLib (``validatePacket``: the DVN's part; only the
  relayer's account may), then executed (``EndpointV2.lzReceive`` with the
  value its executor options ask for: the executor's part), then each compose
  the receiver queued in that execution (``lzCompose``, where the composer has
  code). A packet whose turn comes brings the earlier packets of its path
  with it. An execution that would revert (the dry run says so) is tried
  again every ``retry_every_s``;
- ``BusRode`` on TokenMessaging: the passenger, kept for the bus. A bus is
  driven when ``PLANNED_PASSENGERS`` wait, or when its first passenger has
  waited ``bus_wait_s`` by the chain's clock, as Stargate's planner does:
  ``quoteDriveBus(dstEid, passengers)`` then ``driveBus`` with that fee and
  the waiting passengers (at most the bus's maximum), their bytes as
  ``BusRode`` gave them. With ``bus_wait_s`` None it drives nothing (the
  tests then drive themselves);
- ``UnreceivedTokenCached`` on the pool (a payout the destination pool could
  not make): when ``retry_cached`` is set, ``retryReceiveToken`` is sent every
  ``retry_every_s`` once a dry run says the pool can pay, as any keeper may
  (the retry is permissionless); it pays once, the pool forgets the entry.

Every duration is in protocol seconds, times ``time_scale`` (real seconds per
protocol second). The relayer sends from anvil's unlocked account that the
message libraries trust and that is the pools' planner
(chains.stargate.RELAYER_ACCOUNT_INDEX): no key of ours. Nothing waits on a
transaction: each step is sent, and the next is taken once a later round
finds it mined. ``serve(chains, config)`` starts it; the handle's ``stop()``
ends it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eth_utils.crypto import keccak

from qtg_world.chains import layerzero
from qtg_world.chains.layerzero import Packet
from qtg_world.chains.local import RunningChain
from qtg_world.chains.stargate import (
    PLANNED_PASSENGERS,
    RELAYER_ACCOUNT_INDEX,
    bus_at_head,
    pool_abi,
    stargate_eid,
    token_messaging_abi,
)

__all__ = [
    "BUS_DRIVEN_TOPIC",
    "BUS_RODE_TOPIC",
    "OFT_RECEIVED_TOPIC",
    "OFT_SENT_TOPIC",
    "UNRECEIVED_TOPIC",
    "RelayerConfig",
    "RelayerHandle",
    "serve",
]

log = logging.getLogger("qtg.world.stargate")


def _topic(signature: str) -> str:
    return "0x" + keccak(text=signature).hex()


OFT_SENT_TOPIC = _topic("OFTSent(bytes32,uint32,address,uint256,uint256)")
OFT_RECEIVED_TOPIC = _topic("OFTReceived(bytes32,uint32,address,uint256)")
BUS_RODE_TOPIC = _topic("BusRode(uint32,uint72,uint80,bytes)")
BUS_DRIVEN_TOPIC = _topic("BusDriven(uint32,uint72,uint8,bytes32)")
UNRECEIVED_TOPIC = _topic("UnreceivedTokenCached(bytes32,uint8,uint32,address,uint256,bytes)")
ZERO_HASH = bytes(32)
MSG_TYPE_BUS = 2


@dataclass(frozen=True)
class RelayerConfig:
    """How the relayer behaves; durations in protocol seconds, times ``time_scale``."""

    taxi_delay_s: float = 45.0
    """From a packet sent (a taxi, credits) to its verification and execution
    (source finality and the DVN's verification)."""
    bus_delay_s: float = 45.0
    """From a bus's packet (BusDriven) to its verification and execution."""
    bus_wait_s: float | None = 480.0
    """How long the first passenger waits before the planner drives the bus."""
    retry_cached: bool = True
    retry_every_s: float = 60.0
    """Between two tries of a cached payout, and of an execution that would revert."""
    time_scale: float = 1.0
    poll_s: float = 0.2
    """Real seconds between two reads of the chains."""


@dataclass
class _Delivery:
    due: float
    packet: Packet
    dst: RunningChain
    kind: str  # taxi, bus, credits, message
    verify_tx: Any = None
    receive_tx: Any = None


@dataclass
class _Cached:
    dst: RunningChain
    args: tuple[Any, ...]
    next_try: float
    sent: Any = None
    """The retry sent and not yet mined (no second one meanwhile)."""


@dataclass
class _Side:
    """One chain's contracts as the relayer reaches them."""

    chain: RunningChain
    w3: Any
    endpoint: Any
    lib: Any
    pool: Any
    tm: Any
    relayer: str
    next_block: int = 0
    rides: dict[tuple[int, int], tuple[bytes, int]] = field(default_factory=dict)
    """(destination eid, ticket id) -> (the passenger's bytes, when it rode)."""
    driving: dict[int, tuple[int, Any]] = field(default_factory=dict)
    """destination eid -> (the first ticket of the bus driven, its transaction)."""
    block_times: dict[int, int] = field(default_factory=dict)


@dataclass
class _State:
    config: RelayerConfig
    sides: dict[str, _Side]
    by_eid: dict[int, _Side]
    deliveries: list[_Delivery] = field(default_factory=list)
    cached: dict[tuple[str, bytes, int], _Cached] = field(default_factory=dict)
    delivered: int = 0
    driven: int = 0
    retried: int = 0

    def scaled(self, seconds: float) -> float:
        return seconds * self.config.time_scale


def _state(chains: Sequence[RunningChain], config: RelayerConfig) -> _State:
    from web3 import HTTPProvider, Web3

    sides: dict[str, _Side] = {}
    for c in chains:
        w3 = Web3(HTTPProvider(c.rpc_url, request_kwargs={"timeout": 10}))
        sides[c.key] = _Side(
            chain=c,
            w3=w3,
            endpoint=layerzero.endpoint_contract(w3, c),
            lib=layerzero.lib_contract(w3, c),
            pool=w3.eth.contract(
                address=Web3.to_checksum_address(c.contracts["StargatePool"]), abi=pool_abi()
            ),
            tm=w3.eth.contract(
                address=Web3.to_checksum_address(c.contracts["TokenMessaging"]),
                abi=token_messaging_abi(),
            ),
            relayer=str(w3.eth.accounts[RELAYER_ACCOUNT_INDEX]),
        )
    return _State(
        config=config,
        sides=sides,
        by_eid={stargate_eid(s.chain): s for s in sides.values()},
    )


def _block_time(side: _Side, number: int) -> int:
    if number not in side.block_times:
        side.block_times[number] = int(side.w3.eth.get_block(number)["timestamp"])
    return side.block_times[number]


def _scan(state: _State, side: _Side, now: float) -> None:
    """The chain's new logs: packets owed, passengers waiting, cached payouts.
    All read before any is kept, so a round that fails reads them again whole."""
    w3 = side.w3
    head = int(w3.eth.block_number)
    start = side.next_block
    if head < start:
        return
    packets = layerzero.packets_sent(w3, side.endpoint.address, start, head)
    rode = side.tm.events.BusRode().get_logs(from_block=start, to_block=head)
    cached = side.pool.events.UnreceivedTokenCached().get_logs(from_block=start, to_block=head)
    rides = {
        (int(e["args"]["dstEid"]), int(e["args"]["ticketId"])): (
            bytes(e["args"]["passenger"]),
            _block_time(side, int(e["blockNumber"])),
        )
        for e in rode
    }
    side.block_times.clear()

    tm_word = layerzero.address_word(side.tm.address)
    cm_word = layerzero.address_word(side.chain.contracts["CreditMessaging"])
    for packet in packets:
        dst = state.by_eid.get(packet.dst_eid)
        if dst is None:
            continue
        if packet.sender == tm_word:
            kind = "bus" if packet.message[:1] == bytes([MSG_TYPE_BUS]) else "taxi"
        else:
            kind = "credits" if packet.sender == cm_word else "message"
        delay = state.config.bus_delay_s if kind == "bus" else state.config.taxi_delay_s
        state.deliveries.append(_Delivery(now + state.scaled(delay), packet, dst.chain, kind))
    side.rides.update(rides)
    for entry in cached:
        args = entry["args"]
        key = (side.chain.key, bytes(args["guid"]), int(args["index"]))
        state.cached[key] = _Cached(
            side.chain,
            (
                bytes(args["guid"]),
                int(args["index"]),
                int(args["srcEid"]),
                args["receiver"],
                int(args["amountLD"]),
                bytes(args["composeMsg"]),
            ),
            now + state.scaled(state.config.retry_every_s),
        )
    side.next_block = head + 1


def _mined(side: _Side, tx_hash: Any) -> Any:
    """The receipt of ``tx_hash``, or None while it is not mined."""
    from web3.exceptions import TransactionNotFound

    try:
        return side.w3.eth.get_transaction_receipt(tx_hash)
    except TransactionNotFound:
        return None


def _later(state: _State, d: _Delivery, now: float, why: str) -> None:
    d.due = now + state.scaled(state.config.retry_every_s)
    log.warning(
        "stargate relayer: %s packet %s to %s: %s; tried again later",
        d.kind,
        d.packet.guid_hex,
        d.dst.key,
        why,
    )


def _advance(state: _State, d: _Delivery, now: float) -> bool:
    """One step of ``d``'s delivery; True when it is done (or was done before)."""
    side = state.sides[d.dst.key]
    if d.receive_tx is not None:
        receipt = _mined(side, d.receive_tx)
        if receipt is None:
            return False
        d.receive_tx = None
        if receipt["status"] != 1:
            _later(state, d, now, "lzReceive reverted")
            return False
        state.delivered += 1
        log.info(
            "stargate: %s %s executed on %s (nonce %d)",
            d.kind,
            d.packet.guid_hex,
            d.dst.key,
            d.packet.nonce,
        )
        _compose(side, d.packet, receipt)
        return True
    if d.verify_tx is not None:
        receipt = _mined(side, d.verify_tx)
        if receipt is None:
            return False
        d.verify_tx = None
        if receipt["status"] != 1:
            _later(state, d, now, "verification reverted")
            return False
    elif layerzero.delivered(side.endpoint, d.packet):
        return True
    elif not layerzero.verified(side.endpoint, d.packet):
        d.verify_tx = layerzero.verify_call(side.lib, d.packet).transact({"from": side.relayer})
        return False
    try:
        d.receive_tx = layerzero.send_estimated(
            layerzero.receive_call(side.endpoint, d.packet),
            side.relayer,
            d.packet.executor.lz_receive_value,
        )
    except Exception as exc:  # the dry run reverts: not now
        _later(state, d, now, f"lzReceive would revert ({str(exc)[:200]})")
    return False


def _compose(side: _Side, packet: Packet, receipt: Any) -> None:
    """lzCompose for each compose the execution queued, as LayerZero's executor."""
    for compose in layerzero.compose_messages(receipt, side.endpoint.address):
        if not side.w3.eth.get_code(compose.to):
            log.info("stargate: compose %s for %s, which has no code", packet.guid_hex, compose.to)
            continue
        _gas, value = packet.executor.compose.get(compose.index, (0, 0))
        try:
            layerzero.send_estimated(
                layerzero.compose_call(side.endpoint, compose), side.relayer, value
            )
        except Exception as exc:
            log.warning("stargate: lzCompose of %s would revert: %s", packet.guid_hex, exc)


def _deliver(state: _State, now: float) -> None:
    """The deliveries due, path by path in nonce order: a due packet brings the
    earlier ones of its path (the endpoint executes a nonce only once every
    earlier one is verified)."""
    paths: dict[tuple[int, bytes, int, str], list[_Delivery]] = {}
    for d in state.deliveries:
        paths.setdefault(d.packet.path, []).append(d)
    for queue in paths.values():
        queue.sort(key=lambda d: d.packet.nonce)
        last_due = max((i for i, d in enumerate(queue) if d.due <= now), default=-1)
        for d in queue[: last_due + 1]:
            if _advance(state, d, now):
                state.deliveries.remove(d)


def _ride_bytes(side: _Side, eid: int, ticket: int) -> bytes | None:
    """The bytes of ``ticket`` to ``eid`` as its BusRode gave them (None: not read yet)."""
    ride = side.rides.get((eid, ticket))
    return None if ride is None else ride[0]


def _drive_buses(state: _State, side: _Side) -> None:
    wait = state.config.bus_wait_s
    if wait is None:
        return
    chain_now = int(side.w3.eth.get_block("latest")["timestamp"])
    for eid, other in state.by_eid.items():
        if other is side:
            continue
        bus = bus_at_head(side.tm, eid, functools.partial(_ride_bytes, side, eid))
        if bus is None:
            continue  # none waiting, or a BusRode not read yet
        first, count = bus.first, bus.count
        driving = side.driving.get(eid)
        if driving is not None and driving[0] == first:
            receipt = _mined(side, driving[1])
            if receipt is None or receipt["status"] == 1:
                continue  # driven, not yet seen as such
            del side.driving[eid]
        boarded = side.rides[eid, first][1]
        if bus.waiting < PLANNED_PASSENGERS and chain_now - boarded < state.scaled(wait):
            continue
        try:
            tx_hash = layerzero.send_estimated(
                side.tm.functions.driveBus(eid, bus.passengers), side.relayer, bus.fee
            )
        except Exception as exc:  # driven by someone else meanwhile: read again
            log.info(
                "stargate: bus %s -> %s not driven now: %s", side.chain.key, other.chain.key, exc
            )
            continue
        side.driving[eid] = (first, tx_hash)
        state.driven += 1
        log.info(
            "stargate: bus %s -> %s driven with tickets %d..%d",
            side.chain.key,
            other.chain.key,
            first,
            first + count - 1,
        )


def _retry_cached(state: _State, now: float) -> None:
    if not state.config.retry_cached:
        return
    for key, entry in list(state.cached.items()):
        if now < entry.next_try:
            continue
        side = state.sides[entry.dst.key]
        guid, index = entry.args[0], entry.args[1]
        entry.next_try = now + state.scaled(state.config.retry_every_s)
        if entry.sent is not None:
            if _mined(side, entry.sent) is None:
                continue  # not mined yet: never a second retry meanwhile
            entry.sent = None
        if bytes(side.pool.functions.unreceivedTokens(guid, index).call()) == ZERO_HASH:
            del state.cached[key]
            continue
        call = side.pool.functions.retryReceiveToken(*entry.args)
        try:
            entry.sent = layerzero.send_estimated(call, side.relayer)
        except Exception:  # the pool still cannot pay: try later
            continue
        state.retried += 1
        log.info("stargate: cached payout %s/%d retried on %s", "0x" + guid.hex(), index, key[0])


def _tick(state: _State) -> None:
    now = time.monotonic()
    for side in state.sides.values():
        _scan(state, side, now)
    _deliver(state, now)
    for side in state.sides.values():
        _drive_buses(state, side)
    _retry_cached(state, now)


class RelayerHandle:
    """The running relayer: ``stop()``, and what it did so far."""

    def __init__(self, state: _State, thread: threading.Thread, stop: threading.Event) -> None:
        self._state = state
        self._thread = thread
        self._stop = stop

    @property
    def counts(self) -> dict[str, int]:
        s = self._state
        return {"delivered": s.delivered, "driven": s.driven, "retried": s.retried}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def serve(chains: Sequence[RunningChain], config: RelayerConfig) -> RelayerHandle:
    """The relayer over the Stargate contracts of ``chains`` in a daemon thread."""
    state = _state([c for c in chains if "TokenMessaging" in c.contracts], config)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                _tick(state)
            except Exception:  # a chain's hiccup: read again next time
                log.exception("stargate relayer: a round failed, trying again")
            stop.wait(config.poll_s)

    thread = threading.Thread(target=run, name="stargate-relayer", daemon=True)
    thread.start()
    return RelayerHandle(state, thread, stop)
