"""A fake Circle attestation service (Iris) for the CCTP v2 double: a real HTTP
server on loopback that attests burns on the local chains with the attester
keys their MessageTransmitterV2 trusts (qtg_runner.chains.cctp).

``GET /v2/messages/{sourceDomain}?transactionHash=0x...`` answers like Iris v2:

- 404 (or ``{"messages": []}``, ``IrisConfig.not_found="empty"``) while the
  transaction has no receipt or emitted no ``MessageSent`` on that domain's
  transmitter (read with eth_getLogs over the receipt's block);
- ``status: "pending_confirmations"`` (``attestation: "PENDING"``, ``message:
  "0x"``) until the burn's block is ``delay`` old, by the block's timestamp:
  ``fast_delay_s`` for a ``minFinalityThreshold`` of at most 1000, else
  ``standard_delay_s``, both times ``time_scale``;
- then ``status: "complete"`` with the message as the destination must receive
  it: the nonce filled (keccak256 of the domain, transaction hash and log index:
  the same burn gets the same nonce from any instance, so a restart never opens a
  second mint), ``finalityThresholdExecuted`` 1000 (fast) or 2000 (standard),
  ``feeExecuted`` (``fast_fee_bps`` / ``standard_fee_bps`` of the amount, never
  above ``maxFee``), ``expirationBlock`` (fast only: the destination chain's
  head when first attested plus ``fast_expiration_blocks``; 0 for standard, as
  Circle's), and the attestation: keccak256(message) signed by every attester,
  in ascending signer order.

``POST /v2/reattest/{nonce}`` (the message's ``eventNonce``) asks for a fast
message again as finalized, as Circle's re-attestation does ("can also be used
to broadcast expired fast burns, by setting expiration block to 0", Circle's
API reference; Circle's SDK, @circle-fin/provider-cctp-v2, polls the messages
until ``expirationBlock`` is "0"). 200 ``{"message": "Re-attestation
successfully requested for nonce.", "nonce": ...}``; asked again, the same.
Once the burn's block is ``standard_delay_s`` old (finalized), the messages
answer the message re-attested: ``finalityThresholdExecuted`` 2000,
``expirationBlock`` 0, the same nonce and fee executed, signed again; until
then the fast attestation as it was. Errors (Circle documents none; the
fake's reading): 400 a nonce that is not 0x and 64 hex digits, 404 a nonce
this instance has not attested (its GET comes first, as in Circle's SDK), 400
a message that is not pre-finality (minFinalityThreshold above 1000).

Numbers in ``decodedMessage`` are strings, as Iris gives them. Rate limit: more
than ``rate_limit_per_s`` requests within one second, or ``IrisHandle.block()``,
answers every request with 429 (``Retry-After``) for ``block_window_s`` times
``time_scale``. ``GET /v2/burn/USDC/fees/{src}/{dst}`` answers the fee table.

``serve(chains, attesters, config)`` starts it on a free port (a daemon thread)
and returns the handle: ``.url``, ``.stop()``, ``.block()``, ``.unblock()``.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from eth_utils.crypto import keccak

from qtg_runner.chains.cctp import FINALITY_FAST, FINALITY_STANDARD, BurnBody, CctpMessage
from qtg_runner.chains.errors import ChainError
from qtg_runner.ports import LOOPBACK
from qtg_world.chains.cctp import Attester, attest, read_domain
from qtg_world.chains.local import RunningChain, rpc
from qtg_world.json_http import JsonHandler

__all__ = ["MESSAGE_SENT_TOPIC", "REATTEST_REQUESTED", "IrisConfig", "IrisHandle", "serve"]

MESSAGE_SENT_TOPIC = "0x" + keccak(text="MessageSent(bytes)").hex()
"""topic0 of ``MessageSent(bytes message)``."""

_TX_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
_MESSAGES_PATH = re.compile(r"^/v2/messages/(\d{1,10})$")
_FEES_PATH = re.compile(r"^/v2/burn/USDC/fees/(\d{1,10})/(\d{1,10})$")
_REATTEST_PATH = re.compile(r"^/v2/reattest/([^/]{0,200})$")
_NONCE = re.compile(r"^0x[0-9a-fA-F]{64}$")
REATTEST_REQUESTED = "Re-attestation successfully requested for nonce."


@dataclass(frozen=True)
class IrisConfig:
    """How the fake Iris behaves; every duration is in seconds, times ``time_scale``."""

    fast_delay_s: float = 12.0
    """Fast transfers (minFinalityThreshold <= 1000): Circle's are about 8-20 s."""
    standard_delay_s: float = 15 * 60.0
    """Standard transfers: 13-19 minutes from Ethereum and its L2s."""
    time_scale: float = 1.0
    not_found: Literal["404", "empty"] = "404"
    """What an unseen burn gets: HTTP 404, or 200 with an empty list."""
    rate_limit_per_s: int = 35
    block_window_s: float = 300.0
    """How long a client over the rate limit gets 429: Circle's is five minutes."""
    fast_fee_bps: int = 1
    standard_fee_bps: int = 0
    fast_expiration_blocks: int = 7200
    """How far ahead of the destination's head a fast attestation expires, in
    that chain's blocks (Circle publishes no window; a day of 12 s blocks)."""

    def delay(self, min_finality_threshold: int) -> float:
        base = (
            self.fast_delay_s if min_finality_threshold <= FINALITY_FAST else self.standard_delay_s
        )
        return base * self.time_scale


@dataclass
class _Burn:
    """The MessageSent logs of one source transaction, as first read."""

    source_domain: int
    tx_hash: str
    block_timestamp: int
    logs: list[tuple[int, bytes]]  # (log index, message as sent)


@dataclass
class _State:
    config: IrisConfig
    chains: dict[int, RunningChain]
    attesters: list[Attester]
    burns: dict[tuple[int, str], _Burn] = field(default_factory=dict)
    nonces: dict[bytes, int] = field(default_factory=dict)
    """The minFinalityThreshold of every nonce answered so far."""
    expirations: dict[bytes, int] = field(default_factory=dict)
    """The expirationBlock of each fast attestation, fixed when first attested."""
    reattest: set[bytes] = field(default_factory=set)
    """The nonces asked for again as finalized."""
    recent: deque[float] = field(default_factory=deque)
    blocked_until: float = 0.0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self) -> float | None:
        """None when the request may go on, else the seconds its block still lasts."""
        now = time.monotonic()
        with self.lock:
            self.requests += 1
            if now < self.blocked_until:
                return self.blocked_until - now
            self.recent.append(now)
            while self.recent and self.recent[0] <= now - 1.0:
                self.recent.popleft()
            if len(self.recent) > self.config.rate_limit_per_s:
                window = self.config.block_window_s * self.config.time_scale
                self.blocked_until = now + window
                self.recent.clear()
                return window
        return None


def _nonce(source_domain: int, tx_hash: str, log_index: int) -> bytes:
    return keccak(
        b"qtg-local-iris"
        + source_domain.to_bytes(4, "big")
        + bytes.fromhex(tx_hash[2:])
        + log_index.to_bytes(32, "big")
    )


def _abi_bytes(data: bytes) -> bytes:
    """The ``bytes`` of an event's data holding a single dynamic bytes value."""
    offset = int.from_bytes(data[0:32], "big")
    length = int.from_bytes(data[offset : offset + 32], "big")
    return data[offset + 32 : offset + 32 + length]


def _find_burn(state: _State, domain: int, tx_hash: str) -> _Burn | None:
    key = (domain, tx_hash.lower())
    with state.lock:
        known = state.burns.get(key)
    if known is not None:
        return known
    chain = state.chains[domain]
    receipt = rpc(chain.rpc_url, "eth_getTransactionReceipt", [tx_hash])
    if not receipt:
        return None
    logs = rpc(
        chain.rpc_url,
        "eth_getLogs",
        [
            {
                "blockHash": receipt["blockHash"],
                "address": chain.contracts["MessageTransmitterV2"],
                "topics": [MESSAGE_SENT_TOPIC],
            }
        ],
    )
    found = [
        (int(log["logIndex"], 16), _abi_bytes(bytes.fromhex(log["data"][2:])))
        for log in logs
        if str(log["transactionHash"]).lower() == tx_hash.lower() and not log.get("removed")
    ]
    if not found:
        return None
    block = rpc(chain.rpc_url, "eth_getBlockByHash", [receipt["blockHash"], False])
    burn = _Burn(domain, tx_hash.lower(), int(block["timestamp"], 16), sorted(found))
    with state.lock:
        state.burns[key] = burn
    return burn


def _hex(raw: bytes) -> str:
    return "0x" + raw.hex()


def _decoded(message: CctpMessage) -> dict[str, Any]:
    decoded: dict[str, Any] = {
        "sourceDomain": str(message.source_domain),
        "destinationDomain": str(message.destination_domain),
        "nonce": _hex(message.nonce),
        # Circle gives the sending and receiving contracts as 20-byte EVM
        # addresses, the destination caller as the 32-byte word it is
        "sender": _hex(message.sender[12:]),
        "recipient": _hex(message.recipient[12:]),
        "destinationCaller": _hex(message.destination_caller),
        "minFinalityThreshold": str(message.min_finality_threshold),
        "finalityThresholdExecuted": str(message.finality_threshold_executed),
        "messageBody": _hex(message.body),
    }
    try:
        body = BurnBody.decode(message.body)
    except ValueError:
        return decoded
    decoded["decodedMessageBody"] = {
        "burnToken": _hex(body.burn_token[12:]),
        "mintRecipient": _hex(body.mint_recipient[12:]),
        "amount": str(body.amount),
        "messageSender": _hex(body.message_sender[12:]),
        "maxFee": str(body.max_fee),
        "feeExecuted": str(body.fee_executed),
        "expirationBlock": str(body.expiration_block),
        "hookData": _hex(body.hook_data) if body.hook_data else None,
    }
    return decoded


def _expiration(state: _State, nonce: bytes, destination_domain: int) -> int:
    """The expirationBlock of the fast attestation of ``nonce``: the destination
    chain's head when first attested plus the window (0 for a domain this
    instance does not serve), the same on every later answer."""
    with state.lock:
        known = state.expirations.get(nonce)
    if known is not None:
        return known
    chain = state.chains.get(destination_domain)
    expiration = 0
    if chain is not None:
        expiration = int(rpc(chain.rpc_url, "eth_blockNumber", []), 16)
        expiration += state.config.fast_expiration_blocks
    with state.lock:
        return state.expirations.setdefault(nonce, expiration)


def _entry(state: _State, burn: _Burn, log_index: int, sent: bytes) -> dict[str, Any]:
    message = CctpMessage.decode(sent)
    nonce = _nonce(burn.source_domain, burn.tx_hash, log_index)
    delay = state.config.delay(message.min_finality_threshold)
    fast = message.min_finality_threshold <= FINALITY_FAST
    with state.lock:
        state.nonces[nonce] = message.min_finality_threshold
        asked_again = nonce in state.reattest
    if time.time() < burn.block_timestamp + delay:
        return {
            "message": "0x",
            "eventNonce": _hex(nonce),
            "attestation": "PENDING",
            "decodedMessage": _decoded(replace(message, nonce=nonce)),
            "cctpVersion": 2,
            "status": "pending_confirmations",
            "delayReason": None,
        }
    finalized = asked_again and time.time() >= burn.block_timestamp + state.config.delay(
        FINALITY_STANDARD
    )
    body = message.body
    try:
        burn_body = BurnBody.decode(body)
    except ValueError:
        pass
    else:
        bps = state.config.fast_fee_bps if fast else state.config.standard_fee_bps
        fee = min(burn_body.max_fee, burn_body.amount * bps // 10_000)
        expiration = 0
        if fast and not finalized:
            expiration = _expiration(state, nonce, message.destination_domain)
        body = replace(burn_body, fee_executed=fee, expiration_block=expiration).encode()
    filled = replace(
        message,
        nonce=nonce,
        finality_threshold_executed=FINALITY_FAST if fast and not finalized else FINALITY_STANDARD,
        body=body,
    )
    raw = filled.encode()
    return {
        "message": _hex(raw),
        "eventNonce": _hex(nonce),
        "attestation": _hex(attest(raw, state.attesters)),
        "decodedMessage": _decoded(filled),
        "cctpVersion": 2,
        "status": "complete",
        "delayReason": None,
    }


def _reattest(state: _State, nonce_text: str) -> tuple[int, dict[str, Any]]:
    """The answer to ``POST /v2/reattest/{nonce}``: status and body."""
    if not _NONCE.match(nonce_text):
        return 400, {"error": "Invalid nonce: 0x and 64 hex digits"}
    nonce = bytes.fromhex(nonce_text[2:])
    with state.lock:
        threshold = state.nonces.get(nonce)
        if threshold is not None and threshold <= FINALITY_FAST:
            state.reattest.add(nonce)
    if threshold is None:
        return 404, {"error": "Message not found"}
    if threshold > FINALITY_FAST:
        return 400, {"error": "Message is not a pre-finality message"}
    return 200, {"message": REATTEST_REQUESTED, "nonce": nonce_text}


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def _admitted(self) -> bool:
            blocked = state.admit()
            if blocked is not None:
                self.send_json(
                    429,
                    {"error": "Too Many Requests"},
                    {"Retry-After": str(max(1, math.ceil(blocked)))},
                )
            return blocked is None

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if 0 < length <= 65536:
                self.rfile.read(length)  # the body is not read by Iris: "{}" at most
            if not self._admitted():
                return
            match = _REATTEST_PATH.match(urlsplit(self.path).path)
            if not match:
                self.send_json(404, {"error": "Not Found"})
                return
            self.send_json(*_reattest(state, match.group(1)))

        def do_GET(self) -> None:
            if not self._admitted():
                return
            url = urlsplit(self.path)
            fees = _FEES_PATH.match(url.path)
            if fees:
                self.send_json(
                    200,
                    [
                        {
                            "finalityThreshold": FINALITY_FAST,
                            "minimumFee": state.config.fast_fee_bps,
                        },
                        {
                            "finalityThreshold": FINALITY_STANDARD,
                            "minimumFee": state.config.standard_fee_bps,
                        },
                    ],
                )
                return
            match = _MESSAGES_PATH.match(url.path)
            if not match:
                self.send_json(404, {"error": "Not Found"})
                return
            domain = int(match.group(1))
            tx_hash = (parse_qs(url.query).get("transactionHash") or [""])[0]
            if domain not in state.chains:
                self.send_json(400, {"error": f"Invalid source domain: {domain}"})
                return
            if not _TX_HASH.match(tx_hash):
                self.send_json(400, {"error": "Invalid transactionHash: 0x and 64 hex digits"})
                return
            try:
                burn = _find_burn(state, domain, tx_hash)
            except ChainError:
                self.send_json(503, {"error": "source chain unreachable"})
                return
            if burn is None:
                if state.config.not_found == "empty":
                    self.send_json(200, {"messages": []})
                else:
                    self.send_json(404, {"error": "Message not found"})
                return
            try:
                entries = [_entry(state, burn, index, sent) for index, sent in burn.logs]
            except ChainError:
                self.send_json(503, {"error": "destination chain unreachable"})
                return
            self.send_json(200, {"messages": entries})

    return Handler


@dataclass
class IrisHandle:
    """A running fake Iris."""

    url: str
    _server: ThreadingHTTPServer
    _thread: threading.Thread
    _state: _State

    @property
    def requests(self) -> int:
        """Requests answered so far (429s included)."""
        return self._state.requests

    def block(self, seconds: float | None = None) -> None:
        """Answer every request with 429 for ``seconds`` (default: the configured
        block window, scaled) from now."""
        cfg = self._state.config
        window = cfg.block_window_s * cfg.time_scale if seconds is None else seconds
        with self._state.lock:
            self._state.blocked_until = time.monotonic() + window

    def unblock(self) -> None:
        with self._state.lock:
            self._state.blocked_until = 0.0
            self._state.recent.clear()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def serve(
    chains: Sequence[RunningChain],
    attesters: Sequence[Attester],
    config: IrisConfig | None = None,
    host: str = LOOPBACK,
    port: int = 0,
) -> IrisHandle:
    """Start the fake Iris for ``chains`` (each with the CCTP double: its domain
    read from its transmitter) signing with ``attesters``; port 0 picks a free one."""
    by_domain = {read_domain(chain): chain for chain in chains}
    state = _State(config or IrisConfig(), by_domain, list(attesters))
    server = ThreadingHTTPServer((host, port), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="fake-iris", daemon=True)
    thread.start()
    bound_host, bound_port = server.server_address[:2]
    return IrisHandle(f"http://{bound_host!s}:{bound_port}", server, thread, state)
