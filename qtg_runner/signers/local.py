"""The local signer: a private key held in this process's memory, from the
environment (``env:QTG_SIGNER_NAME``) or an encrypted keystore file
(``keystore:NAME``), and signing with eth-account.

An ``env:`` id names a variable whose name starts with ENV_NAME_PREFIX, and no
other: the runner's environment holds other secrets (QTG_DATABASE_URL with its
password, the keystore password, keys meant for something else), and a signer id
is data in the chain registry, so an id that could name any variable would have
the runner load, sign with or report on whichever of them it names. Any other
name is refused before the variable is read.

What stays secret, and how:

- The key lives in one private attribute of a LocalSigner; ``repr`` and ``str``
  show the signer id and the address only, and a signer is never pickled or
  copied (its key would leave with it).
- No SignerError carries the key, the password or the text of the exception
  that failed inside (eth-account's and eth-keyfile's messages are not ours to
  vouch for): each is raised outside the ``except`` block, so nothing is chained
  to it, with a message that names the signer id and what to do.
- Nothing here logs.

Memory: a keystore's scrypt needs 128 * n * r bytes at once (256 MiB at
eth-account's default n = 2^18, r = 8), which a runner would keep as its peak
resident set for the rest of its life. A key derivation that needs more than
KDF_IN_PROCESS_BYTES is therefore run in a short-lived child Python process
(``_decrypt_in_child``): the keystore JSON and the password go to it on its
stdin, the key comes back on its stdout, nothing on its command line or in its
environment; the answer (the key, or no key) is the same as in process.

eth-account is imported where a key is used, not with this module: its import
takes about half a second of CPU (eth-keyfile's BLS tables), which every
``qtg`` command and every worker process would pay whether it signs or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from qtg_runner.signers.base import (
    AccountSigner,
    SignedTransaction,
    describe_id,
    refuse,
    refuse_transaction,
)

ENV_PREFIX = "env:"
KEYSTORE_PREFIX = "keystore:"
ENV_NAME_PREFIX = "QTG_SIGNER_"
"""The only variables an ``env:`` signer id may name start with this."""

KEYSTORE_DIR_ENV = "QTG_KEYSTORE_DIR"
KEYSTORE_PASSWORD_ENV = "QTG_KEYSTORE_PASSWORD"
KEYSTORE_PASSWORD_FILE_ENV = "QTG_KEYSTORE_PASSWORD_FILE"

ACCEPTED_FORMS = (
    f"env:{ENV_NAME_PREFIX}NAME (the private key, 0x and 64 hex digits, in the environment "
    f"variable {ENV_NAME_PREFIX}NAME) "
    f"or keystore:NAME (the encrypted keystore file NAME.json in ${KEYSTORE_DIR_ENV}, its "
    f"password in ${KEYSTORE_PASSWORD_ENV} or in the file ${KEYSTORE_PASSWORD_FILE_ENV}), "
    "or, with no key in the runner, kms:KEY (an AWS KMS key) or remote:NAME/0xADDRESS (a "
    "JSON-RPC signing service)"
)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,123}$")
_KEYSTORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,117}$")
"""A file name in the keystore directory: no '/', so no path leaves it."""
_PRIVATE_KEY = re.compile(r"^0x[0-9a-fA-F]{64}$")
_SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141

KDF_IN_PROCESS_BYTES = 16 * 2**20
"""A keystore whose key derivation needs more memory than this (scrypt's 128 * n
* r bytes) is decrypted in a child process (see the module's header)."""

KDF_CHILD_TIMEOUT_S = 300.0

_CHILD_PROGRAM = """
import json, sys
from eth_account import Account
given = json.loads(sys.stdin.read())
try:
    key = bytes(Account.decrypt(given["keystore"], given["password"]))
except Exception:
    sys.exit(3)
sys.stdout.write(key.hex())
"""
"""The child's program: only eth-account, nothing of the runner; exit 3 when the
password does not open the keystore (no message: eth-account's is not ours)."""


class LocalSigner(AccountSigner):
    """One account's key in this process's memory; signs with eth-account."""

    __slots__ = ("__key",)
    kept = "its key stays in this process"

    def __init__(self, signer_id: str, key: bytes) -> None:
        if len(key) != 32 or not 0 < int.from_bytes(key, "big") < _SECP256K1_N:
            refuse(signer_id, "the key is not a secp256k1 private key (32 bytes, in range)")
        from eth_account import Account

        super().__init__(signer_id, str(Account.from_key(key).address).lower())
        self.__key = bytes(key)

    async def sign_transaction(self, tx: dict[str, Any]) -> SignedTransaction:
        """Sign ``tx`` inline (a few milliseconds of CPU); never broadcasts. A
        transaction eth-account refuses raises SignerError naming the signer and
        the transaction's fields (never the key)."""
        return self.sign_transaction_sync(tx)

    def sign_transaction_sync(self, tx: dict[str, Any]) -> SignedTransaction:
        from eth_account import Account

        signed: Any = None
        with contextlib.suppress(Exception):
            signed = Account.sign_transaction(tx, self.__key)
        if signed is None:
            refuse_transaction(self._signer_id, tx, "refused to sign")
        return SignedTransaction(
            raw=bytes(signed.raw_transaction), tx_hash="0x" + bytes(signed.hash).hex()
        )


def _reason(exc: Exception) -> str:
    return str(getattr(exc, "strerror", None) or type(exc).__name__)


def load_local(signer_id: str, env: Mapping[str, str]) -> LocalSigner:
    """qtg_runner.signers.load for the local forms (env:QTG_SIGNER_NAME, keystore:NAME)."""
    if not isinstance(signer_id, str) or describe_id(signer_id) != signer_id:
        refuse(signer_id, f"not a signer id; the accepted forms are {ACCEPTED_FORMS}")
    if signer_id.startswith(ENV_PREFIX):
        return _from_env(signer_id, signer_id.removeprefix(ENV_PREFIX), env)
    if signer_id.startswith(KEYSTORE_PREFIX):
        return _from_keystore(signer_id, signer_id.removeprefix(KEYSTORE_PREFIX), env)
    refuse(signer_id, f"unknown signer id form; the accepted forms are {ACCEPTED_FORMS}")


def _parse_key(text: str) -> bytes | None:
    """The 32 bytes of ``0x`` + 64 hex digits (surrounding whitespace ignored), or None."""
    text = text.strip()
    if not _PRIVATE_KEY.match(text):
        return None
    key = bytes.fromhex(text[2:])
    return key if 0 < int.from_bytes(key, "big") < _SECP256K1_N else None


def _from_env(signer_id: str, name: str, env: Mapping[str, str]) -> LocalSigner:
    if not _ENV_NAME.match(name):
        refuse(signer_id, f"{name!r} is not an environment variable name (letters, digits, _)")
    if not name.startswith(ENV_NAME_PREFIX) or name == ENV_NAME_PREFIX:
        refuse(
            signer_id,
            f"{name} is not a signer's variable: an env: signer id names a variable whose name "
            f"starts with {ENV_NAME_PREFIX} (env:{ENV_NAME_PREFIX}TREASURY), never another of the "
            "runner's environment; put the key in such a variable and register that id",
        )
    value = env.get(name)
    if value is None or not value.strip():
        refuse(
            signer_id,
            f"the environment variable {name} is not set: set it to the account's private key "
            "(0x and 64 hex digits) in the runner's environment",
        )
    key = _parse_key(value)
    if key is None:
        refuse(
            signer_id,
            f"the environment variable {name} does not hold a private key: it must be 0x and "
            "64 hex digits (a secp256k1 key); its value is not shown",
        )
    return LocalSigner(signer_id, key)


def _from_keystore(signer_id: str, name: str, env: Mapping[str, str]) -> LocalSigner:
    if not _KEYSTORE_NAME.match(name):
        refuse(
            signer_id,
            f"{name!r} is not a keystore name (letters, digits and _.-, starting with a "
            "letter or digit; the file is NAME.json in the keystore directory)",
        )
    directory = env.get(KEYSTORE_DIR_ENV, "").strip()
    if not directory:
        refuse(
            signer_id,
            f"{KEYSTORE_DIR_ENV} is not set: set it to the directory that holds {name}.json",
        )
    path = Path(directory) / f"{name}.json"
    keystore = _read_keystore(signer_id, path)
    password = _keystore_password(signer_id, env)
    failed = ""
    try:
        key = _decrypt(keystore, password)
    except _ChildFailed as exc:
        key, failed = None, str(exc)
    if failed:
        refuse(
            signer_id,
            f"the child process that derives the key of {path} {failed} (its memory-hard "
            f"scrypt runs outside the runner): check that {sys.executable} runs here",
        )
    if key is None:
        refuse(
            signer_id,
            f"the password does not open {path} (a wrong password, or a damaged file): check "
            f"${KEYSTORE_PASSWORD_ENV} / ${KEYSTORE_PASSWORD_FILE_ENV}",
        )
    signer = LocalSigner(signer_id, key)
    recorded = str(keystore.get("address", "")).lower().removeprefix("0x")
    if recorded and recorded != signer.address[2:]:
        refuse(
            signer_id,
            f"{path} says it holds the key of 0x{recorded} but its key is {signer.address}'s: "
            "the file was altered; restore it from a backup",
        )
    return signer


def kdf_bytes(keystore: Mapping[str, Any]) -> int:
    """The memory a keystore's key derivation needs at once: scrypt's 128 * n * r
    bytes (0 for pbkdf2, or a keystore whose parameters cannot be read, which
    eth-account then refuses in process)."""
    crypto = keystore.get("crypto", keystore.get("Crypto"))
    if not isinstance(crypto, Mapping) or crypto.get("kdf") != "scrypt":
        return 0
    params = crypto.get("kdfparams")
    if not isinstance(params, Mapping):
        return 0
    n, r = params.get("n"), params.get("r")
    if not isinstance(n, int) or not isinstance(r, int) or n <= 0 or r <= 0:
        return 0
    return 128 * n * r


class _ChildFailed(Exception):
    """The key derivation's child process did not run to an answer."""


def _decrypt(keystore: dict[str, Any], password: str) -> bytes | None:
    """The keystore's key, or None when the password does not open it;
    _ChildFailed when the child process that derives it could not answer."""
    if kdf_bytes(keystore) > KDF_IN_PROCESS_BYTES:
        return _decrypt_in_child(keystore, password)
    from eth_account import Account

    key: bytes | None = None
    with contextlib.suppress(Exception):
        key = bytes(Account.decrypt(keystore, password))
    return key


_CHILD_ENV = ("PATH", "LD_LIBRARY_PATH", "SYSTEMROOT")
"""What the child's environment keeps of this process's: what starting Python
may need, nothing else (the runner's environment may hold env: keys)."""


def _decrypt_in_child(keystore: dict[str, Any], password: str) -> bytes | None:
    """``Account.decrypt`` in a child Python process (-I: no PYTHON* variables,
    no user site), so that scrypt's memory is the child's peak, never this
    process's. None when the password does not open the keystore (the child's
    exit 3); _ChildFailed when it could not run, timed out or answered
    anything but 32 bytes of key."""
    given = json.dumps({"keystore": keystore, "password": password}).encode()
    env = {name: os.environ[name] for name in _CHILD_ENV if name in os.environ}
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD_PROGRAM],
            input=given,
            capture_output=True,
            timeout=KDF_CHILD_TIMEOUT_S,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        raise _ChildFailed("could not be started or did not finish in time") from None
    finally:
        del given
    if done.returncode == 3:
        return None
    answer = done.stdout.strip()
    if done.returncode != 0 or not re.fullmatch(rb"[0-9a-f]{64}", answer):
        raise _ChildFailed(f"ended with exit code {done.returncode} and no key")
    return bytes.fromhex(answer.decode("ascii"))


def _read_keystore(signer_id: str, path: Path) -> dict[str, Any]:
    raw, problem = "", ""
    try:
        raw = path.read_text()
    except FileNotFoundError:
        problem = f"no keystore file {path}: put the account's keystore there"
    except (OSError, UnicodeDecodeError) as exc:
        problem = f"the keystore file {path} is unreadable ({_reason(exc)})"
    if problem:
        refuse(signer_id, problem)
    parsed: Any = None
    with contextlib.suppress(ValueError):
        parsed = json.loads(raw)
    if not isinstance(parsed, dict) or not isinstance(
        parsed.get("crypto", parsed.get("Crypto")), dict
    ):
        refuse(
            signer_id,
            f"{path} is not an encrypted keystore (the JSON of eth-account's Account.encrypt)",
        )
    return parsed


def _keystore_password(signer_id: str, env: Mapping[str, str]) -> str:
    password = env.get(KEYSTORE_PASSWORD_ENV, "")
    if password:
        return password
    file_name = env.get(KEYSTORE_PASSWORD_FILE_ENV, "").strip()
    if not file_name:
        refuse(
            signer_id,
            f"no keystore password: set {KEYSTORE_PASSWORD_ENV}, or "
            f"{KEYSTORE_PASSWORD_FILE_ENV} to a file (mode 0600) that holds it",
        )
    path = Path(file_name)
    data, problem = b"", ""
    try:
        with path.open("rb") as f:
            # the mode of the file opened, not of a path that may be swapped after
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                problem = f"the keystore password file {path} is not a regular file"
            elif st.st_mode & 0o077:
                problem = (
                    f"the keystore password file {path} is open to others (mode "
                    f"{stat.S_IMODE(st.st_mode):04o}): `chmod 600 {path}`, and treat the "
                    "password as exposed"
                )
            else:
                data = f.read()
    except FileNotFoundError:
        problem = f"no keystore password file {path} (${KEYSTORE_PASSWORD_FILE_ENV})"
    except OSError as exc:
        problem = f"the keystore password file {path} is unreadable ({_reason(exc)})"
    if problem:
        refuse(signer_id, problem)
    text: str | None = None
    with contextlib.suppress(UnicodeDecodeError):
        text = data.decode("utf-8").rstrip("\r\n")
    if not text:
        refuse(signer_id, f"the keystore password file {path} is empty or not UTF-8 text")
    return text


def write_keystore(
    path: Path,
    key: bytes,
    password: str,
    kdf: Literal["scrypt", "pbkdf2"] = "scrypt",
    iterations: int | None = None,
) -> str:
    """Encrypt ``key`` with ``password`` into a new keystore file ``path`` (mode
    0600; an existing file is never overwritten: FileExistsError); ``iterations``
    None is eth-account's default work factor (scrypt n=2^18), the one real keys
    get. The account's address is returned."""
    from eth_account import Account

    keystore = Account.encrypt(key, password, kdf=kdf, iterations=iterations)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(keystore, f)
        f.write("\n")
    return "0x" + str(keystore["address"]).lower().removeprefix("0x")
