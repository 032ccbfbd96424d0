"""A Bybit v5 asset API client (withdrawals, deposits, the FUND balance, the
address book, coin info), async over httpx.

Each request is signed over the exact bytes it carries: a GET's query string as
httpx encodes it into the request line, a POST's JSON body as sent. The signature
is the lower-case hex HMAC-SHA256 with the API secret over timestamp + key +
recvWindow + that payload (``sign``). An answer with a retCode other than 0
raises BybitError(ret_code, message, retry_after); no v5 answer (a transport
error, an HTTP status other than 200, a body that is not the envelope) raises
BybitUnavailable. What a code means, and how long to wait before the same
request again (10006: until ``X-Bapi-Limit-Reset-Timestamp``), is the table of
qtg_runner.exchanges.bybit_codes; ``classify`` gives a failure's kind:
retryable, permanent (refused before anything was done) or unknown (whether
the request took effect is not said).

The API secret lives in an object whose repr is ``***``; it never enters a log
line, a repr or an exception message. ``request_id_for`` derives the requestId
(1-32 alphanumerics) from an intent's idempotency key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Generic, TypedDict, TypeVar, Unpack

import httpx

from qtg_runner.budget import EndpointBudget, EndpointThrottled
from qtg_runner.circuit import Circuit
from qtg_runner.endpoint import HttpEndpoint, retry_after_s
from qtg_runner.exchanges.bybit_codes import HTTP_STATUSES, Code, Kind, lookup
from qtg_runner.log import event

__all__ = [
    "WITHDRAWAL_TERMINAL",
    "AddressBookEntry",
    "BybitClient",
    "BybitError",
    "BybitUnavailable",
    "ChainTransferRecord",
    "CoinChain",
    "DepositAddress",
    "DepositPage",
    "DepositRecord",
    "WithdrawalPage",
    "WithdrawalRecord",
    "classify",
    "request_id_for",
    "sign",
]

DEFAULT_RECV_WINDOW = 5000

ADDRESS_BOOK_PAGES = 10
"""Pages of the address book (50 entries each) read looking for an address."""

WITHDRAWAL_TERMINAL = frozenset({"success", "Fail", "Reject", "CancelByUser"})

DEPOSIT_CREDITED = 3
DEPOSIT_FAILED = 4

R = TypeVar("R")


class _Secret:
    """The API secret: used to sign, never shown."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not value:
            raise ValueError("the API secret is empty")
        self._value = value.encode()

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("the API secret is not pickled")

    def mac(self, payload: bytes) -> str:
        return hmac.new(self._value, payload, hashlib.sha256).hexdigest()


class BybitError(Exception):
    """A v5 answer with a retCode other than 0. ``retry_after``: seconds to wait
    before the same request again, where the exchange said (10006's reset
    timestamp) or documents it (bybit_codes); ``code``: the table's row."""

    def __init__(self, ret_code: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(ret_code, message, retry_after)
        self.ret_code = ret_code
        self.message = message
        self.retry_after = retry_after

    @property
    def code(self) -> Code:
        return lookup(self.ret_code)

    def __str__(self) -> str:
        hint = f" (retry after {self.retry_after:.3f}s)" if self.retry_after is not None else ""
        return f"Bybit retCode {self.ret_code}: {self.message}{hint}"


class BybitUnavailable(Exception):
    """No v5 answer: a transport error, an HTTP status other than 200
    (``status``), or a body that is not the v5 envelope. The request may or may
    not have been applied, unless it was never sent (``sent``: refused here
    while the venue's circuit is open) or its status says it was not taken
    (bybit_codes.HTTP_STATUSES, with the wait in ``retry_after``).
    ``throttled``: not sent for the venue's request budget, or refused with
    HTTP 429: the venue's limit, nothing of the request's."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        sent: bool = True,
        retry_after: float | None = None,
        throttled: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.sent = sent
        self.retry_after = retry_after
        self.throttled = throttled or status == 429


def classify(exc: BaseException) -> Kind:
    """What a failed call means (bybit_codes.Kind). A retCode: its row in the
    table, UNKNOWN for a code the table does not have. No v5 answer: UNKNOWN
    (the request may have been applied), but RETRYABLE when it was never sent
    or its HTTP status says it was not taken. Anything else was raised here
    before sending (a bad amount): PERMANENT."""
    if isinstance(exc, BybitError):
        return exc.code.kind
    if isinstance(exc, BybitUnavailable):
        if not exc.sent:
            return Kind.RETRYABLE
        if exc.status is not None and exc.status in HTTP_STATUSES:
            return HTTP_STATUSES[exc.status].kind
        return Kind.UNKNOWN
    if isinstance(exc, httpx.TransportError):
        return Kind.UNKNOWN
    return Kind.PERMANENT


def request_id_for(idempotency_key: str) -> str:
    """The withdrawal requestId for an intent's idempotency key: the first 32 hex
    digits of its SHA-256 (alphanumeric, stable across processes and releases)."""
    if not idempotency_key:
        raise ValueError("an idempotency key is not empty")
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


def sign(secret: str, timestamp: str, api_key: str, recv_window: str, payload: bytes) -> str:
    """The v5 signature (for tests and the double; the client signs with its own)."""
    return _Secret(secret).mac(
        timestamp.encode() + api_key.encode() + recv_window.encode() + payload
    )


PLAIN_DECIMAL = re.compile(r"[0-9]{1,30}(\.[0-9]{1,30})?")
"""How the venue writes an amount: digits, a point and digits; never an
exponent, a sign, NaN or a JSON float."""


def _decimal(value: Any, what: str) -> Decimal:
    """A venue's amount as it writes it (PLAIN_DECIMAL), or BybitUnavailable: a
    loose number (1e3, -5, NaN, a float's rounding) is never money."""
    if not isinstance(value, str) or not PLAIN_DECIMAL.fullmatch(value):
        raise BybitUnavailable(f"{what} is not a plain decimal string: {str(value)[:40]!r}")
    try:
        return Decimal(value)
    except InvalidOperation:
        raise BybitUnavailable(f"{what} is not a number: {value[:40]!r}") from None


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class ChainTransferRecord:
    """What a withdrawal's record and a deposit's both say, read from the
    venue's row the same way: the coin and its chain, the amount, the chain's
    transaction id ("" until there is one) and the address the coins went to."""

    coin: str
    chain: str
    amount: Decimal
    tx_id: str
    to_address: str

    @staticmethod
    def transfer_fields(row: Mapping[str, Any]) -> dict[str, Any]:
        """The fields above from a withdrawal's or a deposit's row."""
        return {
            "coin": str(row.get("coin", "")),
            "chain": str(row.get("chain", "")),
            "amount": _decimal(row.get("amount", "0"), "amount"),
            "tx_id": str(row.get("txID") or ""),
            "to_address": str(row.get("toAddress", "")),
        }


@dataclass(frozen=True)
class WithdrawalRecord(ChainTransferRecord):
    withdraw_id: str
    fee: Decimal
    status: str
    create_time_ms: int
    update_time_ms: int

    @property
    def terminal(self) -> bool:
        return self.status in WITHDRAWAL_TERMINAL

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WithdrawalRecord:
        return cls(
            **cls.transfer_fields(row),
            withdraw_id=str(row.get("withdrawId", "")),
            fee=_decimal(row.get("withdrawFee") or "0", "withdrawFee"),
            status=str(row.get("status", "")),
            create_time_ms=_int(row.get("createTime")),
            update_time_ms=_int(row.get("updateTime")),
        )


class RecordQuery(TypedDict, total=False):
    """What a query-record call (withdrawals, deposits) filters on, and its page."""

    coin: str | None
    start_time_ms: int | None
    end_time_ms: int | None
    limit: int | None
    cursor: str | None


@dataclass(frozen=True)
class Page(Generic[R]):
    """One page of a query-record: its rows and the next page's cursor ("" for none)."""

    rows: list[R]
    next_cursor: str


WithdrawalPage = Page[WithdrawalRecord]


@dataclass(frozen=True)
class DepositRecord(ChainTransferRecord):
    status: int
    """0 unknown, 1 to be confirmed, 2 processing, 3 success (credited), 4 failed."""
    confirmations: int
    success_at_ms: int
    log_index: int

    @property
    def credited(self) -> bool:
        return self.status == DEPOSIT_CREDITED

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DepositRecord:
        return cls(
            **cls.transfer_fields(row),
            status=_int(row.get("status")),
            confirmations=_int(row.get("confirmations")),
            success_at_ms=_int(row.get("successAt")),
            log_index=_int(row.get("txIndex"), -1),
        )


DepositPage = Page[DepositRecord]


@dataclass(frozen=True)
class DepositAddress:
    chain: str
    chain_type: str
    address: str
    tag: str


@dataclass(frozen=True)
class AddressBookEntry:
    """A withdrawal address of the account's address book
    (GET /v5/asset/withdraw/query-address). ``coin`` "baseCoin" is a universal
    address (any coin of the chain). ``address`` is spelled as the book holds
    it: withdraw/create compares it case-sensitively."""

    coin: str
    chain: str
    address: str
    tag: str
    status: int
    """0 normal; 1 a new address, no withdrawal to it for 24 hours."""
    verified: bool


@dataclass(frozen=True)
class CoinChain:
    """One chain of a coin (GET /v5/asset/coin/query-info)."""

    coin: str
    chain: str
    chain_type: str
    confirmation: int
    withdraw_fee: Decimal | None
    """None: the coin cannot be withdrawn on this chain (the docs' empty fee)."""
    withdraw_min: Decimal
    withdraw_max: Decimal | None
    """None: no limit (the docs' -1)."""
    min_accuracy: int
    deposit_open: bool
    withdraw_open: bool
    contract_address: str


def _amount_text(amount: Decimal) -> str:
    if not amount.is_finite() or amount <= 0:
        raise ValueError(f"a withdrawal amount is positive: {amount}")
    return format(amount.normalize(), "f")


class BybitClient(HttpEndpoint):
    """One API key's client; its httpx client, circuit and deadline as
    HttpEndpoint's. ``clock`` returns the time in seconds (time.time): the
    X-BAPI-TIMESTAMP source."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        api_secret: str,
        *,
        recv_window: int = DEFAULT_RECV_WINDOW,
        timeout: float = 10.0,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
        circuit: Circuit | None = None,
        budget: EndpointBudget | None = None,
    ) -> None:
        if not api_key:
            raise ValueError("the API key is empty")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._secret = _Secret(api_secret)
        self.recv_window = recv_window
        self._clock = clock
        super().__init__(
            self.base_url,
            f"Bybit at {self.base_url}",
            timeout=timeout,
            client=client,
            circuit=circuit,
            budget=budget,
            budget_kind="venue",
        )

    def __repr__(self) -> str:
        return f"BybitClient({self.base_url!r}, key={self.api_key!r})"

    # -- transport -------------------------------------------------------------

    def _signed(self, request: httpx.Request, payload: bytes) -> httpx.Request:
        timestamp = str(int(self._clock() * 1000))
        window = str(self.recv_window)
        request.headers["X-BAPI-API-KEY"] = self.api_key
        request.headers["X-BAPI-TIMESTAMP"] = timestamp
        request.headers["X-BAPI-RECV-WINDOW"] = window
        request.headers["X-BAPI-SIGN"] = self._secret.mac(
            timestamp.encode() + self.api_key.encode() + window.encode() + payload
        )
        return request

    async def _call(self, request: httpx.Request, path: str) -> dict[str, Any]:
        """One request, not sent while the venue's circuit is open
        (qtg_runner.circuit), nor without a turn of its request budget
        (qtg_runner.budget): BybitUnavailable at once. An HTTP 429 slows the
        budget for every caller of the venue in the process."""
        refusal = self.circuit.refusal(self._probe)
        if refusal is not None:
            raise BybitUnavailable(f"{request.method} {path}: {refusal}", sent=False)
        try:
            await self.budget.acquire()
        except EndpointThrottled as exc:
            raise BybitUnavailable(
                f"{request.method} {path}: {exc}",
                sent=False,
                retry_after=exc.wait_s,
                throttled=True,
            ) from None
        try:
            response = await self._send(request, path)
        finally:
            self.budget.done()
        if response.status_code == 429:
            self.budget.slowed(retry_after_s(response.headers))
        if response.status_code != 200:
            known = HTTP_STATUSES.get(response.status_code)
            raise BybitUnavailable(
                f"{request.method} {path}: HTTP {response.status_code}"
                + (f" ({known.meaning})" if known else ""),
                status=response.status_code,
                retry_after=known.wait_s if known else None,
            )
        try:
            body = response.json()
            code = int(body["retCode"])
            message = str(body.get("retMsg", ""))[:200]
        except (ValueError, KeyError, TypeError):
            raise BybitUnavailable(f"{request.method} {path}: not a v5 envelope") from None
        if code != 0:
            row = lookup(code)
            retry_after = row.wait_s
            if row.reset_header:
                reset = _int(response.headers.get("X-Bapi-Limit-Reset-Timestamp"), 0)
                server_ms = _int(body.get("time"), int(self._clock() * 1000))
                retry_after = max(0.0, (reset - server_ms) / 1000) if reset else 1.0
            event(
                logging.INFO,
                "bybit_refused",
                path=path,
                ret_code=code,
                kind=row.kind.value,
                message=message,
            )
            raise BybitError(code, message, retry_after)
        result = body.get("result")
        if not isinstance(result, dict):
            raise BybitUnavailable(f"{request.method} {path}: the result is not an object")
        return result

    async def _send(self, request: httpx.Request, path: str) -> httpx.Response:
        """The request itself, its answer or silence told to the circuit."""
        try:
            async with self.circuit.watching(self._deadline):
                return await self._client.send(request)
        except TimeoutError:
            raise BybitUnavailable(
                f"{request.method} {path}: no whole answer within {self._deadline:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise BybitUnavailable(f"{request.method} {path}: {type(exc).__name__}") from None

    async def _probe(self) -> None:
        path = "/v5/market/time"
        await self._send(self._client.build_request("GET", self.base_url + path), path)

    async def _get(self, path: str, params: Mapping[str, Any]) -> dict[str, Any]:
        query = {k: str(v) for k, v in params.items() if v is not None}
        request = self._client.build_request("GET", self.base_url + path, params=query)
        # what goes on the request line, byte for byte
        return await self._call(self._signed(request, request.url.query), path)

    async def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        raw = json.dumps(body, separators=(",", ":")).encode()
        request = self._client.build_request(
            "POST",
            self.base_url + path,
            content=raw,
            headers={"Content-Type": "application/json"},
        )
        return await self._call(self._signed(request, raw), path)

    # -- calls -----------------------------------------------------------------

    async def withdraw(
        self,
        *,
        coin: str,
        chain: str,
        address: str,
        amount: Decimal,
        request_id: str,
        account_type: str = "FUND",
        force_chain: int = 1,
    ) -> str:
        """POST /v5/asset/withdraw/create: the withdrawal's id. ``force_chain`` 1:
        always on chain (never an internal transfer to another Bybit user)."""
        result = await self._post(
            "/v5/asset/withdraw/create",
            {
                "coin": coin,
                "chain": chain,
                "address": address,
                "amount": _amount_text(amount),
                "timestamp": int(self._clock() * 1000),
                "forceChain": force_chain,
                "accountType": account_type,
                "requestId": request_id,
            },
        )
        if not result.get("id"):
            raise BybitUnavailable("withdraw/create answered no id")
        return str(result["id"])

    async def withdrawals(
        self,
        *,
        withdraw_id: str | None = None,
        tx_id: str | None = None,
        **query: Unpack[RecordQuery],
    ) -> WithdrawalPage:
        """GET /v5/asset/withdraw/query-record (on-chain withdrawals, newest first)."""
        filters = {"withdrawID": withdraw_id, "txID": tx_id}
        rows, cursor = await self._records("/v5/asset/withdraw/query-record", filters, query)
        return WithdrawalPage([WithdrawalRecord.from_row(r) for r in rows], cursor)

    async def withdrawal(self, withdraw_id: str) -> WithdrawalRecord | None:
        """One withdrawal by its id (None when the exchange has none)."""
        page = await self.withdrawals(withdraw_id=withdraw_id)
        return next((r for r in page.rows if r.withdraw_id == withdraw_id), None)

    async def deposits(
        self,
        *,
        deposit_id: str | None = None,
        tx_id: str | None = None,
        **query: Unpack[RecordQuery],
    ) -> DepositPage:
        """GET /v5/asset/deposit/query-record (on-chain deposits, newest first;
        ``tx_id`` keeps one transaction's, ``deposit_id`` one record)."""
        filters = {"id": deposit_id, "txID": tx_id}
        rows, cursor = await self._records("/v5/asset/deposit/query-record", filters, query)
        return DepositPage([DepositRecord.from_row(r) for r in rows], cursor)

    async def _records(
        self, path: str, filters: Mapping[str, Any], query: RecordQuery
    ) -> tuple[list[Any], str]:
        """A query-record page: its rows and the next page's cursor ("" for none)."""
        result = await self._get(
            path,
            {
                **filters,
                "coin": query.get("coin"),
                "startTime": query.get("start_time_ms"),
                "endTime": query.get("end_time_ms"),
                "limit": query.get("limit"),
                "cursor": query.get("cursor") or None,
            },
        )
        return list(result.get("rows") or []), str(result.get("nextPageCursor") or "")

    async def deposit_addresses(
        self, coin: str, chain_type: str | None = None
    ) -> list[DepositAddress]:
        """GET /v5/asset/deposit/query-address."""
        result = await self._get(
            "/v5/asset/deposit/query-address", {"coin": coin, "chainType": chain_type}
        )
        chains = result.get("chains") or []
        return [
            DepositAddress(
                chain=str(c.get("chain", "")),
                chain_type=str(c.get("chainType", "")),
                address=str(c.get("addressDeposit", "")),
                tag=str(c.get("tagDeposit") or ""),
            )
            for c in chains
        ]

    async def address_book(
        self, *, chain: str | None = None, coin: str | None = None
    ) -> list[AddressBookEntry]:
        """GET /v5/asset/withdraw/query-address: the withdrawal address book (on
        ``chain``, with its universal addresses; or for ``coin``), every page up
        to ADDRESS_BOOK_PAGES."""
        entries: list[AddressBookEntry] = []
        cursor: str | None = None
        for _ in range(ADDRESS_BOOK_PAGES):
            result = await self._get(
                "/v5/asset/withdraw/query-address",
                {"coin": coin, "chain": chain, "limit": 50, "cursor": cursor},
            )
            entries.extend(
                AddressBookEntry(
                    coin=str(row.get("coin", "")),
                    chain=str(row.get("chain", "")),
                    address=str(row.get("address", "")),
                    tag=str(row.get("tag") or ""),
                    status=_int(row.get("status")),
                    verified=_int(row.get("verified")) == 1,
                )
                for row in result.get("rows") or []
            )
            cursor = str(result.get("nextPageCursor") or "") or None
            if cursor is None:
                break
        return entries

    async def coin_info(self, coin: str) -> list[CoinChain]:
        """GET /v5/asset/coin/query-info: ``coin``'s chains, their fees, limits
        and whether deposits and withdrawals are open."""
        result = await self._get("/v5/asset/coin/query-info", {"coin": coin})
        chains: list[CoinChain] = []
        for row in result.get("rows") or []:
            if row.get("coin") != coin:
                continue
            for c in row.get("chains") or []:
                fee = str(c.get("withdrawFee") or "")
                most = str(c.get("withdrawMax") or "-1")
                chains.append(
                    CoinChain(
                        coin=coin,
                        chain=str(c.get("chain", "")),
                        chain_type=str(c.get("chainType", "")),
                        confirmation=_int(c.get("confirmation")),
                        withdraw_fee=_decimal(fee, "withdrawFee") if fee else None,
                        withdraw_min=_decimal(c.get("withdrawMin") or "0", "withdrawMin"),
                        withdraw_max=None if most == "-1" else _decimal(most, "withdrawMax"),
                        min_accuracy=_int(c.get("minAccuracy")),
                        deposit_open=str(c.get("chainDeposit")) == "1",
                        withdraw_open=str(c.get("chainWithdraw")) == "1",
                        contract_address=str(c.get("contractAddress") or ""),
                    )
                )
        return chains

    async def server_time(self) -> int:
        """GET /v5/market/time (unsigned): the exchange's clock in milliseconds."""
        request = self._client.build_request("GET", self.base_url + "/v5/market/time")
        result = await self._call(request, "/v5/market/time")
        nano = _int(result.get("timeNano"), 0)
        return nano // 10**6 if nano else _int(result.get("timeSecond"), 0) * 1000

    async def fund_balance(self, coin: str) -> Decimal:
        """The FUND account's wallet balance of ``coin``
        (GET /v5/asset/transfer/query-account-coins-balance)."""
        result = await self._get(
            "/v5/asset/transfer/query-account-coins-balance",
            {"accountType": "FUND", "coin": coin},
        )
        for row in result.get("balance") or []:
            if row.get("coin") == coin:
                return _decimal(row.get("walletBalance") or "0", "walletBalance")
        return Decimal(0)
