"""Signers: what holds a treasury account's key and signs its transactions.

The engine stores a signer *id* per treasury account (treasury_accounts.signer_id),
never a key. A runner turns the id into a Signer at start (qtg_runner.signers.load);
executors sign through the Signer interface only, so a KMS or HSM signer can
replace the local one without touching an executor.

A key never enters the database, a log line, an exception message or argv.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SignedTransaction:
    """A signed EVM transaction: the raw bytes to broadcast and their hash."""

    raw: bytes = field(repr=False)
    tx_hash: str
    """0x + 64 lower-case hex digits (keccak-256 of ``raw``)."""

    @property
    def raw_hex(self) -> str:
        return "0x" + self.raw.hex()


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
