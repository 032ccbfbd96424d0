"""Signers: what holds a treasury account's key and signs its transactions.

The engine stores a signer *id* per treasury account (treasury_accounts.signer_id),
never a key. A runner turns the id into a Signer at start (qtg_runner.signers.load);
executors sign through the Signer interface only, so a KMS or HSM signer can
replace the local one without touching an executor.

A key never enters the database, a log line, an exception message or argv.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator, Mapping

from qtg_runner.signers.base import (
    SIGNER_ID_PATTERN,
    SignedTransaction,
    Signer,
    SignerError,
    describe_id,
)

__all__ = [
    "SIGNER_ID_PATTERN",
    "SignedTransaction",
    "Signer",
    "SignerError",
    "SignerSet",
    "describe_id",
    "load",
    "load_async",
]


def load(signer_id: str, env: Mapping[str, str] | None = None) -> Signer:
    """The Signer a signer id names (treasury_accounts.signer_id):

    - ``env:QTG_SIGNER_NAME``: the private key (0x and 64 hex digits) is in the
      environment variable QTG_SIGNER_NAME (an id that names a variable without
      that prefix, HOME or QTG_DATABASE_URL say, is refused before it is read);
    - ``keystore:NAME``: the encrypted keystore file (eth-account's ``Account.encrypt``
      JSON, scrypt or pbkdf2) ``NAME.json`` in the directory ``QTG_KEYSTORE_DIR``,
      its password in ``QTG_KEYSTORE_PASSWORD`` or, when that is unset or empty, in
      the file ``QTG_KEYSTORE_PASSWORD_FILE`` (mode 0600 or stricter).

    ``env`` is the environment to read (``os.environ`` when None). A keystore is
    decrypted here, once (scrypt: most of a second; ``load_async`` runs it off the
    event loop). Raises SignerError for anything else, naming the id and what to do.
    """
    from qtg_runner.signers.local import load_local

    return load_local(signer_id, os.environ if env is None else env)


async def load_async(signer_id: str, env: Mapping[str, str] | None = None) -> Signer:
    """``load`` in a worker thread: a keystore's key derivation is CPU-bound."""
    return await asyncio.to_thread(load, signer_id, env)


class SignerSet:
    """The signers of a set of treasury accounts, one per signer id (an id shared by
    several chains' accounts is loaded once)."""

    def __init__(self, signers: Iterable[Signer] = ()) -> None:
        self._signers: dict[str, Signer] = {s.signer_id: s for s in signers}

    @classmethod
    def load(cls, signer_ids: Iterable[str], env: Mapping[str, str] | None = None) -> SignerSet:
        """Load every distinct id of ``signer_ids``; the first that fails raises."""
        return cls(load(signer_id, env) for signer_id in dict.fromkeys(signer_ids))

    @classmethod
    async def load_async(
        cls, signer_ids: Iterable[str], env: Mapping[str, str] | None = None
    ) -> SignerSet:
        return await asyncio.to_thread(cls.load, list(signer_ids), env)

    def __len__(self) -> int:
        return len(self._signers)

    def __contains__(self, signer_id: object) -> bool:
        return signer_id in self._signers

    def __iter__(self) -> Iterator[Signer]:
        return iter(self._signers.values())

    def __repr__(self) -> str:
        return f"SignerSet({list(self._signers.values())!r})"

    def get(self, signer_id: str) -> Signer:
        try:
            return self._signers[signer_id]
        except KeyError:
            raise SignerError(
                f"signer {describe_id(signer_id)} is not loaded in this runner: "
                "load it with the treasury accounts' other signers at start"
            ) from None

    def for_account(self, address: str, signer_id: str) -> Signer:
        """The signer of the treasury account ``address`` recorded with
        ``signer_id``, checked to hold that account's key: a key that signs for
        another address is refused rather than used."""
        signer = self.get(signer_id)
        if signer.address != address.lower():
            raise SignerError(
                f"signer {signer_id} holds the key of {signer.address}, not of the treasury "
                f"account {address.lower()} recorded with it: correct the signer id in the "
                "chain registry or the key the signer loads"
            )
        return signer
