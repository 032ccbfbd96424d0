"""A fake Bybit (v5 asset API) for the local outside world: a real HTTP server on
loopback that signs nothing of its own but checks every request's HMAC, keeps a
FUND account per API key's owner (one owner here), and moves real USDC on the
local chains from a hot wallet of its own.

Authentication (every /v5 path but /v5/market/time): ``X-BAPI-API-KEY``,
``X-BAPI-TIMESTAMP`` (ms), ``X-BAPI-RECV-WINDOW`` (default 5000) and
``X-BAPI-SIGN``, the lower-case hex HMAC-SHA256 with the key's secret over
timestamp + key + recvWindow + X, X being the raw query string of a GET (as
received, without ``?``) or the raw body bytes of a POST. Checked in this order:

    10003  unknown key (or no key header)
    10006  more than the path's limit within one second for the key, or injected
           (``X-Bapi-Limit-Status``, ``X-Bapi-Limit``, ``X-Bapi-Limit-Reset-Timestamp``
           on every answer; the reset is when a request is admitted again)
    10002  timestamp outside server_time - recvWindow <= ts < server_time + 1000
    10004  signature mismatch

Every answer is HTTP 200 with the v5 envelope ``{"retCode", "retMsg", "result",
"retExtInfo", "time"}``; each code and its message come from the engine's table
of Bybit's codes (qtg_runner.exchanges.bybit_codes, transcribed from
https://bybit-exchange.github.io/docs/v5/error). ``inject_error`` makes the next
requests of a path answer a code of the test's choosing (one Bybit does not
document, say) without doing anything.

Withdrawals (``POST /v5/asset/withdraw/create``): 10001 for a malformed request;
a repeated ``requestId`` answers the original id (``repeat_mode="original"``) or
131082 (``"error"``): the docs are silent, so both are here; then 90040 within
the documented interval (one withdrawal per chain and coin every 10 exchange
seconds, ``set_withdraw_interval``) after the key's last one, 131093 unless the
address is on the address book exactly as spelled (``whitelist``: Bybit compares
it case-sensitively), 131212 when the FUND balance is below amount + fee. The
amount (and fee) leave the balance at once and come back on Fail or Reject. The
address book reads at ``GET /v5/asset/withdraw/query-address`` (an address
whitelisted for any chain is a universal address, coin ``baseCoin``), the
coin's chains at ``GET /v5/asset/coin/query-info`` (``suspend_withdrawals``
closes a chain: chainWithdraw 0, and withdraw/create answers 131097). The walk,
each delay in exchange seconds times ``time_scale``:

    SecurityCheck --security_check_s--> Pending   (or Reject, when injected)
    Pending --pending_s--> the transfer is signed by the hot wallet and broadcast
        (txID recorded; or Fail, when injected: nothing is sent)
    Pending --receipt with withdraw_confirmations--> BlockchainConfirmed
    BlockchainConfirmed --confirmed_s--> success

Deposits: one deposit address per chain (``BybitChain.deposit_address``). A
watcher reads the USDC ``Transfer`` logs to it from the head at start; a deposit
is status 1 (to be confirmed) until ``deposit_confirmations`` blocks, then 2
(processing) for ``deposit_processing_s``, then 3 (success): credited to FUND.

The back office (the walk and the watcher) is one thread running an asyncio loop
that ticks every ``tick_s`` real seconds; the HTTP threads and it share the state
under one lock, and no chain call is made under it. No secret is ever logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from qtg_runner.chains.evm import (
    TRANSFER_TOPIC,
    EvmRpc,
    build_transfer,
    estimate_gas,
    normalize_address,
    sign,
    suggest_fees,
    transfer_calldata,
)
from qtg_runner.exchanges.bybit_codes import (
    BAD_SIGNATURE,
    INSUFFICIENT_BALANCE,
    INVALID_KEY,
    NOT_WHITELISTED,
    OUTSIDE_RECV_WINDOW,
    PARAMETER_ERROR,
    REPEATED_REQUEST,
    TOO_MANY_VISITS,
    WITHDRAW_INTERVAL,
    WITHDRAW_INTERVAL_S,
    WITHDRAWALS_CLOSED,
    lookup,
)
from qtg_runner.log import event
from qtg_runner.ports import LOOPBACK
from qtg_runner.signers import Signer
from qtg_world.chains.keys import LocalKey, ensure_treasury_keys
from qtg_world.chains.local import RunningChain
from qtg_world.json_http import JsonHandler

__all__ = [
    "EXCHANGE_KEYS",
    "BybitChain",
    "BybitConfig",
    "BybitHandle",
    "ExchangeKeys",
    "Outcome",
    "RepeatMode",
    "bybit_chain",
    "ensure_exchange_keys",
    "serve",
]

RepeatMode = Literal["original", "error"]
Outcome = Literal["Fail", "Reject"]

EXCHANGE_KEYS = ("local-bybit-hot", "local-bybit-deposit")
"""Keystore names of the exchange's hot wallet and of its deposit address's key."""

USDC_DECIMALS = 6
MAX_FEE_CAP = 1_000 * 10**9
PRIORITY_FEE_CAP = 5 * 10**9
THIRTY_DAYS_MS = 30 * 24 * 3600 * 1000

TERMINAL = frozenset({"success", "Fail", "Reject", "CancelByUser"})


def _message(code: int) -> str:
    return "OK" if code == 0 else lookup(code).meaning


@dataclass(frozen=True)
class BybitChain:
    """A local chain the exchange withdraws to and takes deposits from. ``name`` is
    Bybit's ``chain`` (and ``chainType``) for it."""

    name: str
    chain_id: int
    rpc_url: str
    usdc: str
    deposit_address: str
    deposit_confirmations: int = 2
    withdraw_confirmations: int = 1
    withdraw_fee: Decimal = Decimal(0)


def bybit_chain(chain: RunningChain, deposit_address: str, **options: Any) -> BybitChain:
    """The exchange's view of a started local chain (its MockUSDC as USDC)."""
    return BybitChain(
        name=chain.key,
        chain_id=chain.chain_id,
        rpc_url=chain.rpc_url,
        usdc=chain.contracts["MockUSDC"],
        deposit_address=deposit_address,
        **options,
    )


@dataclass(frozen=True)
class ExchangeKeys:
    hot: LocalKey
    deposit: LocalKey


def ensure_exchange_keys(state_dir: Path, kdf_iterations: int | None = None) -> ExchangeKeys:
    """The exchange's hot wallet and deposit key, kept in the chains' keystore beside
    the treasury keys (made where missing): signers ``keystore:local-bybit-hot`` and
    ``keystore:local-bybit-deposit``. Fund the hot wallet with
    qtg_world.chains.registry.fund_treasury(chain, [keys.hot])."""
    hot, deposit = ensure_treasury_keys(state_dir, EXCHANGE_KEYS, kdf_iterations=kdf_iterations)
    return ExchangeKeys(hot=hot, deposit=deposit)


@dataclass(frozen=True)
class BybitConfig:
    """How the fake exchange behaves. Durations are exchange seconds, each times
    ``time_scale`` in real seconds (0.01: a hundred times faster)."""

    time_scale: float = 1.0
    security_check_s: float = 60.0
    pending_s: float = 60.0
    confirmed_s: float = 60.0
    deposit_processing_s: float = 30.0
    repeat_mode: RepeatMode = "original"
    rate_limits: Mapping[str, int] = field(default_factory=lambda: {"/v5/asset/withdraw/create": 5})
    """Requests per second per key and path; paths not named get ``default_rate_limit``."""
    default_rate_limit: int = 50
    withdraw_interval_s: float = WITHDRAW_INTERVAL_S
    """One withdrawal per key, chain and coin within this many exchange seconds."""
    tick_s: float = 0.05
    """The back office's period, real seconds."""


@dataclass
class _Withdrawal:
    id: str
    request_id: str
    key: str
    coin: str
    chain: str
    address: str
    amount: Decimal
    fee: Decimal
    status: str
    create_ms: int
    update_ms: int
    due: float
    outcome: Outcome | None
    tx_id: str = ""
    raw: bytes = b""

    def row(self) -> dict[str, Any]:
        return {
            "withdrawId": self.id,
            "txID": self.tx_id,
            "withdrawType": 0,
            "coin": self.coin,
            "chain": self.chain,
            "amount": _fmt(self.amount),
            "withdrawFee": _fmt(self.fee),
            "status": self.status,
            "toAddress": self.address,
            "tag": "",
            "createTime": str(self.create_ms),
            "updateTime": str(self.update_ms),
        }


@dataclass
class _Deposit:
    id: str
    chain: str
    tx_id: str
    log_index: int
    block_number: int
    block_hash: str
    to_address: str
    amount: Decimal
    status: int
    confirmations: int
    seen_ms: int
    success_ms: int = 0
    due: float = 0.0

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "coin": "USDC",
            "chain": self.chain,
            "amount": _fmt(self.amount),
            "txID": self.tx_id,
            "status": self.status,
            "toAddress": self.to_address,
            "tag": "",
            "depositFee": "",
            "successAt": str(self.success_ms) if self.success_ms else "",
            "confirmations": str(self.confirmations),
            "txIndex": str(self.log_index),
            "blockHash": self.block_hash,
            "batchReleaseLimit": "-1",
            "depositType": 0,
        }


@dataclass
class _Injection:
    outcome: Outcome
    address: str | None
    remaining: int


class _Refusal(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.message = message or _message(code)


def _fmt(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text


def _now_ms(offset_ms: int) -> int:
    return int(time.time() * 1000) + offset_ms


class _Exchange:
    """The state the HTTP threads and the back office share (under ``lock``)."""

    def __init__(
        self,
        chains: Sequence[BybitChain],
        api_keys: Mapping[str, str],
        hot_wallet: Signer | None,
        config: BybitConfig,
    ) -> None:
        self.lock = threading.Lock()
        self.chains = {c.name: c for c in chains}
        self._secrets = dict(api_keys)
        self.hot_wallet = hot_wallet
        self.config = config
        self.time_scale = config.time_scale
        self.repeat_mode: RepeatMode = config.repeat_mode
        self.clock_offset_ms = 0
        self.balances: dict[str, Decimal] = {}
        self.whitelist: dict[tuple[str | None, str], int] = {}
        """The address book: (chain or None for any, address as spelled) -> added ms."""
        self.last_withdrawal: dict[tuple[str, str, str], float] = {}
        """(key, chain, coin) -> when (monotonic) its last withdrawal was made."""
        self.suspended: set[str] = set()
        """Chains whose USDC withdrawals are suspended (suspend_withdrawals)."""
        self.withdraw_interval: float | None = None
        """The interval in real seconds (set_withdraw_interval), else the config's."""
        self.withdrawals: dict[str, _Withdrawal] = {}
        self.by_request: dict[tuple[str, str], str] = {}
        self.deposits: dict[tuple[str, str, int], _Deposit] = {}
        self.scan_from: dict[str, int | None] = {c.name: None for c in chains}
        self.injections: list[_Injection] = []
        self.forced_limits: list[tuple[str | None, int]] = []
        """(path or None, reset delay ms) per forced 10006, first first."""
        self.forced_errors: list[tuple[str | None, int, str | None]] = []
        """(path or None, retCode, message) per injected answer, first first."""
        self.windows: dict[tuple[str, str], deque[float]] = {}
        self.next_id = 10_000
        self.requests = 0
        self.errors: dict[str, str] = {}
        """The back office's last error per chain (or withdrawal), for ``status``."""

    def __repr__(self) -> str:
        return f"_Exchange(chains={sorted(self.chains)}, keys={len(self._secrets)})"

    def secret_of(self, key: str) -> str | None:
        return self._secrets.get(key)

    def server_ms(self) -> int:
        return _now_ms(self.clock_offset_ms)

    def later(self, exchange_seconds: float) -> float:
        return time.monotonic() + exchange_seconds * self.time_scale

    # -- rate limit (under lock) -------------------------------------------------

    def forced_error(self, path: str) -> _Refusal | None:
        for i, (forced_path, code, message) in enumerate(self.forced_errors):
            if forced_path is None or forced_path == path:
                del self.forced_errors[i]
                return _Refusal(code, message)
        return None

    def admit(self, key: str, path: str) -> tuple[int, int, int | None]:
        """(limit, remaining, reset ms when refused else None)."""
        limit = self.config.rate_limits.get(path, self.config.default_rate_limit)
        now = time.monotonic()
        window = self.windows.setdefault((key, path), deque())
        while window and window[0] <= now - 1.0:
            window.popleft()
        for i, (forced_path, delay_ms) in enumerate(self.forced_limits):
            if forced_path is None or forced_path == path:
                del self.forced_limits[i]
                return limit, 0, self.server_ms() + delay_ms
        if len(window) >= limit:
            reset_in = window[0] + 1.0 - now
            return limit, 0, self.server_ms() + max(1, int(reset_in * 1000) + 1)
        window.append(now)
        return limit, limit - len(window), None

    # -- withdrawals (under lock) ------------------------------------------------

    def outcome_for(self, address: str) -> Outcome | None:
        for rule in self.injections:
            if rule.address is None or rule.address == address:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self.injections.remove(rule)
                return rule.outcome
        return None

    def withdraw(self, key: str, body: Mapping[str, Any]) -> dict[str, Any]:
        coin = body.get("coin")
        chain_name = body.get("chain")
        address = body.get("address")
        amount_text = body.get("amount")
        request_id = body.get("requestId")
        account_type = body.get("accountType")
        if not isinstance(body.get("timestamp"), int):
            raise _Refusal(PARAMETER_ERROR, "timestamp (ms, an integer) is required")
        if coin != "USDC":
            raise _Refusal(PARAMETER_ERROR, f"coin {coin!r} is not supported (USDC only)")
        if not isinstance(chain_name, str) or chain_name not in self.chains:
            raise _Refusal(PARAMETER_ERROR, f"chain {chain_name!r} is not supported")
        if account_type not in ("FUND", "UTA"):
            raise _Refusal(PARAMETER_ERROR, "accountType is required: FUND or UTA")
        if not isinstance(address, str) or not address:
            raise _Refusal(PARAMETER_ERROR, "address is required")
        if not isinstance(amount_text, str):
            raise _Refusal(PARAMETER_ERROR, "amount is a string")
        try:
            amount = Decimal(amount_text)
        except InvalidOperation:
            raise _Refusal(PARAMETER_ERROR, f"amount {amount_text!r} is not a number") from None
        if not amount.is_finite() or amount <= 0 or amount.as_tuple().exponent < -USDC_DECIMALS:  # type: ignore[operator]
            raise _Refusal(PARAMETER_ERROR, f"amount {amount_text!r}: positive, at most 6 decimals")
        if request_id is not None and (
            not isinstance(request_id, str)
            or not (1 <= len(request_id) <= 32)
            or not request_id.isascii()
            or not request_id.isalnum()
        ):
            raise _Refusal(PARAMETER_ERROR, "requestId is 1-32 letters and digits")
        if request_id is not None and (key, request_id) in self.by_request:
            if self.repeat_mode == "error":
                raise _Refusal(REPEATED_REQUEST)
            return {"id": self.by_request[(key, request_id)]}
        if chain_name in self.suspended:
            raise _Refusal(WITHDRAWALS_CLOSED)
        interval = (
            self.withdraw_interval
            if self.withdraw_interval is not None
            else self.config.withdraw_interval_s * self.time_scale
        )
        last = self.last_withdrawal.get((key, chain_name, coin))
        if last is not None and time.monotonic() - last < interval:
            raise _Refusal(WITHDRAW_INTERVAL)
        # the address book compares the address as spelled (Bybit: "the address
        # is case sensitive, so use the exact same address added in address book")
        if (chain_name, address) not in self.whitelist and (None, address) not in self.whitelist:
            raise _Refusal(NOT_WHITELISTED)
        chain = self.chains[chain_name]
        total = amount + chain.withdraw_fee
        if self.balances.get(coin, Decimal(0)) < total:
            raise _Refusal(INSUFFICIENT_BALANCE)
        self.balances[coin] -= total
        now_ms = self.server_ms()
        wid = str(self.next_id)
        self.next_id += 1
        self.withdrawals[wid] = _Withdrawal(
            id=wid,
            request_id=request_id or "",
            key=key,
            coin=coin,
            chain=chain_name,
            address=address,
            amount=amount,
            fee=chain.withdraw_fee,
            status="SecurityCheck",
            create_ms=now_ms,
            update_ms=now_ms,
            due=self.later(self.config.security_check_s),
            outcome=self.outcome_for(address),
        )
        if request_id:
            self.by_request[(key, request_id)] = wid
        self.last_withdrawal[(key, chain_name, coin)] = time.monotonic()
        event(logging.INFO, "bybit_double_withdrawal", id=wid, chain=chain_name, amount=amount)
        return {"id": wid}

    def move(self, w: _Withdrawal, status: str, due_in: float | None = None) -> None:
        w.status = status
        w.update_ms = self.server_ms()
        if due_in is not None:
            w.due = self.later(due_in)
        if status in ("Fail", "Reject"):
            self.balances[w.coin] = self.balances.get(w.coin, Decimal(0)) + w.amount + w.fee
        event(logging.INFO, "bybit_double_withdrawal_status", id=w.id, status=status)


def _window(query: Mapping[str, str], now_ms: int) -> tuple[int, int]:
    try:
        end = int(query["endTime"]) if "endTime" in query else now_ms
        start = int(query["startTime"]) if "startTime" in query else end - THIRTY_DAYS_MS
    except ValueError:
        raise _Refusal(PARAMETER_ERROR, "startTime and endTime are integers (ms)") from None
    if start > end or end - start > THIRTY_DAYS_MS:
        raise _Refusal(PARAMETER_ERROR, "endTime - startTime must be within 30 days")
    return start, end


def _page(rows: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    try:
        limit = int(query.get("limit", "50"))
        offset = int(query["cursor"]) if query.get("cursor") else 0
    except ValueError:
        raise _Refusal(
            PARAMETER_ERROR, "limit is an integer and cursor one this server gave"
        ) from None
    if not 1 <= limit <= 50 or offset < 0:
        raise _Refusal(PARAMETER_ERROR, "limit is 1-50")
    chunk = rows[offset : offset + limit]
    more = offset + limit < len(rows)
    return {"rows": chunk, "nextPageCursor": str(offset + limit) if more else ""}


def _withdraw_records(ex: _Exchange, key: str, query: Mapping[str, str]) -> dict[str, Any]:
    start, end = _window(query, ex.server_ms())
    if query.get("withdrawType", "0") not in ("0", "2"):
        return {"rows": [], "nextPageCursor": ""}
    rows = [
        w
        for w in sorted(ex.withdrawals.values(), key=lambda w: int(w.id), reverse=True)
        if w.key == key
        and start <= w.create_ms <= end
        and query.get("withdrawID", w.id) == w.id
        and query.get("txID", w.tx_id) == w.tx_id
        and query.get("coin", w.coin) == w.coin
    ]
    return _page([w.row() for w in rows], query)


def _deposit_records(ex: _Exchange, query: Mapping[str, str]) -> dict[str, Any]:
    start, end = _window(query, ex.server_ms())
    rows = [
        d
        for d in sorted(ex.deposits.values(), key=lambda d: d.seen_ms, reverse=True)
        if start <= d.seen_ms <= end
        and query.get("coin", "USDC") == "USDC"
        and query.get("id", d.id) == d.id
        and query.get("txID", d.tx_id) == d.tx_id
    ]
    return _page([d.row() for d in rows], query)


def _deposit_address(ex: _Exchange, query: Mapping[str, str]) -> dict[str, Any]:
    if query.get("coin") != "USDC":
        raise _Refusal(PARAMETER_ERROR, "coin: USDC only")
    wanted = query.get("chainType")
    chains = [
        {
            "chainType": c.name,
            "addressDeposit": c.deposit_address,
            "tagDeposit": "",
            "chain": c.name,
            "batchReleaseLimit": "-1",
            "contractAddress": c.usdc,
        }
        for c in ex.chains.values()
        if wanted in (None, c.name)
    ]
    return {"coin": "USDC", "chains": chains}


def _address_book(ex: _Exchange, query: Mapping[str, str]) -> dict[str, Any]:
    """The withdrawal address book as GET /v5/asset/withdraw/query-address
    lists it: an address for one chain is a regular address (coin USDC), one
    for any chain a universal address (coin baseCoin) on each chain; ``coin``
    baseCoin lists the universal ones, another coin its regular ones, ``chain``
    both kinds on that chain."""
    coin, chain = query.get("coin"), query.get("chain")
    if query.get("addressType", "0") not in ("0", "2"):
        return {"rows": [], "nextPageCursor": ""}
    rows: list[dict[str, Any]] = []
    for (on, address), added_ms in ex.whitelist.items():
        for name in [on] if on is not None else list(ex.chains):
            row_coin = "USDC" if on is not None else "baseCoin"
            if coin not in (None, row_coin) or chain not in (None, name):
                continue
            rows.append(
                {
                    "coin": row_coin,
                    "chain": name,
                    "address": address,
                    "tag": "",
                    "remark": "" if on is not None else "Universal Address",
                    "status": 0,
                    "addressType": 0,
                    "verified": 1,
                    "createAt": str(added_ms // 1000),
                }
            )
    return _page(rows, query)


def _coin_info(ex: _Exchange, query: Mapping[str, str]) -> dict[str, Any]:
    """GET /v5/asset/coin/query-info: USDC on each chain, deposits open,
    withdrawals unless suspended."""
    if query.get("coin", "USDC") != "USDC":
        return {"rows": []}
    chains = [
        {
            "chain": c.name,
            "chainType": c.name,
            "confirmation": str(c.deposit_confirmations),
            "withdrawFee": _fmt(c.withdraw_fee),
            "depositMin": "0",
            "withdrawMin": "0.000001",
            "minAccuracy": str(USDC_DECIMALS),
            "chainDeposit": "1",
            "chainWithdraw": "0" if c.name in ex.suspended else "1",
            "withdrawPercentageFee": "0",
            "contractAddress": c.usdc,
            "safeConfirmNumber": str(c.deposit_confirmations),
            "withdrawMax": "-1",
        }
        for c in ex.chains.values()
    ]
    return {"rows": [{"name": "USDC", "coin": "USDC", "remainAmount": "", "chains": chains}]}


def _balance(ex: _Exchange, query: Mapping[str, str]) -> dict[str, Any]:
    if query.get("accountType") not in ("FUND", "UNIFIED"):
        raise _Refusal(PARAMETER_ERROR, "accountType: FUND or UNIFIED")
    coins = [c for c in query.get("coin", "USDC").split(",") if c]
    rows = [
        {
            "coin": c,
            "walletBalance": _fmt(ex.balances.get(c, Decimal(0))),
            "transferBalance": _fmt(ex.balances.get(c, Decimal(0))),
            "bonus": "",
        }
        for c in coins
    ]
    return {"accountType": query["accountType"], "memberId": "1", "balance": rows}


_GET_ROUTES = {
    "/v5/asset/withdraw/query-record",
    "/v5/asset/withdraw/query-address",
    "/v5/asset/coin/query-info",
    "/v5/asset/deposit/query-record",
    "/v5/asset/deposit/query-address",
    "/v5/asset/transfer/query-account-coins-balance",
}


def _handler(ex: _Exchange) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def _answer(
            self, code: int, result: Any, headers: Mapping[str, str], message: str | None = None
        ) -> None:
            envelope = {
                "retCode": code,
                "retMsg": message or _message(code),
                "result": result if result is not None else {},
                "retExtInfo": {},
                "time": ex.server_ms(),
            }
            self.send_json(200, envelope, headers)

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            with ex.lock:
                ex.requests += 1
            if method == "GET" and parts.path == "/v5/market/time":
                ms = ex.server_ms()
                self._answer(0, {"timeSecond": str(ms // 1000), "timeNano": str(ms * 10**6)}, {})
                return
            known = (method == "GET" and parts.path in _GET_ROUTES) or (
                method == "POST" and parts.path == "/v5/asset/withdraw/create"
            )
            if not known:
                self.send_error(404)
                return
            headers: dict[str, str] = {}
            try:
                key = self.headers.get("X-BAPI-API-KEY") or ""
                secret = ex.secret_of(key)
                if secret is None:
                    raise _Refusal(INVALID_KEY)
                with ex.lock:
                    limit, remaining, reset_ms = ex.admit(key, parts.path)
                    now_ms = ex.server_ms()
                headers = {
                    "X-Bapi-Limit": str(limit),
                    "X-Bapi-Limit-Status": str(remaining),
                    "X-Bapi-Limit-Reset-Timestamp": str(reset_ms or now_ms),
                }
                if reset_ms is not None:
                    raise _Refusal(TOO_MANY_VISITS)
                timestamp = self.headers.get("X-BAPI-TIMESTAMP") or ""
                recv_window = self.headers.get("X-BAPI-RECV-WINDOW") or ""
                try:
                    ts = int(timestamp)
                    window = int(recv_window) if recv_window else 5000
                except ValueError:
                    raise _Refusal(OUTSIDE_RECV_WINDOW) from None
                if not (now_ms - window <= ts < now_ms + 1000):
                    raise _Refusal(OUTSIDE_RECV_WINDOW)
                payload = parts.query.encode() if method == "GET" else raw
                expected = hmac.new(
                    secret.encode(),
                    timestamp.encode() + key.encode() + recv_window.encode() + payload,
                    hashlib.sha256,
                ).hexdigest()
                given = self.headers.get("X-BAPI-SIGN") or ""
                if not hmac.compare_digest(expected, given.lower()):
                    raise _Refusal(BAD_SIGNATURE)
                with ex.lock:
                    forced = ex.forced_error(parts.path)
                if forced is not None:
                    raise forced
                result = self._route(method, parts.path, parts.query, raw, key)
            except _Refusal as refusal:
                self._answer(refusal.code, None, headers, refusal.message)
                return
            self._answer(0, result, headers)

        def _route(self, method: str, path: str, query_text: str, raw: bytes, key: str) -> Any:
            if method == "POST":
                try:
                    body = json.loads(raw)
                except ValueError:
                    raise _Refusal(PARAMETER_ERROR, "the body is not JSON") from None
                if not isinstance(body, dict):
                    raise _Refusal(PARAMETER_ERROR, "the body is a JSON object")
                with ex.lock:
                    return ex.withdraw(key, body)
            query = dict(parse_qsl(query_text, keep_blank_values=True))
            with ex.lock:
                if path == "/v5/asset/withdraw/query-record":
                    return _withdraw_records(ex, key, query)
                if path == "/v5/asset/deposit/query-record":
                    return _deposit_records(ex, query)
                if path == "/v5/asset/deposit/query-address":
                    return _deposit_address(ex, query)
                if path == "/v5/asset/withdraw/query-address":
                    return _address_book(ex, query)
                if path == "/v5/asset/coin/query-info":
                    return _coin_info(ex, query)
                return _balance(ex, query)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


# -- the back office -------------------------------------------------------------


class _BackOffice:
    def __init__(self, ex: _Exchange) -> None:
        self.ex = ex
        self.rpcs: dict[str, EvmRpc] = {}

    def rpc(self, chain: BybitChain) -> EvmRpc:
        if chain.name not in self.rpcs:
            self.rpcs[chain.name] = EvmRpc(chain.rpc_url, timeout=5.0)
        return self.rpcs[chain.name]

    async def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                await self.tick()
                wake = time.monotonic() + self.ex.config.tick_s
                while not stop.is_set() and time.monotonic() < wake:
                    await asyncio.sleep(min(0.05, self.ex.config.tick_s))
        finally:
            for rpc in self.rpcs.values():
                await rpc.aclose()

    async def tick(self) -> None:
        ex = self.ex
        for chain in ex.chains.values():
            try:
                await self.watch(chain)
            except Exception as exc:
                self.note(chain.name, exc)
        with ex.lock:
            active = [w for w in ex.withdrawals.values() if w.status not in TERMINAL]
        for w in active:
            try:
                await self.walk(w)
            except Exception as exc:
                self.note(f"withdrawal {w.id}", exc)

    def note(self, where: str, exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}"[:300]
        with self.ex.lock:
            changed = self.ex.errors.get(where) != text
            self.ex.errors[where] = text
        if changed:
            event(logging.WARNING, "bybit_double_back_office", where=where, error=text)

    async def walk(self, w: _Withdrawal) -> None:
        ex = self.ex
        now = time.monotonic()
        chain = ex.chains[w.chain]
        if w.status == "SecurityCheck" and now >= w.due:
            with ex.lock:
                if w.outcome == "Reject":
                    ex.move(w, "Reject")
                else:
                    ex.move(w, "Pending", ex.config.pending_s)
        elif w.status == "Pending" and not w.tx_id and now >= w.due:
            if w.outcome == "Fail":
                with ex.lock:
                    ex.move(w, "Fail")
                return
            await self.send(chain, w)
        elif w.status == "Pending" and w.tx_id:
            rpc = self.rpc(chain)
            receipt = await rpc.receipt(w.tx_id)
            if receipt is None:
                if await rpc.transaction(w.tx_id) is None:
                    await rpc.send_raw_transaction(w.raw)
                return
            if not receipt.succeeded:
                with ex.lock:
                    ex.move(w, "Fail")
                return
            head = await rpc.block_number()
            if head - receipt.block_number + 1 >= chain.withdraw_confirmations:
                with ex.lock:
                    ex.move(w, "BlockchainConfirmed", ex.config.confirmed_s)
        elif w.status == "BlockchainConfirmed" and now >= w.due:
            with ex.lock:
                ex.move(w, "success")

    async def send(self, chain: BybitChain, w: _Withdrawal) -> None:
        signer = self.ex.hot_wallet
        if signer is None:
            raise RuntimeError("the exchange has no hot wallet: withdrawals stay Pending")
        rpc = self.rpc(chain)
        value = int(w.amount.scaleb(USDC_DECIMALS))
        to = normalize_address(w.address)
        data = transfer_calldata(to, value)
        nonce = await rpc.transaction_count(signer.address, "pending")
        fees = await suggest_fees(rpc, max_fee_cap=MAX_FEE_CAP, priority_fee_cap=PRIORITY_FEE_CAP)
        gas = await estimate_gas(rpc, signer.address, chain.usdc, data)
        tx = build_transfer(chain.chain_id, chain.usdc, to, value, nonce, fees, gas)
        signed = await sign(signer, tx)
        with self.ex.lock:
            w.tx_id = signed.tx_hash
            w.raw = signed.raw
            w.update_ms = self.ex.server_ms()
        await rpc.send_raw_transaction(signed.raw)
        event(logging.INFO, "bybit_double_withdrawal_sent", id=w.id, tx=signed.tx_hash)

    async def watch(self, chain: BybitChain) -> None:
        ex = self.ex
        rpc = self.rpc(chain)
        head = await rpc.block_number()
        start = ex.scan_from[chain.name]
        if start is None:
            ex.scan_from[chain.name] = head + 1
            return
        if head >= start:
            to_topic = "0x" + "00" * 12 + normalize_address(chain.deposit_address)[2:]
            logs = await rpc.get_logs(
                address=chain.usdc,
                topics=[TRANSFER_TOPIC, None, to_topic],
                from_block=start,
                to_block=head,
            )
            with ex.lock:
                fresh = [
                    log
                    for log in logs
                    if (chain.name, log.tx_hash, log.log_index) not in ex.deposits
                    and not log.removed
                    and log.block_number is not None
                ]
            hashes: dict[int, str] = {}
            for log in fresh:
                assert log.block_number is not None
                if log.block_number not in hashes:
                    block = await rpc.block(log.block_number)
                    hashes[log.block_number] = block.hash if block is not None else ""
            with ex.lock:
                for log in fresh:
                    assert log.block_number is not None
                    ex.deposits[(chain.name, log.tx_hash, log.log_index)] = _Deposit(
                        id=str(ex.next_id),
                        chain=chain.name,
                        tx_id=log.tx_hash,
                        log_index=log.log_index,
                        block_number=log.block_number,
                        block_hash=hashes[log.block_number],
                        to_address=chain.deposit_address,
                        amount=Decimal(int.from_bytes(log.data[:32], "big")).scaleb(-USDC_DECIMALS),
                        status=1,
                        confirmations=head - log.block_number + 1,
                        seen_ms=ex.server_ms(),
                    )
                    ex.next_id += 1
                    event(logging.INFO, "bybit_double_deposit_seen", chain=chain.name,
                          tx=log.tx_hash)  # fmt: skip
                ex.scan_from[chain.name] = head + 1
        now = time.monotonic()
        with ex.lock:
            for d in ex.deposits.values():
                if d.chain != chain.name or d.status == 3:
                    continue
                d.confirmations = head - d.block_number + 1
                if d.status == 1 and d.confirmations >= chain.deposit_confirmations:
                    d.status = 2
                    d.due = ex.later(ex.config.deposit_processing_s)
                elif d.status == 2 and now >= d.due:
                    d.status = 3
                    d.success_ms = ex.server_ms()
                    ex.balances["USDC"] = ex.balances.get("USDC", Decimal(0)) + d.amount
                    event(logging.INFO, "bybit_double_deposit_credited", chain=chain.name,
                          tx=d.tx_id, amount=d.amount)  # fmt: skip


# -- the handle ------------------------------------------------------------------


class BybitHandle:
    """A running fake exchange: its URL, its controls, ``stop()``."""

    def __init__(
        self,
        ex: _Exchange,
        server: ThreadingHTTPServer,
        threads: list[threading.Thread],
        stop_event: threading.Event,
    ) -> None:
        self._ex = ex
        self._server = server
        self._threads = threads
        self._stop = stop_event
        host, port = server.server_address[:2]
        self.url = f"http://{host!s}:{port}"

    def __repr__(self) -> str:
        return f"BybitHandle({self.url!r})"

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=10)

    # -- controls -------------------------------------------------------------

    def whitelist(self, address: str, chain: str | None = None) -> None:
        """Add ``address`` to the withdrawal address book (for ``chain``, or any),
        spelled as given: a withdrawal must name it in the same case."""
        with self._ex.lock:
            self._ex.whitelist.setdefault((chain, address), self._ex.server_ms())

    def credit(self, amount: Decimal, coin: str = "USDC") -> None:
        """Add ``amount`` to the FUND balance (as an internal transfer would)."""
        with self._ex.lock:
            self._ex.balances[coin] = self._ex.balances.get(coin, Decimal(0)) + amount

    def balance(self, coin: str = "USDC") -> Decimal:
        with self._ex.lock:
            return self._ex.balances.get(coin, Decimal(0))

    def record_deposit(
        self,
        chain: str,
        tx_id: str,
        amount: Decimal,
        *,
        log_index: int = 0,
        block_number: int = 1,
        status: int = 3,
    ) -> None:
        """A deposit to ``chain``'s deposit address as the watcher records one,
        for reading the deposit records without a chain: credited to FUND
        when ``status`` is 3 (success)."""
        if chain not in self._ex.chains or status not in (0, 1, 2, 3, 4):
            raise ValueError(f"a chain of this exchange and a status 0-4: {chain!r}, {status}")
        with self._ex.lock:
            now_ms = self._ex.server_ms()
            self._ex.deposits[(chain, tx_id, log_index)] = _Deposit(
                id=str(self._ex.next_id),
                chain=chain,
                tx_id=tx_id,
                log_index=log_index,
                block_number=block_number,
                block_hash="0x" + "00" * 32,
                to_address=self._ex.chains[chain].deposit_address,
                amount=amount,
                status=status,
                confirmations=self._ex.chains[chain].deposit_confirmations,
                seen_ms=now_ms,
                success_ms=now_ms if status == 3 else 0,
            )
            self._ex.next_id += 1
            if status == 3:
                self._ex.balances["USDC"] = self._ex.balances.get("USDC", Decimal(0)) + amount

    def set_repeat_mode(self, mode: RepeatMode) -> None:
        """What a repeated requestId answers: the original id, or 131082."""
        if mode not in ("original", "error"):
            raise ValueError(f"repeat mode is 'original' or 'error': {mode!r}")
        with self._ex.lock:
            self._ex.repeat_mode = mode

    def inject_outcome(
        self, outcome: Outcome, *, address: str | None = None, count: int = 1
    ) -> None:
        """The next ``count`` withdrawals (to ``address``, or any) end in ``outcome``:
        Reject after the security check, Fail in Pending before anything is sent."""
        if outcome not in ("Fail", "Reject") or count < 1:
            raise ValueError(f"an outcome is Fail or Reject, count >= 1: {outcome!r}, {count}")
        with self._ex.lock:
            self._ex.injections.append(_Injection(outcome, address, count))

    def inject_rate_limit(
        self, count: int = 1, *, reset_in_ms: int = 1000, path: str | None = None
    ) -> None:
        """The next ``count`` authenticated requests (to ``path``, or any) answer
        10006 with a reset ``reset_in_ms`` after the server's now."""
        with self._ex.lock:
            self._ex.forced_limits.extend([(path, reset_in_ms)] * count)

    def inject_error(
        self, code: int, *, count: int = 1, path: str | None = None, message: str | None = None
    ) -> None:
        """The next ``count`` authenticated requests (to ``path``, or any) answer
        retCode ``code`` (with ``message``, else the table's) and do nothing."""
        if code == 0 or count < 1:
            raise ValueError(f"an injected answer is an error, count >= 1: {code}, {count}")
        with self._ex.lock:
            self._ex.forced_errors.extend([(path, code, message)] * count)

    def suspend_withdrawals(self, chain: str, suspended: bool = True) -> None:
        """Coin info shows USDC withdrawals on ``chain`` suspended (chainWithdraw
        0), and withdraw/create on it answers 131097, as the venue does while
        a chain's withdrawals are closed."""
        if chain not in self._ex.chains:
            raise ValueError(f"not a chain of this exchange: {chain!r}")
        with self._ex.lock:
            if suspended:
                self._ex.suspended.add(chain)
            else:
                self._ex.suspended.discard(chain)

    def set_withdraw_interval(self, real_seconds: float | None) -> None:
        """The withdrawal interval per key, chain and coin in real seconds; None:
        the config's (exchange seconds times the time scale)."""
        if real_seconds is not None and real_seconds < 0:
            raise ValueError(f"an interval is not negative: {real_seconds}")
        with self._ex.lock:
            self._ex.withdraw_interval = real_seconds

    def set_clock_offset(self, offset_ms: int) -> None:
        """Move the server's clock (for the recv window) by ``offset_ms``."""
        with self._ex.lock:
            self._ex.clock_offset_ms = offset_ms

    def set_time_scale(self, time_scale: float) -> None:
        """Real seconds per exchange second, for steps scheduled from now on."""
        if time_scale <= 0:
            raise ValueError(f"the time scale is positive: {time_scale}")
        with self._ex.lock:
            self._ex.time_scale = time_scale

    def deposit_address(self, chain: str) -> str:
        return self._ex.chains[chain].deposit_address

    def withdrawal(self, withdraw_id: str) -> dict[str, Any]:
        """A withdrawal as query-record shows it."""
        with self._ex.lock:
            return self._ex.withdrawals[withdraw_id].row()

    def status(self) -> dict[str, Any]:
        """What `qtg world status` shows: the URL, counts, balances, back-office errors."""
        with self._ex.lock:
            return {
                "url": self.url,
                "requests": self._ex.requests,
                "withdrawals": len(self._ex.withdrawals),
                "deposits": len(self._ex.deposits),
                "balances": {c: _fmt(v) for c, v in self._ex.balances.items()},
                "errors": dict(self._ex.errors),
            }


def serve(
    chains: Sequence[BybitChain],
    api_keys: Mapping[str, str],
    hot_wallet: Signer | None = None,
    config: BybitConfig | None = None,
    *,
    host: str = LOOPBACK,
    port: int = 0,
) -> BybitHandle:
    """Start the fake exchange on ``host:port`` (0: a free port) in daemon threads:
    the HTTP server and the back office. ``api_keys`` maps each key to its secret;
    ``hot_wallet`` signs the withdrawals (without one they stay Pending)."""
    ex = _Exchange(chains, api_keys, hot_wallet, config or BybitConfig())
    server = ThreadingHTTPServer((host, port), _handler(ex))
    server.daemon_threads = True
    stop_event = threading.Event()
    office = _BackOffice(ex)
    http_thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="bybit-http", daemon=True
    )
    office_thread = threading.Thread(
        target=lambda: asyncio.run(office.run(stop_event)), name="bybit-office", daemon=True
    )
    http_thread.start()
    office_thread.start()
    return BybitHandle(ex, server, [http_thread, office_thread], stop_event)
