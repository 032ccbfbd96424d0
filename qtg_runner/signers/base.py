"""What every signer is and raises (the Signer interface, SignedTransaction,
SignerError, SigningFailed), apart from the ways to load one: the local
(qtg_runner.signers.local), AWS KMS (.kms) and remote JSON-RPC (.remote)
signers implement them, and qtg_runner.signers loads them, so none imports
the package module back."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn, Protocol, runtime_checkable

__all__ = [
    "SIGNER_ID_PATTERN",
    "AccountSigner",
    "SignedTransaction",
    "Signer",
    "SignerError",
    "SigningFailed",
    "describe_id",
    "refuse",
    "refuse_transaction",
    "signing_failed",
]


@dataclass(frozen=True)
class SignedTransaction:
    """A signed EVM transaction: the raw bytes to broadcast and their hash."""

    raw: bytes = field(repr=False)
    tx_hash: str
    """0x + 64 lower-case hex digits (keccak-256 of ``raw``)."""

    @property
    def raw_hex(self) -> str:
        return "0x" + self.raw.hex()


class AccountSigner:
    """What every signer class shares: its id and its account's address, which
    are all ``repr`` shows of it, and a refusal to be pickled or copied
    (``kept`` says what would leave with it: a key, a client's credentials)."""

    __slots__ = ("_address", "_signer_id")
    kept: ClassVar[str]

    def __init__(self, signer_id: str, address: str) -> None:
        self._signer_id = signer_id
        self._address = address

    @property
    def signer_id(self) -> str:
        return self._signer_id

    @property
    def address(self) -> str:
        """The account's address, 0x + 40 lower-case hex digits."""
        return self._address

    def __repr__(self) -> str:
        return f"{type(self).__name__}(signer_id={self._signer_id!r}, address={self._address!r})"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:
        raise TypeError(f"{self!r} is not pickled or copied: {self.kept}")


@runtime_checkable
class Signer(Protocol):
    """One account's key, wherever it lives."""

    @property
    def signer_id(self) -> str: ...

    @property
    def address(self) -> str:
        """The account's address, 0x + 40 lower-case hex digits."""
        ...

    async def sign_transaction(self, tx: dict[str, Any]) -> SignedTransaction:
        """Sign ``tx`` (an EIP-1559 transaction as eth-account takes it: chainId,
        nonce, to, value, data, gas, maxFeePerGas, maxPriorityFeePerGas, type 2).
        Never broadcasts."""
        ...


SIGNER_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")
"""What treasury_accounts.signer_id accepts."""

_KEY_LIKE = re.compile(r"[0-9a-fA-F]{64}")


class SignerError(Exception):
    """A signer could not be loaded, or could not sign. Its message names the signer
    id and what to do; it never holds key material or a password, and it is raised
    with no exception chained to it (whatever failed inside stays inside).

    ``retryable`` False: trying again as things are changes nothing (a
    misconfigured signer at load, a transaction the signer cannot sign)."""

    retryable: bool = False


class SigningFailed(SignerError):
    """A signer out of this process (KMS, a remote signer) gave no good signature
    this time: an error, no answer in time, or an answer refused here (another
    account's signature, a malformed one, a transaction other than the one
    asked). Nothing was signed that the caller may use, and nothing is to be
    broadcast; trying again later may succeed (``retryable``)."""

    retryable = True


def refuse(signer_id: object, what: str) -> NoReturn:
    """Raise SignerError: ``what`` of the signer that id names (shown by describe_id)."""
    raise SignerError(f"signer {describe_id(signer_id)}: {what}")


def refuse_transaction(signer_id: str, tx: dict[str, Any], what: str) -> NoReturn:
    """Raise SignerError: eth-account ``what`` (cannot serialise, refused to
    sign) ``tx``; its fields are named, never their values."""
    fields = ", ".join(sorted(str(k) for k in tx))
    refuse(
        signer_id,
        f"eth-account {what} the transaction (fields: {fields}): give an EIP-1559 "
        "transaction (chainId, nonce, to, value, data, gas, maxFeePerGas, "
        "maxPriorityFeePerGas, type 2) with valid values",
    )


def signing_failed(signer_id: str, what: str) -> NoReturn:
    """Raise SigningFailed: the signer did not sign, for ``what``; the node waits."""
    raise SigningFailed(
        f"signer {signer_id}: {what}; nothing was signed, the node is tried again later"
    )


def describe_id(signer_id: object) -> str:
    """A signer id as an error message may show it: the id itself when it is a
    well-formed id, else only its type and length (a key pasted where an id
    belongs is never echoed)."""
    if isinstance(signer_id, str) and SIGNER_ID_PATTERN.match(signer_id):
        if _KEY_LIKE.search(signer_id):
            return f"<an id that holds what looks like a private key, {len(signer_id)} characters>"
        return signer_id
    if isinstance(signer_id, str):
        return f"<a malformed signer id, {len(signer_id)} characters>"
    return f"<a {type(signer_id).__name__}, not a signer id>"
