"""The AWS KMS signer: the account's key is an asymmetric KMS key (key spec
ECC_SECG_P256K1, usage SIGN_VERIFY) that never leaves KMS; the runner holds its
id, its address and a boto3 client, never a private key.

Signer id: ``kms:KEY`` where KEY is what KMS takes as a KeyId: the key's id
(``1234abcd-12ab-...``), an alias (``alias/treasury``) or a key or alias ARN
(``arn:aws:kms:eu-west-1:111122223333:key/...``).

At load (``load_kms``): GetPublicKey; the key must be ECC_SECG_P256K1 and
SIGN_VERIFY; the address is the last 20 bytes of the keccak-256 of the
64-byte point in its DER SubjectPublicKeyInfo. To sign (``sign_transaction``):
the unsigned EIP-1559 transaction as eth-account serialises it, its keccak-256
digest signed by KMS (Sign, MessageType DIGEST, ECDSA_SHA_256), the DER
signature parsed, s made low (s > n/2 becomes n - s, as EIP-2 requires), the
recovery id found by recovering the signer's address, and the signed
transaction assembled; its sender is recovered once more before it is
returned.

Settings, from the environment given to ``load``:

- the region: the key ARN's, else AWS_REGION or AWS_DEFAULT_REGION;
- QTG_KMS_ENDPOINT_URL: another endpoint (a VPC endpoint, a KMS-compatible
  server; the tests' loopback one), unset for AWS's own;
- credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN)
  when the environment given holds them, else boto3's usual chain (profile,
  container or instance role);
- QTG_SIGNER_TIMEOUT_S: the connect and read timeout of each KMS call (10 s).

IAM: the runner's principal needs kms:GetPublicKey and kms:Sign on the key.

Failures: anything wrong at load (no region, an unknown key, another key spec
or usage, access denied) is a SignerError naming the signer id and what to do.
At sign time any failure (KMS's error, no answer in time, a signature that is
malformed or recovers to another address) is SigningFailed: retryable, and
nothing signed comes back. As in qtg_runner.signers.local, no message holds
the text of the exception that failed inside, none is chained, nothing here
logs.

boto3 is imported only when a ``kms:`` id is loaded (the ``kms`` extra:
``pip install 'qtg-engine[kms]'``); its blocking calls run in a worker thread
(asyncio.to_thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import re
from collections.abc import Mapping
from typing import Any

from qtg_runner.signers.base import (
    AccountSigner,
    SignedTransaction,
    describe_id,
    refuse,
    refuse_transaction,
    signing_failed,
)

KMS_PREFIX = "kms:"
ENDPOINT_ENV = "QTG_KMS_ENDPOINT_URL"
TIMEOUT_ENV = "QTG_SIGNER_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0
KEY_SPEC = "ECC_SECG_P256K1"
KEY_USAGE = "SIGN_VERIFY"
SIGNING_ALGORITHM = "ECDSA_SHA_256"

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
SECP256K1_P = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEFFFFFC2F

_ARN_REGION = re.compile(r"^arn:aws[a-z-]*:kms:([a-z0-9-]+):")
_EC_PUBLIC_KEY_OID = bytes.fromhex("2a8648ce3d0201")  # 1.2.840.10045.2.1
_SECP256K1_OID = bytes.fromhex("2b8104000a")  # 1.3.132.0.10


def timeout_s(signer_id: str, env: Mapping[str, str]) -> float:
    """QTG_SIGNER_TIMEOUT_S (seconds, > 0), or DEFAULT_TIMEOUT_S when unset."""
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    value = 0.0
    with contextlib.suppress(ValueError):
        value = float(text)
    if not 0 < value <= 600:
        refuse(signer_id, f"{TIMEOUT_ENV} is a number of seconds above 0 (at most 600): {text!r}")
    return value


# -- DER ------------------------------------------------------------------------------


class _BadDer(Exception):
    """Not the DER expected (what is wrong is not shown: it is the caller's to say)."""


def _der(data: bytes, pos: int, tag: int) -> tuple[bytes, int]:
    """The content of the DER element of ``tag`` at ``pos``, and the position after it."""
    if pos + 2 > len(data) or data[pos] != tag:
        raise _BadDer
    length, pos = data[pos + 1], pos + 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 2 or pos + count > len(data):
            raise _BadDer
        length = int.from_bytes(data[pos : pos + count], "big")
        if length < 0x80 or (count == 2 and length < 0x100):
            raise _BadDer  # not the shortest form
        pos += count
    if pos + length > len(data):
        raise _BadDer
    return data[pos : pos + length], pos + length


def public_point(spki: bytes) -> bytes:
    """The 64-byte point (x then y) of a DER SubjectPublicKeyInfo holding an
    uncompressed secp256k1 public key; _BadDer for anything else."""
    body, end = _der(spki, 0, 0x30)
    if end != len(spki):
        raise _BadDer
    algorithm, pos = _der(body, 0, 0x30)
    bits, end = _der(body, pos, 0x03)
    if end != len(body):
        raise _BadDer
    oid, at = _der(algorithm, 0, 0x06)
    curve, at = _der(algorithm, at, 0x06)
    if oid != _EC_PUBLIC_KEY_OID or curve != _SECP256K1_OID or at != len(algorithm):
        raise _BadDer
    if len(bits) != 66 or bits[:2] != b"\x00\x04":
        raise _BadDer  # no unused bits, an uncompressed point
    point = bits[2:]
    x, y = int.from_bytes(point[:32], "big"), int.from_bytes(point[32:], "big")
    if not (x < SECP256K1_P and y < SECP256K1_P) or (y * y - x * x * x - 7) % SECP256K1_P:
        raise _BadDer  # not on the curve
    return point


def signature_rs(der: bytes) -> tuple[int, int]:
    """r and s of a DER ECDSA-Sig-Value (SEQUENCE of two INTEGERs), each in
    1..n-1; _BadDer for anything else."""
    body, end = _der(der, 0, 0x30)
    if end != len(der):
        raise _BadDer
    values = []
    pos = 0
    for _ in range(2):
        raw, pos = _der(body, pos, 0x02)
        if not raw or raw[0] & 0x80 or (len(raw) > 1 and raw[0] == 0 and not raw[1] & 0x80):
            raise _BadDer  # negative, or not minimal
        value = int.from_bytes(raw, "big")
        if not 0 < value < SECP256K1_N:
            raise _BadDer
        values.append(value)
    if pos != len(body):
        raise _BadDer
    return values[0], values[1]


def address_of_point(point: bytes) -> str:
    from eth_utils.crypto import keccak

    return "0x" + keccak(point)[12:].hex()


# -- the signer -----------------------------------------------------------------------


def recovery_id(digest: bytes, r: int, s: int, address: str) -> int | None:
    """The v (0 or 1) with which (r, s) over ``digest`` recovers ``address``, or None."""
    from eth_keys.datatypes import Signature

    for v in (0, 1):
        try:
            public = Signature(vrs=(v, r, s)).recover_public_key_from_msg_hash(digest)
        except Exception:  # eth-keys raises several kinds for a point that is not there
            continue
        if public.to_address().lower() == address:
            return v
    return None


def assemble(tx: dict[str, Any], address: str, der: bytes, signer_id: str) -> SignedTransaction:
    """The signed transaction of ``tx`` from the DER signature ``der`` over its
    signing digest, made low-s, with the recovery id that gives ``address``;
    SigningFailed when the signature is malformed or is not ``address``'s."""
    from eth_account import Account
    from eth_account.typed_transactions.typed_transaction import TypedTransaction
    from eth_utils.crypto import keccak

    unsigned = TypedTransaction.from_dict(tx)
    digest = unsigned.hash()
    rs: tuple[int, int] | None = None
    with contextlib.suppress(_BadDer):
        rs = signature_rs(der)
    if rs is None:
        signing_failed(signer_id, f"the signature is not a DER ECDSA signature ({len(der)} bytes)")
    r, s = rs
    if s > SECP256K1_N // 2:
        s = SECP256K1_N - s
    v = recovery_id(digest, r, s, address)
    if v is None:
        signing_failed(
            signer_id,
            f"the signature does not recover to {address} (another key signed, or another message)",
        )
    fields = dict(unsigned.as_dict())
    fields.update(v=v, r=r, s=s)
    raw = bytes(TypedTransaction.from_dict(fields).encode())
    sender = str(Account.recover_transaction(raw)).lower()
    if sender != address:
        signing_failed(signer_id, f"the signed transaction recovers to {sender}, not {address}")
    return SignedTransaction(raw=raw, tx_hash="0x" + keccak(raw).hex())


class KmsSigner(AccountSigner):
    """A KMS key's account: signs through KMS's Sign; holds no private key."""

    __slots__ = ("_client", "_key_id")
    kept = "its client holds credentials"

    def __init__(self, signer_id: str, key_id: str, address: str, client: Any) -> None:
        super().__init__(signer_id, address)
        self._key_id = key_id
        self._client = client

    async def sign_transaction(self, tx: dict[str, Any]) -> SignedTransaction:
        """``tx`` signed by KMS (see the module); never broadcasts. A transaction
        eth-account cannot serialise is a SignerError (not retryable); any
        failure of KMS or of its answer is SigningFailed."""
        digest = self._digest(tx)
        der = await asyncio.to_thread(self._sign_digest, digest)
        return assemble(tx, self._address, der, self._signer_id)

    def _digest(self, tx: dict[str, Any]) -> bytes:
        from eth_account.typed_transactions.typed_transaction import TypedTransaction

        digest: bytes | None = None
        with contextlib.suppress(Exception):  # eth-account's messages are not ours to pass on
            digest = bytes(TypedTransaction.from_dict(tx).hash())
        if digest is None:
            refuse_transaction(self._signer_id, tx, "cannot serialise")
        return digest

    def _sign_digest(self, digest: bytes) -> bytes:
        answer: Any = None
        problem = ""
        try:
            answer = self._client.sign(
                KeyId=self._key_id,
                Message=digest,
                MessageType="DIGEST",
                SigningAlgorithm=SIGNING_ALGORITHM,
            )
        except Exception as exc:  # botocore raises many kinds; none is passed on
            problem = _kms_problem(exc)
        if problem:
            signing_failed(self._signer_id, f"KMS Sign failed ({problem})")
        signature = answer.get("Signature") if isinstance(answer, dict) else None
        if not isinstance(signature, bytes | bytearray) or not signature:
            signing_failed(self._signer_id, "KMS Sign answered no signature")
        return bytes(signature)


def _kms_problem(exc: Exception) -> str:
    """What failed, as a message may say it: KMS's error code (AccessDeniedException,
    DisabledException, NotFoundException...) or the exception's type (a timeout,
    a refused connection), never its text."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if isinstance(code, str) and re.fullmatch(r"[A-Za-z0-9.]{1,80}", code):
            return code
    return type(exc).__name__


def _client(signer_id: str, key_id: str, env: Mapping[str, str]) -> Any:
    boto3: Any = None
    botocore_config: Any = None
    with contextlib.suppress(ImportError):
        boto3 = importlib.import_module("boto3")
        botocore_config = importlib.import_module("botocore.config")
    if boto3 is None or botocore_config is None:
        refuse(
            signer_id,
            "boto3 is not installed: install the kms extra (pip install 'qtg-engine[kms]')",
        )
    arn_region = _ARN_REGION.match(key_id)
    region = (
        arn_region.group(1)
        if arn_region
        else (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "").strip()
    )
    if not region:
        refuse(
            signer_id,
            "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION), or name the key by its ARN",
        )
    timeout = timeout_s(signer_id, env)
    credentials = {
        name.lower(): env[name]
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
        if env.get(name)
    }
    endpoint = env.get(ENDPOINT_ENV, "").strip() or None
    made: Any = None
    problem = ""
    try:
        session = boto3.session.Session(region_name=region, **credentials)
        made = session.client(
            "kms",
            endpoint_url=endpoint,
            config=botocore_config.Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries={"max_attempts": 2, "mode": "standard"},
            ),
        )
    except Exception as exc:
        problem = type(exc).__name__
    if made is None:
        refuse(signer_id, f"the KMS client could not be made ({problem}): check {ENDPOINT_ENV}")
    return made


def load_kms(signer_id: str, env: Mapping[str, str]) -> KmsSigner:
    """qtg_runner.signers.load for ``kms:KEY`` (see the module)."""
    key_id = signer_id.removeprefix(KMS_PREFIX)
    if not key_id or describe_id(signer_id) != signer_id:
        refuse(signer_id, "a KMS signer id is kms:KEY (a key id, alias/NAME or an ARN)")
    client = _client(signer_id, key_id, env)
    answer: Any = None
    problem = ""
    try:
        answer = client.get_public_key(KeyId=key_id)
    except Exception as exc:
        problem = _kms_problem(exc)
    if problem:
        refuse(
            signer_id,
            f"KMS GetPublicKey of {key_id} failed ({problem}): check that the key exists in "
            "the region and that the runner may call kms:GetPublicKey and kms:Sign on it",
        )
    if not isinstance(answer, dict):
        refuse(signer_id, "KMS GetPublicKey answered nothing")
    spec = answer.get("KeySpec") or answer.get("CustomerMasterKeySpec")
    usage = answer.get("KeyUsage")
    if spec != KEY_SPEC or usage != KEY_USAGE:
        refuse(
            signer_id,
            f"the KMS key {key_id} is {spec} for {usage}: an Ethereum account needs an "
            f"{KEY_SPEC} key for {KEY_USAGE}",
        )
    algorithms = answer.get("SigningAlgorithms")
    if isinstance(algorithms, list) and SIGNING_ALGORITHM not in algorithms:
        refuse(signer_id, f"the KMS key {key_id} does not sign with {SIGNING_ALGORITHM}")
    spki = answer.get("PublicKey")
    point: bytes | None = None
    if isinstance(spki, bytes | bytearray):
        with contextlib.suppress(_BadDer):
            point = public_point(bytes(spki))
    if point is None:
        refuse(
            signer_id,
            f"KMS GetPublicKey of {key_id} answered no secp256k1 SubjectPublicKeyInfo",
        )
    return KmsSigner(signer_id, key_id, address_of_point(point), client)
