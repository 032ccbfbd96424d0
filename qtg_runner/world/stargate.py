"""The Stargate v2 relayer for the local pools (qtg_runner.chains.stargate): what
LayerZero's DVNs and executor and Stargate's planner do for a real pool, in one
thread of the world's serve process.

Every ``poll_s`` it reads each chain's StargatePool logs since the last block it
read (from the first block at start: a restart finds what is owed again, and
the pool's ``delivered`` makes a second delivery impossible):

- ``OFTSent`` with a guid (a taxi): the message (``taxiMessage``) is delivered
  on the destination pool (``deliverTaxi``) ``taxi_delay_s`` after it was seen;
- ``BusDriven``: the bus's tickets are delivered together (``deliverBus``) under
  its guid ``bus_delay_s`` after it was seen;
- a bus whose first passenger has waited ``bus_wait_s`` by the chain's clock is
  driven (``driveBus`` with the drive fee), unless ``bus_wait_s`` is None (the
  tests then drive it themselves);
- ``UnreceivedTokenCached`` (a payout the destination pool could not make):
  when ``retry_cached`` is set, ``retryReceiveToken`` is sent every
  ``retry_every_s`` once a dry run says the pool can pay, as any keeper may
  (the retry is permissionless); it pays once, the pool forgets the entry.

Every duration is in protocol seconds, times ``time_scale`` (real seconds per
protocol second). The relayer sends from anvil's unlocked account that the
pools trust (chains.stargate.RELAYER_ACCOUNT_INDEX): no key of ours.
``serve(chains, config)`` starts it; the handle's ``stop()`` ends it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eth_utils.crypto import keccak

from qtg_runner.chains.local import RunningChain, load_artifact
from qtg_runner.chains.stargate import RELAYER_ACCOUNT_INDEX, stargate_eid

__all__ = [
    "BUS_DRIVEN_TOPIC",
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
ZERO_GUID = bytes(32)


@dataclass(frozen=True)
class RelayerConfig:
    """How the relayer behaves; durations in protocol seconds, times ``time_scale``."""

    taxi_delay_s: float = 45.0
    """From a taxi's OFTSent to its delivery (source finality and verification)."""
    bus_delay_s: float = 45.0
    """From BusDriven to the bus's delivery."""
    bus_wait_s: float | None = 480.0
    """How long the first passenger waits before the relayer drives the bus."""
    retry_cached: bool = True
    retry_every_s: float = 60.0
    time_scale: float = 1.0
    poll_s: float = 0.2
    """Real seconds between two reads of the chains."""


@dataclass
class _Delivery:
    due: float
    src: RunningChain
    dst: RunningChain
    guid: bytes
    bus: tuple[int, int] | None  # (startTicketId, numPassengers) for a bus


@dataclass
class _Cached:
    dst: RunningChain
    args: tuple[Any, ...]
    next_try: float
    sent: Any = None
    """The retry sent and not yet mined (no second one meanwhile)."""


@dataclass
class _State:
    config: RelayerConfig
    chains: list[RunningChain]
    by_eid: dict[int, RunningChain]
    w3: dict[str, Any]
    pools: dict[str, Any]
    relayer: dict[str, str]
    next_block: dict[str, int]
    deliveries: list[_Delivery] = field(default_factory=list)
    cached: dict[tuple[str, bytes, int], _Cached] = field(default_factory=dict)
    driving: dict[tuple[str, int], int] = field(default_factory=dict)
    delivered: int = 0
    driven: int = 0
    retried: int = 0

    def scaled(self, seconds: float) -> float:
        return seconds * self.config.time_scale


def _state(chains: Sequence[RunningChain], config: RelayerConfig) -> _State:
    from web3 import HTTPProvider, Web3

    abi = load_artifact("StargatePool")["abi"]
    w3s = {c.key: Web3(HTTPProvider(c.rpc_url, request_kwargs={"timeout": 10})) for c in chains}
    return _State(
        config=config,
        chains=list(chains),
        by_eid={stargate_eid(c): c for c in chains},
        w3=w3s,
        pools={
            c.key: w3s[c.key].eth.contract(
                address=Web3.to_checksum_address(c.contracts["StargatePool"]), abi=abi
            )
            for c in chains
        },
        relayer={c.key: str(w3s[c.key].eth.accounts[RELAYER_ACCOUNT_INDEX]) for c in chains},
        next_block={c.key: 0 for c in chains},
    )


def _scan(state: _State, chain: RunningChain, now: float) -> None:
    """The pool's new logs on ``chain``: deliveries owed, cached payouts."""
    w3, pool = state.w3[chain.key], state.pools[chain.key]
    head = int(w3.eth.block_number)
    start = state.next_block[chain.key]
    if head < start:
        return
    logs = w3.eth.get_logs(
        {
            "address": pool.address,
            "fromBlock": start,
            "toBlock": head,
            "topics": [[OFT_SENT_TOPIC, BUS_DRIVEN_TOPIC, UNRECEIVED_TOPIC]],
        }
    )
    for entry in logs:
        topic = "0x" + bytes(entry["topics"][0]).hex()
        if topic == OFT_SENT_TOPIC:
            args = pool.events.OFTSent().process_log(entry)["args"]
            guid = bytes(args["guid"])
            dst = state.by_eid.get(int(args["dstEid"]))
            if guid != ZERO_GUID and dst is not None:
                due = now + state.scaled(state.config.taxi_delay_s)
                state.deliveries.append(_Delivery(due, chain, dst, guid, None))
        elif topic == BUS_DRIVEN_TOPIC:
            args = pool.events.BusDriven().process_log(entry)["args"]
            dst = state.by_eid.get(int(args["dstEid"]))
            if dst is not None:
                due = now + state.scaled(state.config.bus_delay_s)
                bus = (int(args["startTicketId"]), int(args["numPassengers"]))
                state.deliveries.append(_Delivery(due, chain, dst, bytes(args["guid"]), bus))
        elif topic == UNRECEIVED_TOPIC:
            args = pool.events.UnreceivedTokenCached().process_log(entry)["args"]
            key = (chain.key, bytes(args["guid"]), int(args["index"]))
            state.cached[key] = _Cached(
                chain,
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
    state.next_block[chain.key] = head + 1


def _deliver(state: _State, d: _Delivery) -> None:
    src_pool, dst_pool = state.pools[d.src.key], state.pools[d.dst.key]
    src_eid = stargate_eid(d.src)
    if dst_pool.functions.delivered(src_eid, d.guid).call():
        return
    sender = {"from": state.relayer[d.dst.key]}
    if d.bus is None:
        _, _, receiver, amount = src_pool.functions.taxiMessage(d.guid).call()
        dst_pool.functions.deliverTaxi(d.guid, src_eid, receiver, amount).transact(sender)
        log.info("stargate: taxi %s delivered on %s", "0x" + d.guid.hex(), d.dst.key)
    else:
        start, count = d.bus
        dst_eid = stargate_eid(d.dst)
        tickets = [
            src_pool.functions.tickets(dst_eid, t).call() for t in range(start, start + count)
        ]
        dst_pool.functions.deliverBus(
            d.guid, src_eid, [t[0] for t in tickets], [int(t[1]) for t in tickets]
        ).transact(sender)
        log.info(
            "stargate: bus %s (%d passengers) delivered on %s",
            "0x" + d.guid.hex(),
            count,
            d.dst.key,
        )
    state.delivered += 1


def _drive_buses(state: _State, chain: RunningChain) -> None:
    wait = state.config.bus_wait_s
    if wait is None:
        return
    w3, pool = state.w3[chain.key], state.pools[chain.key]
    chain_now = int(w3.eth.get_block("latest")["timestamp"])
    for other in state.chains:
        if other is chain:
            continue
        eid = stargate_eid(other)
        next_ticket, first_waiting, since = pool.functions.buses(eid).call()
        if next_ticket <= first_waiting or since == 0:
            continue
        if chain_now - int(since) < state.scaled(wait):
            continue
        if state.driving.get((chain.key, eid)) == first_waiting:
            continue  # driven already, not yet mined
        fee = int(pool.functions.quoteDriveBus(eid).call()[0])
        pool.functions.driveBus(eid).transact({"from": state.relayer[chain.key], "value": fee})
        state.driving[(chain.key, eid)] = first_waiting
        state.driven += 1
        log.info(
            "stargate: bus %s -> %s driven from ticket %d", chain.key, other.key, first_waiting
        )


def _retry_cached(state: _State, now: float) -> None:
    if not state.config.retry_cached:
        return
    for key, entry in list(state.cached.items()):
        if now < entry.next_try:
            continue
        pool = state.pools[entry.dst.key]
        guid, index = entry.args[0], entry.args[1]
        entry.next_try = now + state.scaled(state.config.retry_every_s)
        if entry.sent is not None:
            from web3.exceptions import TransactionNotFound

            try:
                state.w3[entry.dst.key].eth.get_transaction_receipt(entry.sent)
            except TransactionNotFound:
                continue  # not mined yet: never a second retry meanwhile
            entry.sent = None
        if pool.functions.unreceivedTokens(guid, index).call() == ZERO_GUID:
            del state.cached[key]
            continue
        call = pool.functions.retryReceiveToken(*entry.args)
        sender = {"from": state.relayer[entry.dst.key]}
        try:
            call.call(sender)
        except Exception:  # the pool still cannot pay: try later
            continue
        entry.sent = call.transact(sender)
        state.retried += 1
        log.info("stargate: cached payout %s/%d retried on %s", "0x" + guid.hex(), index, key[0])


def _tick(state: _State) -> None:
    now = time.monotonic()
    for chain in state.chains:
        _scan(state, chain, now)
    due = [d for d in state.deliveries if d.due <= now]
    for d in due:
        _deliver(state, d)
        state.deliveries.remove(d)
    for chain in state.chains:
        _drive_buses(state, chain)
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
    """The relayer over the pools of ``chains`` in a daemon thread."""
    state = _state([c for c in chains if "StargatePool" in c.contracts], config)
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
