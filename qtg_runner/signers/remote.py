"""The remote signer: the account's key is held by a signing service reached
over JSON-RPC (Web3Signer's ``eth_signTransaction``, or Clef's external API);
the runner holds the service's URL and the account's address, never a key.

Signer id: ``remote:NAME/0xADDRESS``. NAME (capital letters, digits and _,
starting with a letter or digit) names the service's settings in the
environment, ADDRESS is the account it signs for:

- ``QTG_REMOTE_SIGNER_<NAME>_URL``: the service's JSON-RPC URL (http or https;
  it may carry a credential, which no message shows: qtg_runner.chains.evm_rpc's
  ``redact_url``);
- ``QTG_REMOTE_SIGNER_<NAME>_API``: ``eth`` (the default: ``eth_accounts`` and
  ``eth_signTransaction``, Web3Signer's and a geth node's) or ``clef`` (Clef's
  ``account_list`` and ``account_signTransaction``);
- ``QTG_SIGNER_TIMEOUT_S``: the timeout of each call (10 s).

Since NAME holds nothing but capital letters, digits and _, the variables an
id can name all start with QTG_REMOTE_SIGNER_: a signer id, data in the chain
registry, cannot make the runner read another of its variables.

At load (``load_remote``) the service must list the address among its
accounts. To sign, the transaction goes as the services take it (from, to,
gas, maxFeePerGas, maxPriorityFeePerGas, value, data, nonce, chainId as hex
quantities, type 0x2); the answer (Web3Signer's raw transaction as a hex
string, or Clef's and geth's ``{raw, tx}``) is decoded and checked before it
is used: an EIP-1559 transaction, low s, its sender the account, and every
field the one asked (to, value, data, nonce, gas, both fees, chain id, an
empty access list). A service that signs anything else is refused.

Failures: a misconfigured id or service at load is a SignerError naming what
to do. At sign time an error, no answer in time, a refused connection, or an
answer refused here is SigningFailed: retryable, nothing signed comes back.
Each signing call goes through the endpoint's circuit (qtg_runner.circuit) as
a chain's RPC does, so a service that has stopped answering costs one wait,
not one per node. Nothing here logs (the circuit logs its opening and closing,
naming the endpoint by its redacted URL).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from qtg_runner.signers.base import (
    AccountSigner,
    SignedTransaction,
    describe_id,
    refuse,
    signing_failed,
)
from qtg_runner.signers.kms import SECP256K1_N, timeout_s

REMOTE_PREFIX = "remote:"
ENV_PREFIX = "QTG_REMOTE_SIGNER_"
"""Every variable a remote signer id names starts with this."""

APIS: dict[str, tuple[str, str]] = {
    "eth": ("eth_accounts", "eth_signTransaction"),
    "clef": ("account_list", "account_signTransaction"),
}
"""Each API's (accounts method, signing method)."""

MAX_ANSWER_BYTES = 1024 * 1024

_ID = re.compile(r"^remote:([A-Z0-9][A-Z0-9_]{0,62})/(0x[0-9a-fA-F]{40})$")
_RAW_HEX = re.compile(r"^0x(?:[0-9a-fA-F]{2})+$")

ACCEPTED_FORM = (
    "remote:NAME/0xADDRESS (NAME in capital letters, digits and _; the service's URL in "
    f"{ENV_PREFIX}<NAME>_URL)"
)


def url_env(name: str) -> str:
    return f"{ENV_PREFIX}{name}_URL"


def api_env(name: str) -> str:
    return f"{ENV_PREFIX}{name}_API"


def _hex(value: int) -> str:
    return hex(value)


def request_params(tx: dict[str, Any], address: str) -> dict[str, Any]:
    """``tx`` (eth-account's EIP-1559 dict) as the signing services take it."""
    from eth_utils.address import to_checksum_address

    data = tx.get("data", "0x")
    data_hex = data if isinstance(data, str) else "0x" + bytes(data).hex()
    return {
        "from": to_checksum_address(address),
        "to": to_checksum_address(str(tx["to"])),
        "gas": _hex(int(tx["gas"])),
        "maxFeePerGas": _hex(int(tx["maxFeePerGas"])),
        "maxPriorityFeePerGas": _hex(int(tx["maxPriorityFeePerGas"])),
        "value": _hex(int(tx.get("value", 0))),
        "data": data_hex.lower(),
        "nonce": _hex(int(tx["nonce"])),
        "chainId": _hex(int(tx["chainId"])),
        "type": "0x2",
    }


def checked(tx: dict[str, Any], answer: Any, address: str, signer_id: str) -> SignedTransaction:
    """The signing service's ``answer`` to ``tx``, checked (see the module):
    SigningFailed for anything but ``tx`` signed by ``address``."""
    from eth_account import Account
    from eth_account.typed_transactions.typed_transaction import TypedTransaction
    from eth_utils.crypto import keccak
    from hexbytes import HexBytes

    raw_text = answer.get("raw") if isinstance(answer, dict) else answer
    if not isinstance(raw_text, str) or not _RAW_HEX.match(raw_text):
        signing_failed(
            signer_id, "the answer is not a raw transaction (0x and hex digits, or {raw, tx})"
        )
    raw = bytes.fromhex(raw_text[2:])
    if raw[0] != 2:
        signing_failed(
            signer_id, f"the answer is a transaction of type {raw[0]}, not an EIP-1559 one"
        )
    signed: Any = None
    sender = ""
    try:
        signed = TypedTransaction.from_bytes(HexBytes(raw)).as_dict()
        sender = str(Account.recover_transaction(raw)).lower()
    except Exception:  # eth-account raises several kinds for bytes that do not decode
        signed = None
    if signed is None:
        signing_failed(signer_id, "the answer does not decode to a signed EIP-1559 transaction")
    if int(signed.get("s", 0)) > SECP256K1_N // 2:
        signing_failed(signer_id, "the signature's s is high (EIP-2): nodes refuse it")
    if sender != address:
        signing_failed(signer_id, f"the transaction is signed by {sender}, not by {address}")
    asked = TypedTransaction.from_dict(tx).as_dict()
    fields = (
        "chainId",
        "nonce",
        "to",
        "value",
        "data",
        "gas",
        "maxFeePerGas",
        "maxPriorityFeePerGas",
        "accessList",
    )
    other = [f for f in fields if _same(signed.get(f)) != _same(asked.get(f))]
    if other:
        signing_failed(
            signer_id,
            "the service signed another transaction than the one asked (its "
            + ", ".join(other)
            + " differ)",
        )
    return SignedTransaction(raw=raw, tx_hash="0x" + keccak(raw).hex())


def _same(value: Any) -> Any:
    """A field's value in one form for comparison (bytes, ints, tuples of them)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, list | tuple):
        return tuple(_same(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _same(v)) for k, v in value.items()))
    return value


class RemoteSigner(AccountSigner):
    """An account whose key a JSON-RPC signing service holds; holds no key."""

    __slots__ = ("_api", "_timeout", "_url")
    kept = "its URL may hold a credential"

    def __init__(self, signer_id: str, address: str, url: str, api: str, timeout: float) -> None:
        super().__init__(signer_id, address)
        self._url = url
        self._api = api
        self._timeout = timeout

    async def sign_transaction(self, tx: dict[str, Any]) -> SignedTransaction:
        """``tx`` signed by the service and checked (see the module); never broadcasts."""
        from qtg_runner.chains.evm_rpc import EvmRpc, EvmRpcError, RpcError

        params: dict[str, Any] | None = None
        try:
            params = request_params(tx, self._address)
        except (KeyError, TypeError, ValueError):
            params = None
        if params is None:
            refuse(
                self._signer_id,
                "the transaction is not an EIP-1559 transaction with chainId, nonce, to, "
                "value, data, gas, maxFeePerGas and maxPriorityFeePerGas",
            )
        method = APIS[self._api][1]
        answer: Any = None
        problem = ""
        try:
            async with EvmRpc(self._url, timeout=self._timeout) as rpc:
                answer = await rpc.request(method, [params])
        except RpcError as exc:
            problem = f"it answered error {exc.code} {exc.message[:200]!r}"
        except EvmRpcError as exc:
            problem = f"{type(exc).__name__}: {str(exc)[:300]}"
        if problem:
            signing_failed(self._signer_id, f"{method} failed ({problem})")
        return checked(tx, answer, self._address, self._signer_id)


def _accounts(signer_id: str, url: str, method: str, timeout: float) -> list[str]:
    """The service's answer to ``method`` (its accounts), at load: a blocking call."""
    import httpx

    from qtg_runner.chains.evm_rpc import redact_url
    from qtg_runner.tls import client_ssl_context

    where = f"{method} on {redact_url(url)}"
    body, status, problem = b"", 0, ""
    try:
        with (
            httpx.Client(timeout=timeout, verify=client_ssl_context()) as client,
            client.stream(
                "POST", url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": []}
            ) as response,
        ):
            status = response.status_code
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    problem = f"an answer larger than {MAX_ANSWER_BYTES} bytes"
                    break
    except httpx.HTTPError as exc:
        problem = f"no answer ({type(exc).__name__})"
    if problem:
        refuse(signer_id, f"{where}: {problem}: check that the signing service runs there")
    answer: Any = None
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or status >= 400 or "error" in answer:
        error = answer.get("error") if isinstance(answer, dict) else None
        said = f": {str(error)[:200]}" if error else ""
        refuse(signer_id, f"{where}: HTTP {status}, no list of accounts{said}")
    result = answer.get("result")
    if not isinstance(result, list) or not all(isinstance(a, str) for a in result):
        refuse(signer_id, f"{where}: the answer is not a list of addresses")
    return [a.lower() for a in result]


def load_remote(signer_id: str, env: Mapping[str, str]) -> RemoteSigner:
    """qtg_runner.signers.load for ``remote:NAME/0xADDRESS`` (see the module)."""
    found = _ID.match(signer_id) if describe_id(signer_id) == signer_id else None
    if found is None:
        refuse(signer_id, f"a remote signer id is {ACCEPTED_FORM}")
    name, address = found.group(1), found.group(2).lower()
    url = env.get(url_env(name), "").strip()
    if not url:
        refuse(
            signer_id,
            f"{url_env(name)} is not set: set it to the signing service's JSON-RPC URL",
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        refuse(signer_id, f"{url_env(name)} is not an http(s)://host[:port]/... URL")
    api = env.get(api_env(name), "").strip().lower() or "eth"
    if api not in APIS:
        refuse(signer_id, f"{api_env(name)} is eth (the default) or clef, not {api!r}")
    timeout = timeout_s(signer_id, env)
    accounts = _accounts(signer_id, url, APIS[api][0], timeout)
    if address not in accounts:
        refuse(
            signer_id,
            f"the signing service at {url_env(name)} does not hold the key of {address} "
            f"(it lists {len(accounts)} other account(s)): add the key to the service, or "
            "correct the signer id",
        )
    return RemoteSigner(signer_id, address, url, api, timeout)
