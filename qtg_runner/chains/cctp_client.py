"""What the CCTP v2 executors say to the chains and to Circle's attestation
service (Iris): the calldata of ``depositForBurn``, ``receiveMessage``,
``usedNonces`` and v2.1's ``minFee``; the and ``MessageReceived`` events decoded from logs, and a
search for logs in block ranges a provider accepts; and an Iris client
(messages, and re-attestation of an expired fast message).

The same code talks to the real contracts and Iris and to the local doubles
(qtg_runner.chains.cctp, qtg_world.iris): only addresses and the URL
differ. Layouts and event signatures: protocols.md, "Circle CCTP".
"""

from __future__ import annotations

import enum
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode
from eth_utils.crypto import keccak

from qtg_runner.budget import EndpointBudget, EndpointThrottled
from qtg_runner.chains.cctp import BurnBody, CctpMessage, address_to_bytes32
from qtg_runner.chains.evm import normalize_address
from qtg_runner.chains.evm_rpc import EvmRpc, Log, RpcError, RpcErrorKind
from qtg_runner.circuit import Circuit
from qtg_runner.endpoint import HttpEndpoint

__all__ = [
    "DEPOSIT_FOR_BURN",
    "DEPOSIT_FOR_BURN_TOPIC",
    "MESSAGE_RECEIVED_TOPIC",
    "MESSAGE_SENT_TOPIC",
    "RATE_LIMITED_MIN_WAIT_S",
    "DepositForBurn",
    "IrisAnswer",
    "IrisClient",
    "IrisStatus",
    "MessageReceived",
    "decode_deposit_for_burn",
    "decode_message_received",
    "decode_receive_message",
    "deposit_for_burn_calldata",
    "logs_newest_first",
    "min_fee_amount",
    "parse_message",
    "receive_message_calldata",
    "used_nonce",
]

DEPOSIT_FOR_BURN = bytes.fromhex("8e0250ee")
"""depositForBurn(uint256,uint32,bytes32,address,bytes32,uint256,uint32)."""
_RECEIVE_MESSAGE = keccak(text="receiveMessage(bytes,bytes)")[:4]
_USED_NONCES = keccak(text="usedNonces(bytes32)")[:4]
_MIN_FEE = keccak(text="minFee()")[:4]
MIN_FEE_MULTIPLIER = 10_000_000
"""v2.1's minFee unit: 1/1000 of a basis point."""

DEPOSIT_FOR_BURN_TOPIC = (
    "0x"
    + keccak(
        text="DepositForBurn(address,uint256,address,bytes32,uint32,bytes32,bytes32,uint256,uint32,bytes)"
    ).hex()
)
MESSAGE_SENT_TOPIC = "0x" + keccak(text="MessageSent(bytes)").hex()
MESSAGE_RECEIVED_TOPIC = (
    "0x" + keccak(text="MessageReceived(address,uint32,bytes32,bytes32,uint32,bytes)").hex()
)

RATE_LIMITED_MIN_WAIT_S = 5.0
"""Iris allows 35 requests a second and blocks for 5 minutes beyond: after a 429
no poll comes sooner than this (or than its Retry-After)."""


def deposit_for_burn_calldata(
    amount: int,
    destination_domain: int,
    mint_recipient: str,
    burn_token: str,
    max_fee: int,
    min_finality_threshold: int,
    destination_caller: bytes = bytes(32),
) -> bytes:
    return DEPOSIT_FOR_BURN + abi_encode(
        ["uint256", "uint32", "bytes32", "address", "bytes32", "uint256", "uint32"],
        [
            amount,
            destination_domain,
            address_to_bytes32(mint_recipient),
            normalize_address(burn_token),
            destination_caller,
            max_fee,
            min_finality_threshold,
        ],
    )


def receive_message_calldata(message: bytes, attestation: bytes) -> bytes:
    return _RECEIVE_MESSAGE + abi_encode(["bytes", "bytes"], [message, attestation])


def decode_receive_message(calldata: bytes) -> tuple[bytes, bytes]:
    """(message, attestation) of receiveMessage calldata (ValueError when it is not one)."""
    if calldata[:4] != _RECEIVE_MESSAGE:
        raise ValueError("not a receiveMessage call")
    try:
        message, attestation = abi_decode(["bytes", "bytes"], calldata[4:])
    except Exception as exc:  # eth_abi raises its own types
        raise ValueError(f"receiveMessage's arguments: {type(exc).__name__}") from None
    return bytes(message), bytes(attestation)


async def min_fee_amount(
    rpc: EvmRpc, token_messenger: str, amount: int, *, max_age_s: float = 0.0
) -> tuple[int, int]:
    """(minFee, the least maxFee a burn of ``amount`` may name) on a v2.1
    TokenMessengerV2, as its depositForBurn computes it (amount * minFee / 10^7,
    at least one unit; nothing while minFee is 0). A messenger without minFee
    (v2.0: the call reverts) has no minimum: (0, 0). minFee read at most once
    per ``max_age_s`` (EvmRpc.call)."""
    try:
        out = await rpc.call(normalize_address(token_messenger), _MIN_FEE, max_age_s=max_age_s)
    except RpcError as exc:
        if exc.kind is RpcErrorKind.REVERTED:
            return 0, 0
        raise
    min_fee = int.from_bytes(out[-32:], "big") if out else 0
    if min_fee == 0:
        return 0, 0
    return min_fee, max(1, amount * min_fee // MIN_FEE_MULTIPLIER)


async def logs_newest_first(
    rpc: EvmRpc,
    *,
    address: str,
    topics: Sequence[str | None],
    from_block: int,
    to_block: int,
    block_range: int,
) -> AsyncIterator[list[Log]]:
    """eth_getLogs over [from_block, to_block] in ranges of at most
    ``block_range`` blocks (providers cap a request's range, 2,000 to 10,000
    blocks for most), the newest range first, so that a caller looking for one
    event stops at the range that holds it."""
    if block_range < 1:
        raise ValueError("a block range is at least one block")
    high = to_block
    while high >= from_block:
        low = max(from_block, high - block_range + 1)
        yield await rpc.get_logs(address=address, topics=topics, from_block=low, to_block=high)
        high = low - 1


async def used_nonce(rpc: EvmRpc, transmitter: str, nonce: bytes) -> bool:
    """``MessageTransmitterV2.usedNonces(nonce) == 1``: the message was minted."""
    out = await rpc.call(normalize_address(transmitter), _USED_NONCES + nonce)
    return int.from_bytes(out[-32:], "big") != 0 if out else False


def _topic_address(topic: str) -> str:
    return "0x" + topic[-40:].lower()


@dataclass(frozen=True)
class DepositForBurn:
    burn_token: str
    amount: int
    depositor: str
    mint_recipient: bytes
    destination_domain: int
    destination_token_messenger: bytes
    destination_caller: bytes
    max_fee: int
    min_finality_threshold: int
    log_index: int


def decode_deposit_for_burn(log: Log) -> DepositForBurn | None:
    """The event, when ``log`` is a DepositForBurn (else None)."""
    if len(log.topics) != 4 or log.topics[0] != DEPOSIT_FOR_BURN_TOPIC:
        return None
    amount, recipient, domain, messenger, caller, max_fee, _hook = abi_decode(
        ["uint256", "bytes32", "uint32", "bytes32", "bytes32", "uint256", "bytes"], log.data
    )
    return DepositForBurn(
        burn_token=_topic_address(log.topics[1]),
        amount=int(amount),
        depositor=_topic_address(log.topics[2]),
        mint_recipient=bytes(recipient),
        destination_domain=int(domain),
        destination_token_messenger=bytes(messenger),
        destination_caller=bytes(caller),
        max_fee=int(max_fee),
        min_finality_threshold=int(log.topics[3], 16),
        log_index=log.log_index,
    )


@dataclass(frozen=True)
class MessageReceived:
    caller: str
    source_domain: int
    nonce: str
    sender: bytes
    finality_threshold_executed: int
    message_body: bytes
    tx_hash: str
    block_number: int | None


def decode_message_received(log: Log) -> MessageReceived | None:
    if len(log.topics) != 4 or log.topics[0] != MESSAGE_RECEIVED_TOPIC:
        return None
    source_domain, sender, body = abi_decode(["uint32", "bytes32", "bytes"], log.data)
    return MessageReceived(
        caller=_topic_address(log.topics[1]),
        source_domain=int(source_domain),
        nonce=log.topics[2].lower(),
        sender=bytes(sender),
        finality_threshold_executed=int(log.topics[3], 16),
        message_body=bytes(body),
        tx_hash=log.tx_hash,
        block_number=log.block_number,
    )


class IrisStatus(enum.StrEnum):
    NOT_FOUND = "not_found"
    """404 or an empty list: not indexed yet (normal at first)."""
    PENDING = "pending"
    COMPLETE = "complete"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    """Unreachable, or an answer that is not Iris's."""


@dataclass(frozen=True)
class IrisAnswer:
    status: IrisStatus
    messages: list[dict[str, Any]] = field(default_factory=list)
    retry_after: float | None = None
    detail: str = ""


class IrisClient(HttpEndpoint):
    """``GET /v2/messages/{sourceDomain}?transactionHash=``, read as the
    executors need it; its httpx client, circuit and deadline as HttpEndpoint's."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 10.0,
        *,
        client: httpx.AsyncClient | None = None,
        circuit: Circuit | None = None,
        budget: EndpointBudget | None = None,
    ) -> None:
        self._base = base_url.rstrip("/")
        super().__init__(
            self._base,
            f"Iris at {self._base}",
            timeout=timeout,
            client=client,
            circuit=circuit,
            budget=budget,
            budget_kind="iris",
        )

    async def _send(self, method: str, path: str, **request: Any) -> httpx.Response:
        """One request, its answer or silence told to the circuit."""
        async with self.circuit.watching(self._deadline):
            return await self._client.request(method, self._base + path, **request)

    async def _nobodys_burn(self) -> httpx.Response:
        """The lookup of a hash nobody burnt in, on domain 0: whatever Iris
        answers (404, an empty list, a 400) is an answer."""
        return await self._send(
            "GET", "/v2/messages/0", params={"transactionHash": "0x" + "00" * 32}
        )

    async def _answer(self, method: str, path: str, **request: Any) -> httpx.Response | IrisAnswer:
        """A call's response for its caller to read, or the answer Iris's word
        settles the same for every call: UNAVAILABLE while the circuit is open
        (unsent) or with no answer, RATE_LIMITED for a 429 (which pauses and
        slows Iris's request budget for every caller in the process) or without
        a turn of that budget (unsent), NOT_FOUND for a 404."""
        refusal = self.circuit.refusal(self._nobodys_burn)
        if refusal is not None:
            return IrisAnswer(IrisStatus.UNAVAILABLE, detail=refusal)
        try:
            await self.budget.acquire()
        except EndpointThrottled as exc:
            return IrisAnswer(IrisStatus.RATE_LIMITED, retry_after=exc.wait_s, detail=str(exc))
        try:
            response = await self._send(method, path, **request)
        except (httpx.HTTPError, TimeoutError) as exc:
            return IrisAnswer(IrisStatus.UNAVAILABLE, detail=f"{type(exc).__name__}")
        finally:
            self.budget.done()
        if response.status_code == 429:
            limited = _rate_limited(response)
            self.budget.slowed(limited.retry_after)
            return limited
        if response.status_code == 404:
            return IrisAnswer(IrisStatus.NOT_FOUND, detail="HTTP 404")
        return response

    async def messages(self, source_domain: int, tx_hash: str) -> IrisAnswer:
        """Not sent while Iris's circuit is open (qtg_runner.circuit): UNAVAILABLE."""
        response = await self._answer(
            "GET", f"/v2/messages/{source_domain}", params={"transactionHash": tx_hash}
        )
        if isinstance(response, IrisAnswer):
            return response
        if response.status_code != 200:
            return IrisAnswer(IrisStatus.UNAVAILABLE, detail=f"HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            return IrisAnswer(IrisStatus.UNAVAILABLE, detail="an answer that is not JSON")
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return IrisAnswer(IrisStatus.UNAVAILABLE, detail="no messages list in the answer")
        if not messages:
            return IrisAnswer(IrisStatus.NOT_FOUND, detail="an empty list")
        if all(m.get("status") == "complete" for m in messages):
            return IrisAnswer(IrisStatus.COMPLETE, messages)
        return IrisAnswer(
            IrisStatus.PENDING, messages, detail=str(messages[0].get("status", "?"))[:64]
        )

    async def reattest(self, nonce: str) -> IrisAnswer:
        """``POST /v2/reattest/{nonce}``: Circle's re-attestation of a
        pre-finality message as finalized (an expired fast message's way to a
        mint: its expirationBlock becomes 0). COMPLETE when Iris took the
        request (200; the messages then answer the message re-attested once it
        is signed), NOT_FOUND for a nonce it does not know (404), RATE_LIMITED,
        or UNAVAILABLE (unreachable, the circuit open, any other answer, with
        the status and Iris's words in ``detail``)."""
        response = await self._answer("POST", f"/v2/reattest/{nonce}", json={})
        if isinstance(response, IrisAnswer):
            return response
        if response.status_code == 200:
            return IrisAnswer(IrisStatus.COMPLETE)
        return IrisAnswer(
            IrisStatus.UNAVAILABLE, detail=f"HTTP {response.status_code}: {response.text[:200]}"
        )

    async def reachable(self) -> str | None:
        """None when Iris answers a lookup (of a hash nobody burnt in, on
        domain 0: 404, an empty list or a 400 for a domain it does not serve
        are all answers), else what is wrong: unreachable, 5xx, or 429; or
        the open circuit's refusal."""
        refusal = self.circuit.refusal(self._nobodys_burn)
        if refusal is not None:
            return refusal
        try:
            response = await self._nobodys_burn()
        except (httpx.HTTPError, TimeoutError) as exc:
            return f"unreachable: {type(exc).__name__}"
        if response.status_code == 429 or response.status_code >= 500:
            return f"HTTP {response.status_code}"
        return None


def _rate_limited(response: httpx.Response) -> IrisAnswer:
    """A 429: no request sooner than its Retry-After, nor than 5 s."""
    try:
        hinted = float(response.headers.get("Retry-After", "0"))
    except ValueError:
        hinted = 0.0
    wait = max(RATE_LIMITED_MIN_WAIT_S, hinted if math.isfinite(hinted) else 0.0)
    return IrisAnswer(IrisStatus.RATE_LIMITED, retry_after=wait, detail="HTTP 429")


def parse_message(hex_text: Any) -> tuple[CctpMessage, BurnBody, bytes]:
    """An attested message's hex, decoded (ValueError when it is not a v2 burn message)."""
    if not isinstance(hex_text, str) or not hex_text.startswith("0x"):
        raise ValueError("the message is not 0x-prefixed hex")
    raw = bytes.fromhex(hex_text[2:])
    message = CctpMessage.decode(raw)
    return message, BurnBody.decode(message.body), raw
