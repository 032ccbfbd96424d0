"""Signers: what holds a treasury account's key and signs its transactions.

The engine stores a signer *id* per treasury account (treasury_accounts.signer_id),
never a key. A runner turns the id into a Signer at start (qtg_runner.signers.load);
executors sign through the Signer interface only, so a KMS or HSM signer can
replace the local one without touching an executor. With a ``kms:`` or
``remote:`` signer the key never enters the runner at all.

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
    SigningFailed,
    describe_id,
)

__all__ = [
    "SIGNER_ID_PATTERN",
    "SignedTransaction",
    "Signer",
    "SignerError",
    "SignerSet",
    "SigningFailed",
    "describe_id",
    "load",
    "load_async",
]

KMS_PREFIX = "kms:"
REMOTE_PREFIX = "remote:"


def load(signer_id: str, env: Mapping[str, str] | None = None) -> Signer:
    """The Signer a signer id names (treasury_accounts.signer_id):

    - ``env:QTG_SIGNER_NAME``: the private key (0x and 64 hex digits) is in the
      environment variable QTG_SIGNER_NAME (an id that names a variable without
      that prefix, HOME or QTG_DATABASE_URL say, is refused before it is read);
    - ``keystore:NAME``: the encrypted keystore file (eth-account's ``Account.encrypt``
      JSON, scrypt or pbkdf2) ``NAME.json`` in the directory ``QTG_KEYSTORE_DIR``,
      its password in ``QTG_KEYSTORE_PASSWORD`` or, when that is unset or empty, in
      the file ``QTG_KEYSTORE_PASSWORD_FILE`` (mode 0600 or stricter).

    - ``kms:KEY``: an AWS KMS key (ECC_SECG_P256K1, SIGN_VERIFY) named by its id,
      ``alias/NAME`` or ARN; the region from the ARN or AWS_REGION /
      AWS_DEFAULT_REGION, another endpoint in QTG_KMS_ENDPOINT_URL, credentials
      boto3's (qtg_runner.signers.kms; boto3 is the ``kms`` extra);
    - ``remote:NAME/0xADDRESS``: a JSON-RPC signing service (Web3Signer, Clef) at
      the URL in QTG_REMOTE_SIGNER_<NAME>_URL that holds ADDRESS's key
      (qtg_runner.signers.remote).

    ``env`` is the environment to read (``os.environ`` when None). A keystore is
    decrypted here, once (scrypt: most of a second), and a KMS key or a signing
    service is asked for its public key or accounts here: ``load_async`` runs it
    off the event loop. Raises SignerError for anything else, naming the id and
    what to do. At sign time a KMS or remote signer's failure is SigningFailed
    (retryable: nothing was signed).
    """
    environ = os.environ if env is None else env
    if isinstance(signer_id, str) and signer_id.startswith(KMS_PREFIX):
        from qtg_runner.signers.kms import load_kms

        return load_kms(signer_id, environ)
    if isinstance(signer_id, str) and signer_id.startswith(REMOTE_PREFIX):
        from qtg_runner.signers.remote import load_remote

        return load_remote(signer_id, environ)
    from qtg_runner.signers.local import load_local

    return load_local(signer_id, environ)


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
