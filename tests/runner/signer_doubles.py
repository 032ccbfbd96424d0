"""Loopback signing services for the signer tests: real HTTP servers on
127.0.0.1, each holding one secp256k1 key (made here, in the test process, as
the outside world's key: the signer under test never sees it), each able to be
told to misbehave (``mode``).

- ``RemoteSignerDouble``: a JSON-RPC signing service as Web3Signer (eth_accounts,
  eth_signTransaction answering the raw transaction) and Clef (account_list,
  account_signTransaction answering {raw, tx}) are.
- ``KmsDouble``: the JSON protocol of AWS KMS (X-Amz-Target TrentService.*,
  application/x-amz-json-1.1) for GetPublicKey and Sign (MessageType DIGEST,
  ECDSA_SHA_256) of one ECC_SECG_P256K1 key. moto's KMS (5.2.6) creates such
  keys but ignores MessageType DIGEST (it hashes the 32-byte digest again
  with SHA-256 before signing), so its signatures cannot be over the
  transaction's keccak digest: the tests sign through this double and use
  moto for what it does right (GetPublicKey and the key's spec and usage).
  Requests are not authenticated (botocore's SigV4 headers are ignored).
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eth_account import Account
from eth_account.typed_transactions.typed_transaction import TypedTransaction
from eth_keys.datatypes import PrivateKey
from eth_utils.address import to_checksum_address
from hexbytes import HexBytes

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
SPKI_PREFIX = bytes.fromhex("3056301006072a8648ce3d020106052b8104000a034200")


def der_integer(value: int) -> bytes:
    body = value.to_bytes((value.bit_length() + 7) // 8 or 1, "big")
    if body[0] & 0x80:
        body = b"\x00" + body
    return b"\x02" + bytes([len(body)]) + body


def der_signature(r: int, s: int) -> bytes:
    body = der_integer(r) + der_integer(s)
    return b"\x30" + bytes([len(body)]) + body


def high_s(s: int) -> int:
    return s if s > SECP256K1_N // 2 else SECP256K1_N - s


class _Server:
    """A ThreadingHTTPServer on a free loopback port, in a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.double = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self.delay_s = 0.0
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        double = self.server.double  # type: ignore[attr-defined]
        given = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        double.requests.append({"target": self.headers.get("X-Amz-Target"), "body": given})
        if double.delay_s:
            time.sleep(double.delay_s)
        status, body = double.handle(self.headers.get("X-Amz-Target"), given)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
            self.answer(status, body, getattr(double, "content_type", "application/json"))


class RemoteSignerDouble(_Server):
    """A JSON-RPC signing service for one account. Modes: ok, other_key (signs
    with another account's key), malformed (answers bytes that are no
    transaction), legacy (answers a type-0 transaction), high_s (the same
    signature with s made high), other_fields (signs the transaction with the
    value and the recipient changed), error (a JSON-RPC error), clef_shape
    (answers {raw, tx} even through eth_signTransaction)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.account = Account.from_key(key) if key is not None else Account.create()
        self.other = Account.create()
        super().__init__(_Handler)

    @property
    def address(self) -> str:
        return str(self.account.address).lower()

    def handle(self, _target: str | None, given: dict[str, Any]) -> tuple[int, Any]:
        method, params, rid = given["method"], given.get("params", []), given.get("id")
        if method in ("eth_accounts", "account_list"):
            return 200, {"jsonrpc": "2.0", "id": rid, "result": [self.account.address]}
        if method not in ("eth_signTransaction", "account_signTransaction"):
            return 200, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}
        if self.mode == "error":
            error = {"code": -32000, "message": "signing denied by policy"}
            return 200, {"jsonrpc": "2.0", "id": rid, "error": error}
        raw = self.sign(params[0])
        if method == "account_signTransaction" or self.mode == "clef_shape":
            result: Any = {"raw": raw, "tx": {"hash": "0x" + "00" * 32}}
        else:
            result = raw
        return 200, {"jsonrpc": "2.0", "id": rid, "result": result}

    def sign(self, p: dict[str, Any]) -> str:
        assert p["from"].lower() == self.address and p["type"] == "0x2"
        tx = {
            "type": 2,
            "chainId": int(p["chainId"], 16),
            "nonce": int(p["nonce"], 16),
            "to": p["to"],
            "value": int(p["value"], 16),
            "data": p.get("data", p.get("input", "0x")),
            "gas": int(p["gas"], 16),
            "maxFeePerGas": int(p["maxFeePerGas"], 16),
            "maxPriorityFeePerGas": int(p["maxPriorityFeePerGas"], 16),
            "accessList": [],
        }
        if self.mode == "malformed":
            return "0x02c0ffee"
        if self.mode == "legacy":
            legacy = {k: tx[k] for k in ("chainId", "nonce", "to", "value", "data", "gas")}
            legacy["gasPrice"] = tx["maxFeePerGas"]
            return "0x" + bytes(self.account.sign_transaction(legacy).raw_transaction).hex()
        if self.mode == "other_fields":
            tx = tx | {"value": tx["value"] + 10**18, "to": to_checksum_address("0x" + "ee" * 20)}
        key = self.other.key if self.mode == "other_key" else self.account.key
        signed = Account.sign_transaction(tx, key)
        raw = bytes(signed.raw_transaction)
        if self.mode == "high_s":
            fields = dict(TypedTransaction.from_bytes(HexBytes(raw)).as_dict())
            fields["s"] = high_s(int(fields["s"]))
            fields["v"] = 1 - int(fields["v"])
            raw = bytes(TypedTransaction.from_dict(fields).encode())
        return "0x" + raw.hex()


class KmsDouble(_Server):
    """One ECC_SECG_P256K1 key behind KMS's JSON protocol. Modes: ok (s as the
    signature comes), high_s (s always high, as KMS answers about half the
    time), other_key (signed by another key), malformed (a signature that is
    not DER), error (KMSInternalException), disabled (DisabledException).
    ``key_spec`` and ``key_usage`` are what GetPublicKey says."""

    content_type = "application/x-amz-json-1.1"

    def __init__(
        self, key_id: str = "1234abcd-12ab-34cd-56ef-1234567890ab", key: bytes | None = None
    ) -> None:
        self.key_id = key_id
        self._key = PrivateKey(key if key is not None else bytes(Account.create().key))
        self._other = PrivateKey(bytes(Account.create().key))
        self.key_spec = "ECC_SECG_P256K1"
        self.key_usage = "SIGN_VERIFY"
        super().__init__(_Handler)

    @property
    def address(self) -> str:
        return self._key.public_key.to_address().lower()

    def _error(self, status: int, kind: str, message: str) -> tuple[int, Any]:
        return status, {"__type": kind, "message": message}

    def handle(self, target: str | None, given: dict[str, Any]) -> tuple[int, Any]:
        if given.get("KeyId") not in (self.key_id, f"alias/{self.key_id}"):
            return self._error(400, "NotFoundException", f"Key '{given.get('KeyId')}' not found")
        arn = f"arn:aws:kms:eu-west-1:111122223333:key/{self.key_id}"
        if target == "TrentService.GetPublicKey":
            return 200, {
                "KeyId": arn,
                "PublicKey": base64.b64encode(
                    SPKI_PREFIX + b"\x04" + self._key.public_key.to_bytes()
                ).decode(),
                "KeySpec": self.key_spec,
                "CustomerMasterKeySpec": self.key_spec,
                "KeyUsage": self.key_usage,
                "SigningAlgorithms": ["ECDSA_SHA_256"],
            }
        if target != "TrentService.Sign":
            return self._error(400, "UnsupportedOperationException", str(target))
        assert given["MessageType"] == "DIGEST" and given["SigningAlgorithm"] == "ECDSA_SHA_256"
        if self.mode == "error":
            return self._error(500, "KMSInternalException", "internal error")
        if self.mode == "disabled":
            return self._error(400, "DisabledException", f"{arn} is disabled.")
        digest = base64.b64decode(given["Message"])
        key = self._other if self.mode == "other_key" else self._key
        signature = key.sign_msg_hash(digest)
        r, s = signature.r, signature.s
        if self.mode == "high_s":
            s = high_s(s)
        der = der_signature(r, s) if self.mode != "malformed" else b"\x30\x03\x02\x01"
        return 200, {
            "KeyId": arn,
            "Signature": base64.b64encode(der).decode(),
            "SigningAlgorithm": "ECDSA_SHA_256",
        }


@contextmanager
def running(double: _Server) -> Iterator[Any]:
    try:
        yield double
    finally:
        double.stop()
