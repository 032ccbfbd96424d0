"""The RPC a rehearsal's executors talk to: a JSON-RPC proxy on loopback in
front of one anvil fork, which sends the treasury's transactions as the
treasury without its key.

The executors sign as they always do, but with stand-in keys (``StandIns``):
a stand-in key signs what the executor built for the treasury account it
stands in for. ``eth_sendRawTransaction`` of such bytes is taken apart here
and sent again with the same fields (nonce, gas, fees, to, value, data) by
``eth_sendTransaction`` from the treasury account itself, which the fork
impersonates (``anvil_impersonateAccount``): the chain runs the treasury's
own transaction against its real balances, allowances and nonces.

The engine records the hash of the bytes it signed before it sends them, and
reads its transaction back by that hash. The proxy keeps that promise: the
answer to the send is the recorded hash, and every answer after it says the
recorded hash where the fork says its own (receipts, transactions, logs,
blocks), while every request that names a recorded hash is forwarded with the
fork's. Bytes sent again answer "already known", as a node's pool does.
Transactions no stand-in signed are forwarded as they are.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from eth_account import Account
from eth_account.typed_transactions.typed_transaction import TypedTransaction
from eth_utils.crypto import keccak
from hexbytes import HexBytes

from qtg_rehearsal.loopback import LoopbackJsonRpc, error


class ProxyError(Exception):
    """A JSON-RPC error the proxy answers: its code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Ledger:
    """The recorded hashes and the fork's, both ways."""

    senders: Mapping[str, str]
    """stand-in address -> the treasury account it sends as (lower case)."""
    fork_of: dict[str, str] = field(default_factory=dict)
    recorded_of: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def swap(self, value: Any, table: Mapping[str, str]) -> Any:
        """``value`` with every string ``table`` names replaced, at any depth."""
        if isinstance(value, str):
            return table.get(value.lower(), value)
        if isinstance(value, list):
            return [self.swap(v, table) for v in value]
        if isinstance(value, dict):
            return {k: self.swap(v, table) for k, v in value.items()}
        return value


def _hex(value: int) -> str:
    return hex(int(value))


def transaction_fields(raw: bytes, sender: str) -> dict[str, Any]:
    """The fields of the signed EIP-1559 ``raw`` as an eth_sendTransaction
    object from ``sender``."""
    tx = TypedTransaction.from_bytes(HexBytes(raw)).as_dict()
    fields: dict[str, Any] = {
        "from": sender,
        "nonce": _hex(tx["nonce"]),
        "gas": _hex(tx["gas"]),
        "maxFeePerGas": _hex(tx["maxFeePerGas"]),
        "maxPriorityFeePerGas": _hex(tx["maxPriorityFeePerGas"]),
        "value": _hex(tx["value"]),
        "input": "0x" + bytes(tx["data"]).hex(),
        "chainId": _hex(tx["chainId"]),
    }
    if tx.get("to"):
        fields["to"] = "0x" + bytes(tx["to"]).hex()
    return fields


class ForkProxy:
    """The proxy of one fork: ``.url`` for the executors, ``.stop()``."""

    def __init__(self, fork_url: str, senders: Mapping[str, str], timeout: float = 30.0) -> None:
        self.fork_url = fork_url
        self._ledger = _Ledger({k.lower(): v.lower() for k, v in senders.items()})
        self._client = httpx.Client(timeout=timeout)
        self._rpc = LoopbackJsonRpc(self._answer_body, "rehearsal-proxy")
        self.url = self._rpc.url

    # -- the fork ------------------------------------------------------------

    def fork(self, method: str, params: list[Any]) -> Any:
        """One call to the fork itself; its error raised as ProxyError."""
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        try:
            answer = self._client.post(self.fork_url, json=body).json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ProxyError(-32603, f"the fork did not answer {method}: {exc}") from None
        error = answer.get("error")
        if error is not None:
            raise ProxyError(int(error.get("code", -32000)), str(error.get("message", error)))
        return answer.get("result")

    # -- one request -----------------------------------------------------------

    def answer(self, method: str, params: list[Any]) -> Any:
        ledger = self._ledger
        if method == "eth_sendRawTransaction" and params:
            return self._send_raw(str(params[0]))
        with ledger.lock:
            forwarded = ledger.swap(params, ledger.fork_of)
        result = self.fork(method, forwarded)
        with ledger.lock:
            return ledger.swap(result, ledger.recorded_of)

    def _send_raw(self, raw_hex: str) -> str:
        ledger = self._ledger
        try:
            raw = bytes.fromhex(raw_hex.removeprefix("0x"))
            recorded = "0x" + keccak(raw).hex()
            stand_in = str(Account.recover_transaction(raw)).lower()
        except ValueError as exc:
            raise ProxyError(-32602, f"invalid raw transaction: {exc}") from None
        treasury = ledger.senders.get(stand_in)
        if treasury is None:
            return str(self.fork("eth_sendRawTransaction", [raw_hex]))
        with ledger.lock:
            if recorded in ledger.fork_of:
                raise ProxyError(-32000, "already known")
        fork_hash = str(self.fork("eth_sendTransaction", [transaction_fields(raw, treasury)]))
        with ledger.lock:
            ledger.fork_of[recorded] = fork_hash.lower()
            ledger.recorded_of[fork_hash.lower()] = recorded
        return recorded

    def recorded_hashes(self) -> dict[str, str]:
        """Every recorded hash sent so far and the fork's hash of it."""
        with self._ledger.lock:
            return dict(self._ledger.fork_of)

    def _answer_body(self, body: Any) -> Any:
        if isinstance(body, list):
            return [_one(self, r) for r in body]
        return _one(self, body)

    def stop(self) -> None:
        self._rpc.stop()
        self._client.close()


def _one(proxy: ForkProxy, request: Any) -> dict[str, Any]:
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        return error(None, -32600, "invalid request")
    params = request.get("params") or []
    try:
        result = proxy.answer(request["method"], list(params))
    except ProxyError as exc:
        return error(request.get("id"), exc.code, exc.message)
    return {"jsonrpc": "2.0", "id": request.get("id"), "result": result}
