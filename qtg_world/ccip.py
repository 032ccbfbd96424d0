"""The local CCIP executing network (the "DON") for the CCIP v1.6 double: a
thread in the world's serve process that watches every chain's CcipOnRamp for
``CCIPMessageSent`` and, once the send is final on its source chain and the
commit-and-execute delay has passed, does what the committing and executing
DONs do on the destination chain's CcipOffRamp with the transmitter key
(qtg_runner.chains.ccip): ``commit`` of the message's leaf as a one-leaf
merkle root (roots of a source are committed in sequence order), then, once
the attestation service (``attestation_url``, the fake Iris) has attested
the USDC burn, ``execute`` of a one-message report carrying the attestation
as the USDC pool's offchain data; the OffRamp emits ``ExecutionStateChanged``
SUCCESS, or FAILURE when one is injected.

Timing (every duration times ``time_scale``, real seconds per protocol
second): the send's block ``finality_depth`` blocks deep, then
``execution_delay_s`` after the send's block timestamp (CCIP from Ethereum and
its L2s: 15-25 minutes all told; the default 17 minutes after finality).

Failure injection, for the stranded path: ``fail_next(n)`` makes the next n
executions FAIL, ``fail_receiver(address)`` every execution to that receiver,
``clear_failures()`` neither. A failure is a real one on chain: the DON
executes without the USDC pool's offchain data (the attestation), the
release reverts, the OffRamp records FAILURE, and the message waits for a
manual execution that carries it (the executing network never retries a
failed message itself). The same over HTTP:
``POST /control/failures`` with ``{"next": n}``, ``{"receiver": "0x..."}`` or
``{"clear": true}``; ``GET /control/failures``.

Nothing is kept on disk: after a restart it scans every chain from block 0
and asks the OffRamp (``getExecutionState``, ``getMerkleRoot``) before
committing or executing, so a message is never committed or executed twice
by the network (and the OffRamp refuses it anyway). ``GET
/v2/messages/{messageId}`` answers like the CCIP API: status SENT,
SOURCE_FINALIZED, COMMITTED, SUCCESS or FAILED, with the source and
destination transactions; 404 for an id it has not seen.

``serve(chains, don, config)`` starts the HTTP server and the watcher (daemon
threads) and returns the handle: ``.url``, ``.stop()``, ``.fail_next()``,
``.fail_receiver()``, ``.clear_failures()``, ``.message()``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from qtg_runner.chains.ccip import (
    CCIP_MESSAGE_SENT_TOPIC,
    EXECUTION_STATE_CHANGED_TOPIC,
    UNTOUCHED,
    ExecutionStateChanged,
    SentMessage,
    attested_token_data,
    ccip_transaction,
    commit_calldata,
    decode_next_sequence,
    execute_calldata,
    execution_state_calldata,
    merkle_root_calldata,
    next_sequence_calldata,
)
from qtg_runner.chains.cctp_client import IrisClient
from qtg_runner.chains.evm import sign, suggest_fees
from qtg_runner.chains.evm_rpc import EvmRpc, RpcError, RpcErrorKind
from qtg_runner.log import event
from qtg_runner.ports import LOOPBACK
from qtg_runner.signers import Signer
from qtg_world.chains.ccip import ccip_selector
from qtg_world.chains.local import RunningChain
from qtg_world.json_http import JsonHandler

__all__ = ["CcipConfig", "CcipHandle", "serve"]

MAX_FEE_CAP = 1_000 * 10**9
PRIORITY_FEE_CAP = 5 * 10**9
COMMIT_GAS = 300_000
EXECUTE_GAS = 800_000
"""The transmitter's gas for one execute: the release's 180k (a CCTP receive
and mint) and the OffRamp's own (hashing, the proof, the states)."""

_MESSAGE_PATH = re.compile(r"^/v2/messages/(0x[0-9a-fA-F]{64})$")


@dataclass(frozen=True)
class CcipConfig:
    """How the executing network behaves; durations in protocol seconds, times ``time_scale``."""

    execution_delay_s: float = 17 * 60.0
    """From the send's block to the execution, once the send is final."""
    finality_depth: int = 2
    """Blocks on top of the send's before the network takes it as final."""
    time_scale: float = 1.0
    tick_s: float = 0.25
    """How often the watcher reads the chains (real seconds)."""
    attestation_url: str = ""
    """The CCTP attestation service (the fake Iris) the USDC transfers' attestations come from."""

    def delay(self) -> float:
        return self.execution_delay_s * self.time_scale


@dataclass
class _Tracked:
    message: SentMessage
    block_timestamp: int
    status: str = "SENT"
    commit_tx: str | None = None
    exec_tx: str | None = None
    exec_raw: bytes = b""
    injected: bool = False
    dest_tx: str | None = None


@dataclass
class _Network:
    chains: dict[int, RunningChain]
    don: Signer | None
    config: CcipConfig
    lock: threading.Lock = field(default_factory=threading.Lock)
    messages: dict[str, _Tracked] = field(default_factory=dict)
    scan_from: dict[int, int] = field(default_factory=dict)
    fail_next: int = 0
    fail_receivers: set[str] = field(default_factory=set)
    errors: dict[str, str] = field(default_factory=dict)
    executed: int = 0

    def failures(self) -> dict[str, Any]:
        return {"next": self.fail_next, "receivers": sorted(self.fail_receivers)}

    def take_failure(self, receiver: str) -> bool:
        with self.lock:
            if self.fail_next > 0:
                self.fail_next -= 1
                return True
            return receiver.lower() in self.fail_receivers


class _Watcher:
    def __init__(self, net: _Network) -> None:
        self.net = net
        self.rpcs: dict[int, EvmRpc] = {}
        self.iris: IrisClient | None = None

    def rpc(self, selector: int) -> EvmRpc:
        if selector not in self.rpcs:
            self.rpcs[selector] = EvmRpc(self.net.chains[selector].rpc_url, timeout=5.0)
        return self.rpcs[selector]

    async def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                await self.tick()
                wake = time.monotonic() + self.net.config.tick_s
                while not stop.is_set() and time.monotonic() < wake:
                    await asyncio.sleep(0.05)
        finally:
            for rpc in self.rpcs.values():
                await rpc.aclose()
            if self.iris is not None:
                await self.iris.aclose()

    def note(self, where: str, exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}"[:300]
        with self.net.lock:
            changed = self.net.errors.get(where) != text
            self.net.errors[where] = text
        if changed:
            event(logging.WARNING, "ccip_network_error", where=where, error=text)

    async def tick(self) -> None:
        for selector in self.net.chains:
            try:
                await self.scan(selector)
            except Exception as exc:
                self.note(f"scan {selector}", exc)
        with self.net.lock:
            active = sorted(
                (t for t in self.net.messages.values() if t.status not in ("SUCCESS",)),
                key=lambda t: (t.message.source_selector, t.message.sequence_number),
            )
        for tracked in active:
            try:
                await self.advance(tracked)
            except Exception as exc:
                self.note(f"message {tracked.message.message_id_hex}", exc)

    async def scan(self, selector: int) -> None:
        chain = self.net.chains[selector]
        rpc = self.rpc(selector)
        head = await rpc.block_number()
        start = self.net.scan_from.get(selector, 0)
        if head < start:
            return
        logs = await rpc.get_logs(
            address=chain.contracts["CcipOnRamp"],
            topics=[CCIP_MESSAGE_SENT_TOPIC],
            from_block=start,
            to_block=head,
        )
        for log in logs:
            if log.removed or log.block_number is None:
                continue
            message = SentMessage.from_log(
                log.address, log.topics, log.data, log.tx_hash, log.block_number, log.log_index
            )
            if message.message_id_hex in self.net.messages:
                continue
            if message.dest_selector not in self.net.chains:
                self.note(f"message {message.message_id_hex}", ValueError("unknown destination"))
                continue
            block = await rpc.block(log.block_number)
            tracked = _Tracked(message, block.timestamp if block is not None else int(time.time()))
            with self.net.lock:
                self.net.messages[message.message_id_hex] = tracked
            event(
                logging.INFO,
                "ccip_message_seen",
                message_id=message.message_id_hex,
                source=selector,
                dest=message.dest_selector,
                seq=message.sequence_number,
                tx=message.tx_hash,
            )
        self.net.scan_from[selector] = head + 1

    async def advance(self, tracked: _Tracked) -> None:
        message = tracked.message
        source = self.rpc(message.source_selector)
        dest_chain = self.net.chains[message.dest_selector]
        dest = self.rpc(message.dest_selector)
        offramp = dest_chain.contracts["CcipOffRamp"]
        if tracked.status in ("SENT", "SOURCE_FINALIZED", "COMMITTED"):
            head = await source.block_number()
            assert message.block_number is not None
            receipt = await source.receipt(message.tx_hash)
            if receipt is None or receipt.block_number != message.block_number:
                # reorganised away: forget it, the scan finds it again where it lands
                with self.net.lock:
                    self.net.messages.pop(message.message_id_hex, None)
                    self.net.scan_from[message.source_selector] = min(
                        self.net.scan_from.get(message.source_selector, 0), message.block_number
                    )
                return
            if head - message.block_number < self.net.config.finality_depth:
                return
            due = tracked.block_timestamp + self.net.config.delay()
            now = time.time()
            if now < due:
                half = tracked.block_timestamp + self.net.config.delay() / 2
                tracked.status = "COMMITTED" if now >= half else "SOURCE_FINALIZED"
                return
            state = await self.state(dest, offramp, message)
            if state != UNTOUCHED:
                # executed already (by an earlier instance, or manually)
                tracked.status = "SUCCESS" if state == 2 else "FAILED"
                return
            if not await self.committed(tracked, dest_chain, dest, offramp):
                return
            tracked.status = "COMMITTED"
            token_data = await self.token_data(message)
            if token_data is None:
                return  # the attestation is not there yet
            await self.execute(tracked, dest_chain, dest, offramp, token_data)
            return
        if tracked.status == "EXECUTING":
            assert tracked.exec_tx is not None
            receipt = await dest.receipt(tracked.exec_tx)
            if receipt is None:
                if await dest.transaction(tracked.exec_tx) is None:
                    try:
                        await dest.send_raw_transaction(tracked.exec_raw)
                    except RpcError as exc:
                        if exc.kind is not RpcErrorKind.NONCE_TOO_LOW:
                            raise
                        state = await self.state(dest, offramp, message)
                        if state in (2, 3):
                            tracked.status = "SUCCESS" if state == 2 else "FAILED"
                return
            for log in receipt.logs:
                if log.topics and log.topics[0] == EXECUTION_STATE_CHANGED_TOPIC:
                    changed = ExecutionStateChanged.from_log(
                        log.topics, log.data, log.tx_hash, log.block_number, log.log_index
                    )
                    if changed.message_id == message.message_id_hex:
                        tracked.status = "SUCCESS" if changed.state == 2 else "FAILED"
                        tracked.dest_tx = changed.tx_hash
            if tracked.status == "EXECUTING":
                # reverted (executed meanwhile by someone else?): ask the OffRamp
                state = await self.state(dest, offramp, message)
                tracked.status = {2: "SUCCESS", 3: "FAILED"}.get(state, "SENT")
            event(
                logging.INFO,
                "ccip_message_executed",
                message_id=message.message_id_hex,
                status=tracked.status,
                tx=tracked.exec_tx,
                injected=tracked.injected,
            )
            return
        if tracked.status == "FAILED":
            # a manual execution may have rescued it since
            state = await self.state(dest, offramp, message)
            if state == 2:
                tracked.status = "SUCCESS"

    async def state(self, rpc: EvmRpc, offramp: str, message: SentMessage) -> int:
        answer = await rpc.call(offramp, execution_state_calldata(message))
        return int.from_bytes(answer[-32:], "big") if answer else 0

    async def committed(
        self, tracked: _Tracked, chain: RunningChain, rpc: EvmRpc, offramp: str
    ) -> bool:
        """Whether the message's root is committed; when not, its commit is
        sent once the OffRamp expects its sequence number (False meanwhile)."""
        message = tracked.message
        answer = await rpc.call(
            offramp, merkle_root_calldata(message.source_selector, message.leaf())
        )
        if answer and int.from_bytes(answer[-32:], "big") != 0:
            return True
        if tracked.commit_tx is not None:
            receipt = await rpc.receipt(tracked.commit_tx)
            if receipt is None and await rpc.transaction(tracked.commit_tx) is not None:
                return False  # in the pool
            tracked.commit_tx = None  # reverted or dropped: committed again below
        expected = decode_next_sequence(
            await rpc.call(offramp, next_sequence_calldata(message.source_selector))
        )
        if expected != message.sequence_number:
            if expected > message.sequence_number:
                raise RuntimeError(
                    f"the OffRamp expects sequence number {expected} of source "
                    f"{message.source_selector}, past this uncommitted message's "
                    f"{message.sequence_number}"
                )
            return False  # an earlier message of the source is committed first
        tracked.commit_tx = await self.transmit(
            chain, rpc, offramp, commit_calldata(message), COMMIT_GAS
        )
        return False

    async def token_data(self, message: SentMessage) -> list[bytes] | None:
        """Each token's USDC pool data, or None while the attestation service
        has not attested (attested_token_data)."""
        if self.iris is None and any(p is not None for p in message.usdc_payloads()):
            if not self.net.config.attestation_url:
                raise RuntimeError(
                    "no attestation service: a USDC transfer cannot execute without it"
                )
            self.iris = IrisClient(self.net.config.attestation_url, timeout=5.0)
        if self.iris is None:
            return [b""] * len(message.tokens)
        return await attested_token_data(self.iris, message)

    async def transmit(
        self, chain: RunningChain, rpc: EvmRpc, offramp: str, data: bytes, gas: int
    ) -> str:
        """Sign and send ``data`` to the OffRamp as the transmitter: its hash."""
        raw, tx_hash = await self.signed(chain, rpc, offramp, data, gas)
        await rpc.send_raw_transaction(raw)
        return tx_hash

    async def signed(
        self, chain: RunningChain, rpc: EvmRpc, offramp: str, data: bytes, gas: int
    ) -> tuple[bytes, str]:
        don = self.net.don
        if don is None:
            raise RuntimeError("the executing network has no transmitter key: nothing executes")
        nonce = await rpc.transaction_count(don.address, "pending")
        fees = await suggest_fees(rpc, max_fee_cap=MAX_FEE_CAP, priority_fee_cap=PRIORITY_FEE_CAP)
        signed = await sign(
            don, ccip_transaction(chain.chain_id, offramp, data, 0, nonce, fees, gas)
        )
        return signed.raw, signed.tx_hash

    async def execute(
        self,
        tracked: _Tracked,
        chain: RunningChain,
        rpc: EvmRpc,
        offramp: str,
        token_data: list[bytes],
    ) -> None:
        injected = self.net.take_failure(tracked.message.receiver)
        if injected:
            token_data = [b""] * len(token_data)  # no attestation: the release reverts
        data = execute_calldata(tracked.message, token_data)
        raw, tx_hash = await self.signed(chain, rpc, offramp, data, EXECUTE_GAS)
        tracked.exec_tx, tracked.exec_raw, tracked.injected = tx_hash, raw, injected
        tracked.status = "EXECUTING"
        await rpc.send_raw_transaction(raw)
        with self.net.lock:
            self.net.executed += 1


def _api_status(tracked: _Tracked) -> str:
    return {"EXECUTING": "COMMITTED"}.get(tracked.status, tracked.status)


def _handler(net: _Network) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/control/failures":
                with net.lock:
                    self.send_json(200, net.failures())
                return
            match = _MESSAGE_PATH.match(self.path)
            if not match:
                self.send_json(404, {"error": "Not Found"})
                return
            with net.lock:
                tracked = net.messages.get(match.group(1).lower())
                if tracked is None:
                    self.send_json(404, {"error": "Message not found"})
                    return
                m = tracked.message
                self.send_json(
                    200,
                    {
                        "messageId": m.message_id_hex,
                        "status": _api_status(tracked),
                        "sourceChainSelector": str(m.source_selector),
                        "destChainSelector": str(m.dest_selector),
                        "sequenceNumber": str(m.sequence_number),
                        "sender": m.sender,
                        "receiver": m.receiver,
                        "sendTransactionHash": m.tx_hash,
                        "receiptTransactionHash": tracked.dest_tx,
                    },
                )

        def do_POST(self) -> None:
            if self.path != "/control/failures":
                self.send_json(404, {"error": "Not Found"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(min(length, 4096)) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("a JSON object")
                with net.lock:
                    if body.get("clear"):
                        net.fail_next = 0
                        net.fail_receivers.clear()
                    if "next" in body:
                        net.fail_next = max(0, int(body["next"]))
                    if "receiver" in body:
                        receiver = str(body["receiver"]).lower()
                        if not re.fullmatch(r"0x[0-9a-f]{40}", receiver):
                            raise ValueError("receiver is an address")
                        net.fail_receivers.add(receiver)
                    answer = net.failures()
            except (ValueError, TypeError) as exc:
                self.send_json(400, {"error": str(exc)})
                return
            self.send_json(200, answer)

    return Handler


@dataclass
class CcipHandle:
    """A running executing network."""

    url: str
    _server: ThreadingHTTPServer
    _threads: list[threading.Thread]
    _stop: threading.Event
    _net: _Network

    def fail_next(self, count: int = 1) -> None:
        """The next ``count`` executions FAIL."""
        with self._net.lock:
            self._net.fail_next = count

    def fail_receiver(self, address: str) -> None:
        """Every execution to ``address`` FAILS until cleared."""
        with self._net.lock:
            self._net.fail_receivers.add(address.lower())

    def clear_failures(self) -> None:
        with self._net.lock:
            self._net.fail_next = 0
            self._net.fail_receivers.clear()

    def message(self, message_id: str) -> dict[str, Any] | None:
        """A message as the network tracks it (status, source and destination tx)."""
        with self._net.lock:
            tracked = self._net.messages.get(message_id.lower())
            if tracked is None:
                return None
            return {
                "status": _api_status(tracked),
                "exec_tx": tracked.exec_tx,
                "injected": tracked.injected,
                "dest_tx": tracked.dest_tx,
            }

    def status(self) -> dict[str, Any]:
        with self._net.lock:
            return {
                "url": self.url,
                "messages": len(self._net.messages),
                "executed": self._net.executed,
                "failures": self._net.failures(),
                "errors": dict(self._net.errors),
            }

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=10)


def serve(
    chains: Sequence[RunningChain],
    don: Signer | None,
    config: CcipConfig | None = None,
    host: str = LOOPBACK,
    port: int = 0,
) -> CcipHandle:
    """Start the executing network over ``chains`` (each with the CCIP double)
    signing with ``don`` (the OffRamps' transmitter), the USDC attestations
    from ``config.attestation_url``; port 0 picks a free one."""
    net = _Network(
        {ccip_selector(c): c for c in chains if "CcipOffRamp" in c.contracts},
        don,
        config or CcipConfig(),
    )
    server = ThreadingHTTPServer((host, port), _handler(net))
    server.daemon_threads = True
    stop = threading.Event()
    watcher = _Watcher(net)
    threads = [
        threading.Thread(target=server.serve_forever, args=(0.05,), name="ccip-http", daemon=True),
        threading.Thread(
            target=lambda: asyncio.run(watcher.run(stop)), name="ccip-network", daemon=True
        ),
    ]
    for thread in threads:
        thread.start()
    bound_host, bound_port = server.server_address[:2]
    return CcipHandle(f"http://{bound_host!s}:{bound_port}", server, threads, stop, net)
