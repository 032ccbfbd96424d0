"""Stand-in keys: what signs a rehearsal's transactions in place of the
treasury's keys, which a rehearsal never holds.

A stand-in is a signer that answers the treasury account's address (so the
executors' check that the signer holds the account's key passes, and the
engine records the hash of what it signed, as it does for a real signer) but
signs with a fresh key of its own made for this rehearsal and forgotten with
it. What it signs is no use on a real chain: its signature recovers to the
stand-in key's own address, which holds nothing. The fork's proxy
(qtg_rehearsal.proxy) knows each stand-in address and sends the
transaction's fields from the treasury account the fork impersonates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from qtg_runner.signers.base import AccountSigner, SignedTransaction
from qtg_runner.signers.local import LocalSigner


class StandIn(AccountSigner):
    """Signs for ``address`` (the treasury account) with a key of its own."""

    __slots__ = ("_inner",)
    kept = "its key stays in this process"

    def __init__(self, signer_id: str, address: str) -> None:
        super().__init__(signer_id, address.lower())
        self._inner = LocalSigner(signer_id, os.urandom(32))

    @property
    def stand_in_address(self) -> str:
        """The address the stand-in key's signatures recover to."""
        return self._inner.address

    async def sign_transaction(self, tx: dict[str, Any]) -> SignedTransaction:
        return self._inner.sign_transaction_sync(tx)


class StandIns:
    """The stand-ins of a rehearsal: one per signer id of the registry, each
    for its treasury account."""

    def __init__(self, accounts: Iterable[tuple[str, str]]) -> None:
        """``accounts``: (signer id, treasury address) pairs, as treasury_accounts has them."""
        self.by_signer: dict[str, StandIn] = {}
        for signer_id, address in accounts:
            if signer_id not in self.by_signer:
                self.by_signer[signer_id] = StandIn(signer_id, address)

    def senders(self) -> dict[str, str]:
        """stand-in address -> treasury address, for the forks' proxies."""
        return {s.stand_in_address: s.address for s in self.by_signer.values()}
