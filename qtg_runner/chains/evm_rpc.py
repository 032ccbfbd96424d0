"""An EVM node's JSON-RPC, as the executors read and write a chain: async, over
one ``httpx.AsyncClient``, typed answers, and three kinds of failure:

    RpcError        the node answered with a JSON-RPC error; ``kind`` classifies
                    its message (ALREADY_KNOWN, NONCE_TOO_LOW, UNDERPRICED,
                    INSUFFICIENT_FUNDS, REVERTED, OTHER), since the codes are
                    not standard (anvil and geth answer -32003 or -32000 alike).
    RpcUnavailable  nothing usable came back: connection refused, a timeout, an
                    HTTP 5xx; or not sent, the endpoint having answered
                    nothing since a call went unanswered (its circuit is open:
                    qtg_runner.circuit). Retryable; after a send it says
                    nothing about whether the transaction reached the node.
                    RpcThrottled, one of them: HTTP 429, or not sent for
                    the endpoint's request budget (qtg_runner.budget).
    RpcBadResponse  an answer that is not a JSON-RPC answer: not JSON, nested
                    too deeply, larger than the bound, another id, HTTP 4xx
                    without a JSON-RPC error (a wrong URL or API key).

An RPC URL may carry an API key (``?apikey=``, ``user:pass@``, or a path
segment as Infura and Alchemy do): no message, repr or log line of this module
holds more than ``redact_url(url)``, and httpx's own exceptions, which quote
the URL, are never chained.

Addresses in every answer are 0x + 40 lower-case hex, hashes 0x + 64.

The log searches of one contract up to the head (eth_getLogs from a block
to ``latest``) asked in the same moment, the nodes a round observes, go as
ONE eth_getLogs (from the earliest block, each topic any of theirs), each
answered with what matches it alone.

Shared reads (``max_age_s``) of the latest block, a contract's view or an
account's ether, asked in the same moment (one turn of the event loop: the
reads a preflight gathers, the nodes of a batch) go to the node as ONE eth_call
of Multicall3's ``aggregate3`` (``MULTICALL3``), each read's answer as it
alone would have been (a revert its own RpcError REVERTED): one request of the
endpoint's budget instead of one a read. A chain without Multicall3 there (its
answer empty) is read one call at a time from then on.

Calls asked in the same moment (one turn of the event loop) go as ONE HTTP
request, a JSON-RPC batch (at most MAX_BATCH calls), each answered by its id
as it alone would have been: fewer round trips to a hosted provider, the
same calls metered. A transaction's broadcast always goes alone. A provider
that refuses batches (its answer not a JSON array) is asked one call at a
time from then on; a 429 or an outage fails every call of the batch, as each
alone would have failed.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode
from eth_utils.crypto import keccak

from qtg_runner.budget import EndpointBudget, EndpointThrottled
from qtg_runner.circuit import Circuit
from qtg_runner.endpoint import HttpEndpoint, retry_after_s

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""A body larger than this is refused (RpcBadResponse) before it is parsed."""

MAX_JSON_DEPTH = 32
"""JSON-RPC answers are shallow (a receipt is 4 levels): deeper ones are refused
before the C decoder sees them (web3's py_ecc raises the recursion limit to
100000, where a hostile answer could overflow the C stack)."""

BlockTag = Literal["latest", "safe", "finalized", "pending", "earliest"]
NonceTag = Literal["latest", "pending"]

# httpx logs each request's full URL at INFO ("HTTP Request: POST <url>") and
# httpcore its connection steps at DEBUG: an API key in the URL would be in the
# log of whoever turns the root logger up. They speak from WARNING on.
for _name in ("httpx", "httpcore"):
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.WARNING)

_ADDRESS = re.compile(r"0x[0-9a-f]{40}")
_HASH = re.compile(r"0x[0-9a-f]{64}")

SETTLED_KEPT = 4096
"""How many settled readings a client keeps (``EvmRpc.settled``), the oldest
forgotten first: enough for the nodes one runner observes at once."""
RECENT_KEPT = 4096
"""The most shared reads a client keeps (``recent``), the oldest forgotten first."""
MULTICALL3 = "0xca11bde05977b3631167028862be2a173976ca11"
"""Multicall3 (mds1/multicall), at this address on Ethereum, Base, Arbitrum, OP,
Avalanche and their testnets alike (a keyless deployment), and on the local
chains (qtg_world): the shared reads of a moment go to it together."""
_AGGREGATE3 = keccak(text="aggregate3((address,bool,bytes)[])")[:4]
_GET_ETH_BALANCE = keccak(text="getEthBalance(address)")[:4]
MAX_GATHERED = 64
"""The most reads one aggregate3 carries; more asked in a moment go in several."""
MAX_BATCH = 20
"""The most calls one JSON-RPC batch carries (providers cap a batch: 100 or
1,000 for most, fewer on some free tiers); more asked in a moment go in several."""
MOMENT_TURNS = 3
"""How many turns of the event loop the calls of one batch are gathered over."""
ALONE = frozenset({"eth_sendRawTransaction"})
"""Calls never batched: a broadcast's answer is read alone, whatever else is asked."""


# -- errors ----------------------------------------------------------------------------


class EvmRpcError(Exception):
    """Any failure of an RPC call; the message never holds a secret of the URL."""


class RpcErrorKind(enum.Enum):
    """What a node's error message means for a transaction we sent."""

    ALREADY_KNOWN = "already_known"
    """The same transaction is already in the node's pool (or imported)."""
    NONCE_TOO_LOW = "nonce_too_low"
    """The nonce is consumed: by this transaction (mined) or another one."""
    UNDERPRICED = "underpriced"
    """A replacement whose fees are not raised enough, or a fee under the pool's floor."""
    INSUFFICIENT_FUNDS = "insufficient_funds"
    """The sender cannot pay gas * max fee + value."""
    REVERTED = "reverted"
    """eth_call / eth_estimateGas: the call reverts."""
    OTHER = "other"


# (kind, lower-case fragments): the first kind with a fragment in the message wins.
# anvil 1.x (checked in tests/chains/test_evm_client.py): "transaction already
# imported", "nonce too low", "replacement transaction underpriced", "Insufficient
# funds for gas * price + value"; geth/erigon/nethermind/besu: the others.
_KINDS: tuple[tuple[RpcErrorKind, tuple[str, ...]], ...] = (
    (
        RpcErrorKind.ALREADY_KNOWN,
        ("already known", "known transaction", "already imported", "alreadyknown",
         "already in mempool"),
    ),
    (RpcErrorKind.NONCE_TOO_LOW, ("nonce too low", "nonce is too low", "oldnonce",
                                  "nonce has already been used")),
    (RpcErrorKind.UNDERPRICED, ("underpriced", "fee too low", "feetoolow")),
    (RpcErrorKind.INSUFFICIENT_FUNDS, ("insufficient funds", "insufficientfunds",
                                       "insufficient balance for transfer")),
    (RpcErrorKind.REVERTED, ("execution reverted", "revert")),
)  # fmt: skip


def classify(message: str) -> RpcErrorKind:
    """The kind of a node's error message (case-insensitive)."""
    text = message.lower()
    for kind, fragments in _KINDS:
        if any(f in text for f in fragments):
            return kind
    return RpcErrorKind.OTHER


class RpcError(EvmRpcError):
    """The node answered ``method`` with a JSON-RPC error."""

    def __init__(
        self, code: int, message: str, kind: RpcErrorKind, *, method: str = "", data: Any = None
    ) -> None:
        self.code = code
        self.message = message
        self.kind = kind
        self.method = method
        self.data = data
        super().__init__(f"{method or 'rpc'}: the node answered {code} {message!r} ({kind.value})")


class RpcUnavailable(EvmRpcError):
    """No usable answer (connection refused, timeout, HTTP 5xx or 429): retry later."""


class RpcThrottled(RpcUnavailable):
    """Not sent for the endpoint's request budget (no turn within the wait),
    or answered HTTP 429 (the endpoint is then paused for its Retry-After and
    slowed for every caller in the process: qtg_runner.budget). ``wait_s``:
    when to try again."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class RpcBadResponse(EvmRpcError):
    """An answer that is not a well-formed JSON-RPC answer to our request."""


# -- URL redaction ---------------------------------------------------------------------

_KEYLIKE_SEGMENT = re.compile(r"[A-Za-z0-9_\-]{20,}")


def redact_url(url: str) -> str:
    """``url`` without what may hold an API key: scheme://host:port/path, with no
    userinfo, query or fragment, and each path segment of 20 or more key-like
    characters (Infura's ``/v3/<key>``, Alchemy's ``/v2/<key>``) as ``***``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparsable url>"
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    path = "/".join(
        "***" if _KEYLIKE_SEGMENT.fullmatch(seg) else seg for seg in parts.path.split("/")
    )
    return f"{parts.scheme}://{netloc}{path}"


# -- typed answers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Log:
    address: str
    topics: tuple[str, ...]
    data: bytes
    log_index: int
    block_number: int | None
    tx_hash: str
    removed: bool = False


@dataclass(frozen=True)
class Receipt:
    tx_hash: str
    status: int
    """1 success, 0 reverted."""
    block_number: int
    block_hash: str
    sender: str
    """The receipt's ``from``."""
    to: str | None
    logs: tuple[Log, ...]
    gas_used: int
    effective_gas_price: int
    contract_address: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == 1


@dataclass(frozen=True)
class TransactionCall:
    """What every transaction names, whoever reads it (the node, or its signed
    raw bytes decoded): its hash, nonce, sender, recipient (None for a contract
    creation), value, call data and gas limit."""

    tx_hash: str
    nonce: int
    sender: str
    to: str | None
    value: int
    data: bytes
    gas: int


@dataclass(frozen=True)
class Transaction(TransactionCall):
    """A transaction as the node knows it (pending when ``block_number`` is None)."""

    type: int
    max_fee_per_gas: int | None
    max_priority_fee_per_gas: int | None
    block_number: int | None
    block_hash: str | None


@dataclass(frozen=True)
class Block:
    number: int
    hash: str
    parent_hash: str
    timestamp: int
    base_fee_per_gas: int | None
    tx_hashes: tuple[str, ...] = field(default=(), repr=False)


# -- decoding helpers -------------------------------------------------------------------


def _qty(value: Any, what: str) -> int:
    if isinstance(value, str) and value[:2] in ("0x", "0X") and len(value) <= 66:
        try:
            return int(value, 16)
        except ValueError:
            pass
    raise RpcBadResponse(f"{what} is not a hex quantity: {str(value)[:80]!r}")


def _opt_qty(value: Any, what: str) -> int | None:
    return None if value is None else _qty(value, what)


def _address(value: Any, what: str) -> str:
    text = str(value).lower() if isinstance(value, str) else ""
    if not _ADDRESS.fullmatch(text):
        raise RpcBadResponse(f"{what} is not an address: {str(value)[:80]!r}")
    return text


def _opt_address(value: Any, what: str) -> str | None:
    return None if value is None else _address(value, what)


def _hash(value: Any, what: str) -> str:
    text = value.lower() if isinstance(value, str) else ""
    if not _HASH.fullmatch(text):
        raise RpcBadResponse(f"{what} is not a 32-byte hash: {str(value)[:80]!r}")
    return text


def _bytes(value: Any, what: str) -> bytes:
    if isinstance(value, str) and value[:2] in ("0x", "0X"):
        try:
            return bytes.fromhex(value[2:])
        except ValueError:
            pass
    raise RpcBadResponse(f"{what} is not hex data: {str(value)[:80]!r}")


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise RpcBadResponse(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise RpcBadResponse(f"{what} is not a list")
    return value


def parse_log(raw: Any) -> Log:
    obj = _object(raw, "log")
    topics = _list(obj.get("topics"), "log.topics")
    return Log(
        address=_address(obj.get("address"), "log.address"),
        topics=tuple(_hash(t, "log topic") for t in topics),
        data=_bytes(obj.get("data"), "log.data"),
        log_index=_qty(obj.get("logIndex"), "log.logIndex"),
        block_number=_opt_qty(obj.get("blockNumber"), "log.blockNumber"),
        tx_hash=_hash(obj.get("transactionHash"), "log.transactionHash"),
        removed=bool(obj.get("removed", False)),
    )


def parse_receipt(raw: Any) -> Receipt:
    obj = _object(raw, "receipt")
    logs = _list(obj.get("logs"), "receipt.logs")
    return Receipt(
        tx_hash=_hash(obj.get("transactionHash"), "receipt.transactionHash"),
        status=_qty(obj.get("status"), "receipt.status"),
        block_number=_qty(obj.get("blockNumber"), "receipt.blockNumber"),
        block_hash=_hash(obj.get("blockHash"), "receipt.blockHash"),
        sender=_address(obj.get("from"), "receipt.from"),
        to=_opt_address(obj.get("to"), "receipt.to"),
        logs=tuple(parse_log(log) for log in logs),
        gas_used=_qty(obj.get("gasUsed"), "receipt.gasUsed"),
        effective_gas_price=_qty(obj.get("effectiveGasPrice"), "receipt.effectiveGasPrice"),
        contract_address=_opt_address(obj.get("contractAddress"), "receipt.contractAddress"),
    )


def parse_transaction(raw: Any) -> Transaction:
    obj = _object(raw, "transaction")
    block_hash = obj.get("blockHash")
    return Transaction(
        tx_hash=_hash(obj.get("hash"), "transaction.hash"),
        nonce=_qty(obj.get("nonce"), "transaction.nonce"),
        sender=_address(obj.get("from"), "transaction.from"),
        to=_opt_address(obj.get("to"), "transaction.to"),
        value=_qty(obj.get("value"), "transaction.value"),
        data=_bytes(obj.get("input", "0x"), "transaction.input"),
        gas=_qty(obj.get("gas"), "transaction.gas"),
        type=_qty(obj.get("type", "0x0"), "transaction.type"),
        max_fee_per_gas=_opt_qty(obj.get("maxFeePerGas"), "transaction.maxFeePerGas"),
        max_priority_fee_per_gas=_opt_qty(
            obj.get("maxPriorityFeePerGas"), "transaction.maxPriorityFeePerGas"
        ),
        block_number=_opt_qty(obj.get("blockNumber"), "transaction.blockNumber"),
        block_hash=None if block_hash is None else _hash(block_hash, "transaction.blockHash"),
    )


def parse_block(raw: Any) -> Block:
    obj = _object(raw, "block")
    txs = _list(obj.get("transactions", []), "block.transactions")
    return Block(
        number=_qty(obj.get("number"), "block.number"),
        hash=_hash(obj.get("hash"), "block.hash"),
        parent_hash=_hash(obj.get("parentHash"), "block.parentHash"),
        timestamp=_qty(obj.get("timestamp"), "block.timestamp"),
        base_fee_per_gas=_opt_qty(obj.get("baseFeePerGas"), "block.baseFeePerGas"),
        tx_hashes=tuple(_hash(t, "block transaction") for t in txs if isinstance(t, str)),
    )


def _json_depth_ok(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``body`` nests at most ``limit`` arrays/objects (brackets inside
    strings are skipped). A body with at most 512 brackets in all cannot nest
    deep enough to hurt and is not scanned (a receipt); the scan costs about
    0.3 s for an 8 MB eth_getLogs answer."""
    if body.count(b"[") + body.count(b"{") <= 512:
        return True
    depth = 0
    for match in re.finditer(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return False
        elif token in (b"]", b"}"):
            depth -= 1
    return True


def _block_param(tag_or_number: int | str) -> str:
    if isinstance(tag_or_number, int):
        if tag_or_number < 0:
            raise ValueError(f"a block number is not negative: {tag_or_number}")
        return hex(tag_or_number)
    if tag_or_number not in ("latest", "safe", "finalized", "pending", "earliest"):
        raise ValueError(f"unknown block tag {tag_or_number!r}")
    return tag_or_number


def _checked_address(address: str) -> str:
    text = address.lower()
    if not _ADDRESS.fullmatch(text):
        raise ValueError(f"not an address (0x + 40 hex digits): {address[:60]!r}")
    return text


def _checked_hash(tx_hash: str) -> str:
    text = tx_hash.lower()
    if not _HASH.fullmatch(text):
        raise ValueError(f"not a transaction hash (0x + 64 hex digits): {tx_hash[:80]!r}")
    return text


def _fail(waiting: Sequence[_Gathered | _LogSearch | _Call], exc: BaseException) -> None:
    """``exc`` given to each of ``waiting`` still waiting."""
    for w in waiting:
        if not w.answer.done():
            w.answer.set_exception(exc)


async def _settle(waiting: _Gathered | _Call, answer: Awaitable[Any]) -> None:
    """``answer`` (the read or call alone) given to ``waiting``'s waiter, or
    its failure."""
    try:
        out = await answer
    except Exception as exc:
        if not waiting.answer.done():
            waiting.answer.set_exception(exc)
        return
    if not waiting.answer.done():
        waiting.answer.set_result(out)


def _result(answer: Mapping[str, Any], method: str, where: str, status: int) -> Any:
    """One JSON-RPC answer's result (None when the node answers null), or the
    error it says (RpcError), or RpcBadResponse for one that says neither."""
    if "error" in answer and answer["error"] is not None:
        error = answer["error"]
        if not isinstance(error, dict):
            raise RpcBadResponse(f"{where}: HTTP {status}, an error that is not an object")
        code = error.get("code")
        message = str(error.get("message", ""))[:500]
        raise RpcError(
            code if isinstance(code, int) else 0,
            message,
            classify(message),
            method=method,
            data=error.get("data"),
        )
    if status >= 400:
        raise RpcBadResponse(f"{where}: HTTP {status} without a JSON-RPC error")
    if "result" not in answer:
        raise RpcBadResponse(f"{where}: the answer has neither result nor error")
    return answer["result"]


# -- the client ------------------------------------------------------------------------


@dataclass
class _Gathered:
    """One shared read waiting for its moment's aggregate3: the call in it
    (``target``, ``data``), the read alone (when the chain has no Multicall3,
    or it is the moment's only one), and where its answer goes."""

    target: str
    data: bytes
    alone: Callable[[], Awaitable[bytes]]
    answer: asyncio.Future[bytes]


@dataclass
class _Call:
    """One JSON-RPC call waiting for its moment's batch."""

    method: str
    params: list[Any]
    answer: asyncio.Future[Any]


@dataclass
class _LogSearch:
    """One eth_getLogs search waiting for its moment's: its topics (each one
    hash, any of a list, or None), its first block, and where its logs go."""

    topics: list[str | list[str] | None]
    from_block: int
    answer: asyncio.Future[list[Log]]

    def matches(self, log: Log) -> bool:
        """Whether ``log`` is one this search alone would have been answered."""
        if log.block_number is not None and log.block_number < self.from_block:
            return False
        for at, wanted in enumerate(self.topics):
            if wanted is None:
                continue
            if at >= len(log.topics):
                return False
            if log.topics[at] not in ([wanted] if isinstance(wanted, str) else wanted):
                return False
        return True


class EvmRpc(HttpEndpoint):
    """One node's JSON-RPC; its httpx client, circuit and deadline as HttpEndpoint's."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        client: httpx.AsyncClient | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        circuit: Circuit | None = None,
        budget: EndpointBudget | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an RPC URL is http(s)://host[:port]/...: {redact_url(url)}")
        self._url = url
        self.display_url = redact_url(url)
        self._timeout = timeout
        super().__init__(
            url,
            self.display_url,
            timeout=timeout,
            client=client,
            circuit=circuit,
            budget=budget,
            budget_kind="rpc",
        )
        self._max_bytes = max_response_bytes
        self._ids = itertools.count(1)
        self._recent: OrderedDict[str, tuple[Any, float]] = OrderedDict()
        self._reading: dict[str, asyncio.Task[Any]] = {}
        self._gathered: list[_Gathered] = []
        self._flushing: set[asyncio.Task[None]] = set()
        self._log_searches: dict[tuple[str, int], list[_LogSearch]] = {}
        self._multicall: bool | None = None
        """Whether MULTICALL3 answers on this chain (None: not asked yet)."""
        self._calls: list[_Call] = []
        self._batching: bool | None = None
        """Whether the provider answers JSON-RPC batches (None: not asked yet)."""
        self.settled: OrderedDict[str, Any] = OrderedDict()
        """What a caller learnt of a transaction that can no longer change (a
        receipt at its chain's finality depth), by hash, kept so that it is
        not read again (``keep_settled``, ``settled_of``)."""

    def __repr__(self) -> str:
        return f"EvmRpc({self.display_url!r})"

    # -- transport -------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        """``text`` (an httpx message) with the URL and its secret parts replaced."""
        parts = urlsplit(self._url)
        secrets = [self._url, parts.query, parts.fragment, parts.username, parts.password]
        secrets += [seg for seg in parts.path.split("/") if _KEYLIKE_SEGMENT.fullmatch(seg)]
        for secret in sorted((s for s in secrets if s), key=len, reverse=True):
            text = text.replace(secret, "***")
        return text[:300]

    async def request(self, method: str, params: Sequence[Any] = ()) -> Any:
        """One JSON-RPC call: its ``result`` (None when the node answers null).
        Not sent while the endpoint's circuit is open (qtg_runner.circuit):
        RpcUnavailable at once; nor without a turn of the endpoint's budget
        within DEFAULT_MAX_WAIT_S (qtg_runner.budget): RpcThrottled."""
        refusal = self.circuit.refusal(self._probe)
        if refusal is not None:
            raise RpcUnavailable(f"{method} on {self.display_url}: {refusal}")
        if method not in ALONE and self._batching is not False:
            return await self._batched(method, params)
        await self._turn(method)
        try:
            return await self._exchange(method, params)
        finally:
            self.budget.done()

    async def _turn(self, method: str) -> None:
        """A turn of the endpoint's budget for one call (a batch takes one a
        call: providers meter the calls in a batch); RpcThrottled without one
        within DEFAULT_MAX_WAIT_S. Every turn is followed by budget.done()."""
        try:
            await self.budget.acquire()
        except EndpointThrottled as exc:
            raise RpcThrottled(f"{method} on {self.display_url}: {exc}", exc.wait_s) from None

    async def _batched(self, method: str, params: Sequence[Any]) -> Any:
        """The call's answer, asked in this moment's JSON-RPC batch."""
        answer = self._joining(self._calls, self._send_calls)
        self._calls.append(_Call(method, list(params), answer))
        return await answer

    def _joining(
        self,
        pending: list[_Gathered] | list[_Call],
        flush: Callable[[], Coroutine[Any, Any, None]],
    ) -> asyncio.Future[Any]:
        """A waiter for one more of this moment's ``pending``; the moment's
        first schedules ``flush``, which takes them all."""
        loop = asyncio.get_running_loop()
        if pending and pending[0].answer.get_loop() is not loop:
            pending.clear()  # a closed loop's moment: its waiters are gone
        if not pending:
            loop.call_soon(self._start, flush)
        return loop.create_future()

    def _start(self, flush: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """``flush()`` (a moment's calls, reads or log searches sent) as a task
        of the running loop, kept until it ends."""
        task = asyncio.get_running_loop().create_task(flush())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _send_calls(self) -> None:
        # a moment is a few turns of the loop: a read asked through a shared
        # cache (``recent``) or a gathered one reaches request() a turn or two
        # after the calls asked beside it
        for _ in range(MOMENT_TURNS):
            await asyncio.sleep(0)
        moment, self._calls = self._calls, []
        for at in range(0, len(moment), MAX_BATCH):
            turned: list[_Call] = []
            for call in moment[at : at + MAX_BATCH]:
                if call.answer.done():
                    continue
                try:
                    await self._turn(call.method)
                except RpcThrottled as exc:
                    call.answer.set_exception(exc)
                    continue
                turned.append(call)
            try:
                await self._send_batch(turned)
            finally:
                for _ in turned:
                    self.budget.done()

    async def _send_batch(self, calls: Sequence[_Call]) -> None:
        """``calls`` (each holding a turn) as one batch, or each alone."""
        if len(calls) < 2 or self._batching is False:
            await self._each_alone(calls)
            return
        try:
            answers = await self._exchange_batch(calls)
        except Exception as exc:  # every call fails as it would have alone
            _fail(calls, exc)
            return
        if answers is None:  # batches refused: each alone, from now on
            self._batching = False
            await self._each_alone(calls)
            return
        self._batching = True
        for call, answer in zip(calls, answers, strict=True):
            if call.answer.done():
                continue
            if isinstance(answer, Exception):
                call.answer.set_exception(answer)
            else:
                call.answer.set_result(answer)

    async def _each_alone(self, calls: Sequence[_Call]) -> None:
        await asyncio.gather(*(_settle(c, self._exchange(c.method, c.params)) for c in calls))

    async def _exchange_batch(self, calls: Sequence[_Call]) -> list[Any] | None:
        """One HTTP request for ``calls``: each one's result, or the error it
        alone would have raised, by its id; None when the provider answers the
        batch with anything but a JSON array (it does not take batches)."""
        ids = [next(self._ids) for _ in calls]
        payload = [
            {"jsonrpc": "2.0", "id": i, "method": c.method, "params": c.params}
            for i, c in zip(ids, calls, strict=True)
        ]
        methods = ", ".join(sorted({c.method for c in calls}))
        where = f"a batch of {len(calls)} ({methods}) on {self.display_url}"
        body, status = await self._posted(payload, where)
        if not _json_depth_ok(body):
            raise RpcBadResponse(f"{where}: HTTP {status}, JSON nested too deeply")
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, list):
            return None
        by_id = {a.get("id"): a for a in answer if isinstance(a, dict)}
        results: list[Any] = []
        for i, call in zip(ids, calls, strict=True):
            one = f"{call.method} on {self.display_url}"
            found = by_id.get(i)
            if found is None:
                results.append(RpcBadResponse(f"{one}: the batch's answer has none for it"))
                continue
            try:
                results.append(_result(found, call.method, one, status))
            except EvmRpcError as exc:
                results.append(exc)
        return results

    async def _posted(self, payload: Any, where: str) -> tuple[bytes, int]:
        """POST ``payload``, the circuit told of the answer or the silence:
        the body and status; RpcUnavailable for no answer or a
        server error, RpcThrottled for a 429 (the endpoint's budget slowed)."""
        try:
            # httpx's timeout bounds each read; the circuit's watch the whole
            # exchange (a node that drips its answer byte by byte)
            async with self.circuit.watching(self._deadline):
                body, status, retry_after = await self._post(payload, where)
        except (httpx.TimeoutException, TimeoutError) as exc:
            raise RpcUnavailable(
                f"{where}: no answer within {self._timeout}s ({type(exc).__name__})"
            ) from None
        except httpx.TransportError as exc:
            raise RpcUnavailable(
                f"{where}: {type(exc).__name__}: {self._scrub(str(exc)) or 'transport error'}"
            ) from None
        except httpx.HTTPError as exc:
            raise RpcUnavailable(f"{where}: {type(exc).__name__}") from None
        if status == 429:
            pause = self.budget.slowed(retry_after)
            raise RpcThrottled(f"{where}: HTTP 429, the endpoint paused {pause:.0f} s", pause)
        if status >= 500:
            raise RpcUnavailable(f"{where}: HTTP {status}")
        return body, status

    async def _probe(self) -> None:
        await self._exchange("eth_chainId", ())

    async def _exchange(self, method: str, params: Sequence[Any]) -> Any:
        """The call itself, alone in its request, its answer or silence told
        to the circuit."""
        request_id = next(self._ids)
        payload = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": list(params)}
        where = f"{method} on {self.display_url}"
        body, status = await self._posted(payload, where)
        answer = self._decode(body, where, status)
        result = _result(answer, method, where, status)
        if answer.get("id") != request_id:
            raise RpcBadResponse(f"{where}: the answer is for another request id")
        return result

    async def _post(self, payload: Any, where: str) -> tuple[bytes, int, float | None]:
        """POST ``payload``: the answer's body (at most the bound), status and
        Retry-After (seconds, when it says a number of them)."""
        async with self._client.stream(
            "POST", self._url, json=payload, timeout=self._timeout
        ) as response:
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self._max_bytes:
                raise RpcBadResponse(
                    f"{where}: the answer ({declared} bytes) is larger than {self._max_bytes} bytes"
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self._max_bytes:
                    raise RpcBadResponse(
                        f"{where}: the answer is larger than {self._max_bytes} bytes"
                    )
                chunks.append(chunk)
            return b"".join(chunks), response.status_code, retry_after_s(response.headers)

    def _decode(self, body: bytes, where: str, status: int) -> dict[str, Any]:
        if not _json_depth_ok(body):
            raise RpcBadResponse(f"{where}: HTTP {status}, JSON nested too deeply")
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            if status >= 400:
                raise RpcBadResponse(f"{where}: HTTP {status}") from None
            raise RpcBadResponse(f"{where}: HTTP {status}, the answer is not JSON") from None
        if not isinstance(answer, dict):
            raise RpcBadResponse(f"{where}: HTTP {status}, the answer is not a JSON object")
        return answer

    # -- reads -----------------------------------------------------------------

    async def chain_id(self) -> int:
        return _qty(await self.request("eth_chainId"), "eth_chainId")

    async def block_number(self) -> int:
        return _qty(await self.request("eth_blockNumber"), "eth_blockNumber")

    async def head(self, max_age_s: float) -> int:
        """The chain's head, read at most once per ``max_age_s`` (``recent``):
        the nodes of one chain observed in one round read it once."""
        value: int = await self.recent("head", max_age_s, self.block_number)
        return value

    async def recent(self, key: str, max_age_s: float, read: Callable[[], Awaitable[Any]]) -> Any:
        """What ``read`` returned last under ``key``, read again once older
        than ``max_age_s`` (from when that read began); callers asking while
        a read is under way share it, and its failure."""
        known = self._recent.get(key)
        if known is not None and time.monotonic() - known[1] <= max_age_s:
            return known[0]
        loop = asyncio.get_running_loop()
        task = self._reading.get(key)
        if task is None or task.done() or task.get_loop() is not loop:

            async def read_now() -> Any:
                began = time.monotonic()
                try:
                    value = await read()
                finally:
                    self._reading.pop(key, None)
                self._recent[key] = (value, began)
                self._recent.move_to_end(key)
                while len(self._recent) > RECENT_KEPT:
                    self._recent.popitem(last=False)
                return value

            task = self._reading[key] = loop.create_task(read_now())
        return await asyncio.shield(task)

    async def _gather(
        self, target: str, data: bytes, alone: Callable[[], Awaitable[bytes]]
    ) -> bytes:
        """A view's answer at the latest block, read with the others asked in
        this moment (one aggregate3 of MULTICALL3), or ``alone``."""
        answer: asyncio.Future[bytes] = self._joining(self._gathered, self._flush)
        self._gathered.append(_Gathered(target, data, alone, answer))
        return await answer

    async def _flush(self) -> None:
        moment, self._gathered = self._gathered, []
        for at in range(0, len(moment), MAX_GATHERED):
            reads = [g for g in moment[at : at + MAX_GATHERED] if not g.answer.done()]
            if len(reads) < 2 or self._multicall is False:
                await asyncio.gather(*(_settle(g, g.alone()) for g in reads))
                continue
            try:
                answers = await self._aggregate3(reads)
            except RpcError as exc:
                if exc.kind is not RpcErrorKind.REVERTED:  # a limit, a node's fault: each fails
                    _fail(reads, exc)
                    continue
                answers = None  # refused as a whole: another contract there
            except Exception as exc:  # every read fails as it would have alone
                _fail(reads, exc)
                continue
            if answers is None:  # no Multicall3 here: each alone, from now on
                self._multicall = False
                await asyncio.gather(*(_settle(g, g.alone()) for g in reads))
                continue
            self._multicall = True
            for g, (ok, out) in zip(reads, answers, strict=True):
                if ok and not g.answer.done():
                    g.answer.set_result(out)
            # a read that failed in the batch (a revert, or its share of gas
            # ran out) is asked alone: its own answer, never a guess (a
            # messenger without minFee() and a starved call look alike here)
            await asyncio.gather(
                *(
                    _settle(g, g.alone())
                    for g, (ok, _) in zip(reads, answers, strict=True)
                    if not ok
                )
            )

    async def _aggregate3(self, reads: Sequence[_Gathered]) -> list[tuple[bool, bytes]] | None:
        """The reads' (success, returnData) through MULTICALL3's aggregate3,
        each allowed to fail alone; None when the chain answers nothing there
        (no code) or not an aggregate3's answer; RpcError when it refuses the
        call as a whole (another contract there)."""
        data = _AGGREGATE3 + abi_encode(
            ["(address,bool,bytes)[]"], [[(g.target, True, g.data) for g in reads]]
        )
        call = {"to": MULTICALL3, "data": "0x" + data.hex()}
        out = _bytes(await self.request("eth_call", [call, "latest"]), "eth_call")
        if not out:
            return None
        try:
            (answers,) = abi_decode(["(bool,bytes)[]"], out)
        except Exception:
            return None
        if len(answers) != len(reads):
            return None
        return [(bool(ok), bytes(ret)) for ok, ret in answers]

    def keep_settled(self, tx_hash: str, reading: Any) -> None:
        """``reading`` of ``tx_hash`` kept: it can no longer change."""
        self.settled[tx_hash] = reading
        self.settled.move_to_end(tx_hash)
        while len(self.settled) > SETTLED_KEPT:
            self.settled.popitem(last=False)

    def settled_of(self, tx_hash: str) -> Any | None:
        """What ``keep_settled`` kept of ``tx_hash``, or None."""
        return self.settled.get(tx_hash)

    async def block(
        self, tag_or_number: int | BlockTag = "latest", *, max_age_s: float = 0.0
    ) -> Block | None:
        """The block (transaction hashes only), or None when the node has none
        such (a number beyond the head; ``safe``/``finalized`` before any); a
        numbered block read at most once per ``max_age_s`` (``recent``: the
        sends mined in one block, observed in one round, ask once)."""
        param = _block_param(tag_or_number)

        async def read() -> Block | None:
            raw = await self.request("eth_getBlockByNumber", [param, False])
            return None if raw is None else parse_block(raw)

        if max_age_s > 0 and isinstance(tag_or_number, int):
            found: Block | None = await self.recent(f"block:{param}", max_age_s, read)
            return found
        return await read()

    async def transaction_count(
        self, address: str, tag: NonceTag | BlockTag = "latest", *, max_age_s: float = 0.0
    ) -> int:
        """The account's next nonce: ``latest`` counts mined transactions only,
        ``pending`` also the node's pool; either read at most once per
        ``max_age_s`` (``recent``; a send from the account through this client
        forgets its pending count: ``sent_from``)."""
        params = [_checked_address(address), _block_param(tag)]

        async def read() -> int:
            return _qty(
                await self.request("eth_getTransactionCount", params), "eth_getTransactionCount"
            )

        if max_age_s > 0 and tag in ("pending", "latest"):
            value: int = await self.recent(f"{tag}:{params[0]}", max_age_s, read)
            return value
        return await read()

    def sent_from(self, address: str) -> None:
        """A transaction of ``address`` went out through this client: its
        pending count is read afresh next time."""
        self._recent.pop(f"pending:{_checked_address(address)}", None)

    async def balance(
        self, address: str, tag: BlockTag = "latest", *, max_age_s: float = 0.0
    ) -> int:
        """The account's ether balance in wei; the latest read at most once per
        ``max_age_s`` (``recent``)."""
        params = [_checked_address(address), _block_param(tag)]

        async def read() -> int:
            return _qty(await self.request("eth_getBalance", params), "eth_getBalance")

        async def alone() -> bytes:
            return (await read()).to_bytes(32, "big")

        async def gathered() -> int:
            word = _GET_ETH_BALANCE + bytes(12) + bytes.fromhex(params[0][2:])
            out = await self._gather(MULTICALL3, word, alone)
            if len(out) != 32:
                raise RpcBadResponse(f"getEthBalance on {self.display_url}: not one word")
            return int.from_bytes(out, "big")

        if max_age_s > 0 and tag == "latest":
            value: int = await self.recent(f"balance:{params[0]}", max_age_s, gathered)
            return value
        return await read()

    async def call(
        self,
        to: str,
        data: bytes,
        *,
        sender: str | None = None,
        tag: int | BlockTag = "latest",
        max_age_s: float = 0.0,
    ) -> bytes:
        """eth_call: what ``to`` returns for ``data`` (RpcError REVERTED on a
        revert); a call at the latest block without a sender read at most once
        per ``max_age_s`` (``recent``: the nodes prepared together ask once)."""
        call: dict[str, str] = {"to": _checked_address(to), "data": "0x" + data.hex()}
        if sender is not None:
            call["from"] = _checked_address(sender)

        async def read() -> bytes:
            return _bytes(await self.request("eth_call", [call, _block_param(tag)]), "eth_call")

        async def gathered() -> bytes:
            return await self._gather(call["to"], data, read)

        if max_age_s > 0 and tag == "latest" and sender is None:
            out: bytes = await self.recent(f"call:{call['to']}:{call['data']}", max_age_s, gathered)
            return out
        return await read()

    async def estimate_gas(self, sender: str, to: str, data: bytes = b"", value: int = 0) -> int:
        """eth_estimateGas for the call (RpcError REVERTED when it would revert)."""
        call = {
            "from": _checked_address(sender),
            "to": _checked_address(to),
            "data": "0x" + data.hex(),
            "value": hex(value),
        }
        return _qty(await self.request("eth_estimateGas", [call]), "eth_estimateGas")

    async def receipt(self, tx_hash: str) -> Receipt | None:
        """The receipt, or None: pending, unknown and dropped alike."""
        raw = await self.request("eth_getTransactionReceipt", [_checked_hash(tx_hash)])
        return None if raw is None else parse_receipt(raw)

    async def transaction(self, tx_hash: str) -> Transaction | None:
        """The transaction (mined or in the node's pool), or None when unknown."""
        raw = await self.request("eth_getTransactionByHash", [_checked_hash(tx_hash)])
        return None if raw is None else parse_transaction(raw)

    async def max_priority_fee(self) -> int:
        """The node's suggested priority fee (tip) per gas, in wei."""
        return _qty(await self.request("eth_maxPriorityFeePerGas"), "eth_maxPriorityFeePerGas")

    async def base_fee(self) -> int:
        """The latest block's base fee per gas (RpcBadResponse on a chain without EIP-1559)."""
        block = await self.block("latest")
        if block is None or block.base_fee_per_gas is None:
            raise RpcBadResponse(
                f"the latest block on {self.display_url} has no baseFeePerGas "
                "(a chain without EIP-1559?)"
            )
        return block.base_fee_per_gas

    async def get_logs(
        self,
        *,
        address: str,
        topics: Sequence[str | Sequence[str] | None],
        from_block: int | BlockTag,
        to_block: int | BlockTag = "latest",
    ) -> list[Log]:
        """eth_getLogs of one contract (a second source of evidence beside
        receipts). A topic is one hash, any of a list of them, or None (any)."""

        def topic(t: str | Sequence[str] | None) -> str | list[str] | None:
            if t is None or isinstance(t, str):
                return None if t is None else _checked_hash(t)
            return [_checked_hash(each) for each in t]

        checked = [topic(t) for t in topics]
        if isinstance(from_block, int) and to_block == "latest":
            return await self._gather_logs(_checked_address(address), checked, from_block)
        return await self._logs(_checked_address(address), checked, from_block, to_block)

    async def _logs(
        self,
        address: str,
        topics: Sequence[str | list[str] | None],
        from_block: int | BlockTag,
        to_block: int | BlockTag,
    ) -> list[Log]:
        query = {
            "address": address,
            "topics": list(topics),
            "fromBlock": _block_param(from_block),
            "toBlock": _block_param(to_block),
        }
        raw = await self.request("eth_getLogs", [query])
        if not isinstance(raw, list):
            raise RpcBadResponse("eth_getLogs did not answer a list")
        return [parse_log(entry) for entry in raw]

    async def _gather_logs(
        self, address: str, topics: list[str | list[str] | None], from_block: int
    ) -> list[Log]:
        """The logs of ``address`` from ``from_block`` to the head matching
        ``topics``, asked with the other such searches of the contract in this
        moment (the nodes a round observes) as ONE eth_getLogs: from the
        earliest of their blocks, each topic any of theirs; each search then
        keeps what matches it alone."""
        loop = asyncio.get_running_loop()
        key = (address, len(topics))
        moment = self._log_searches.get(key)
        if moment and moment[0].answer.get_loop() is not loop:
            moment = None  # a closed loop's moment: its searchers are gone
        if not moment:
            moment = self._log_searches[key] = []
            loop.call_soon(self._start, functools.partial(self._flush_logs, key))
        answer: asyncio.Future[list[Log]] = loop.create_future()
        moment.append(_LogSearch(topics, from_block, answer))
        return await answer

    async def _search_alone(self, address: str, search: _LogSearch) -> None:
        try:
            logs = await self._logs(address, search.topics, search.from_block, "latest")
        except Exception as exc:
            _fail([search], exc)
            return
        if not search.answer.done():
            search.answer.set_result(logs)

    async def _flush_logs(self, key: tuple[str, int]) -> None:
        searches = [s for s in self._log_searches.pop(key, []) if not s.answer.done()]
        if not searches:
            return
        merged: list[str | list[str] | None] = []
        for at in range(key[1]):
            wanted = [s.topics[at] for s in searches]
            if any(w is None for w in wanted):
                merged.append(None)
                continue
            union = sorted({t for w in wanted for t in ([w] if isinstance(w, str) else w or [])})
            merged.append(union[0] if len(union) == 1 else union)
        try:
            logs = await self._logs(key[0], merged, min(s.from_block for s in searches), "latest")
        except (RpcError, RpcBadResponse) as exc:
            if len(searches) == 1:
                _fail(searches, exc)
                return
            # refused for what the merge asked (a range or a result count past
            # the provider's bound, stretched by the oldest search): each
            # search alone, as it was asked, so that one cannot fail the others
            await asyncio.gather(*(self._search_alone(key[0], s) for s in searches))
            return
        except Exception as exc:
            _fail(searches, exc)
            return
        for s in searches:
            if not s.answer.done():
                s.answer.set_result([log for log in logs if s.matches(log)])

    # -- write -----------------------------------------------------------------

    async def send_raw_transaction(self, raw: bytes) -> str:
        """Broadcast a signed transaction; its hash as the node answers it."""
        if not raw:
            raise ValueError("an empty raw transaction")
        answer = await self.request("eth_sendRawTransaction", ["0x" + raw.hex()])
        return _hash(answer, "eth_sendRawTransaction")
