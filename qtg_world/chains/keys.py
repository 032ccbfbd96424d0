"""The local chains' treasury keys: fresh keys (eth-account ``Account.create()``)
kept as encrypted keystore files in the chains' state directory, the signers
``keystore:local-treasury-1`` and ``keystore:local-treasury-2`` (the same key on
every local chain).

    <chains dir>/keystore/                     mode 0700
    <chains dir>/keystore/password             0600, a random password
    <chains dir>/keystore/local-treasury-N.json  0600, eth-account's keystore JSON

A runner finds them through QTG_KEYSTORE_DIR and QTG_KEYSTORE_PASSWORD_FILE
(qtg_world.chains.local.runner_env). Files that exist are reused as they are:
`qtg chains up` run again keeps the accounts, and their funds. Nothing here reads
a key back: the address comes from the keystore's ``address`` field, the key is
decrypted only by the signer that uses it.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from qtg_runner.chains.errors import ChainError
from qtg_runner.signers.local import KEYSTORE_PREFIX, write_keystore
from qtg_world.chains.local import keystore_dir, password_file

TREASURY_KEYS = ("local-treasury-1", "local-treasury-2")
"""The keystore names of the local chains' treasury accounts."""


@dataclass(frozen=True)
class LocalKey:
    """A local treasury account: its signer id and address (never its key)."""

    signer_id: str
    address: str


def _private_file(path: Path, content: str) -> None:
    """Write a new file of mode 0600 (an existing one is never overwritten)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(content)


def read_password(state_dir: Path) -> str:
    """The local keystore's password, to open its keys: ChainError when its file
    is missing or open to others."""
    path = password_file(state_dir)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        raise ChainError(
            f"no password file {path} for the local keystore {keystore_dir(state_dir)}: "
            "restore it from where it was kept (`qtg chains up` makes it with a new keystore)"
        ) from None
    if mode & 0o077:
        raise ChainError(
            f"the local keystore's password file {path} is open to others (mode {mode:04o}): "
            f"`chmod 600 {path}`"
        )
    return path.read_text().rstrip("\r\n")


def _password(state_dir: Path, needed: bool) -> str | None:
    """The local keystore's password when ``needed`` (a new key is to be
    encrypted), made first when the keystore has none. A password file open to
    others is refused whether needed or not; so is a keystore that holds keys
    but lost its password file, since a new password would open none of them."""
    path = password_file(state_dir)
    if not path.exists():
        if not needed:
            return None
        kept = sorted(p.name for p in keystore_dir(state_dir).glob("*.json"))
        if kept:
            raise ChainError(
                f"the local keystore {keystore_dir(state_dir)} holds {', '.join(kept)} but "
                f"not its password file {path.name}: restore it from where it was kept (a "
                "new password would open none of them), or remove the keystore directory "
                "to start again with new accounts"
            )
        _private_file(path, secrets.token_urlsafe(32) + "\n")
    password = read_password(state_dir)
    return password if needed else None


def ensure_treasury_keys(
    state_dir: Path, names: Sequence[str] = TREASURY_KEYS, kdf_iterations: int | None = None
) -> list[LocalKey]:
    """The local treasury accounts of ``state_dir``, their keystore files and the
    password made first where missing (the password is read only to make a
    key). ``kdf_iterations`` is scrypt's n for new files (None: eth-account's
    default, 2^18; the tests pass a small n to stay fast)."""
    directory = keystore_dir(state_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    missing = [name for name in names if not (directory / f"{name}.json").exists()]
    password = _password(state_dir, needed=bool(missing))
    keys: list[LocalKey] = []
    for name in names:
        path = directory / f"{name}.json"
        if name not in missing:
            try:
                address = str(json.loads(path.read_text())["address"]).lower()
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ChainError(
                    f"the local keystore file {path} is unreadable ({type(exc).__name__}): "
                    "remove it (its account is then replaced by a new one) or restore it"
                ) from None
            address = "0x" + address.removeprefix("0x")
        else:
            assert password is not None
            from eth_account import Account  # imported here: see signers.local

            account = Account.create()
            address = write_keystore(path, account.key, password, iterations=kdf_iterations)
            del account
        keys.append(LocalKey(KEYSTORE_PREFIX + name, address))
    return keys
