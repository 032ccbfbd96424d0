"""The `bybit_deposit` executor: waits until an exchange venue credits a deposit
that a parent step sent to the venue's deposit address (no side effect of its
own: it reads GET /v5/asset/deposit/query-record).

A plan puts it after the step that pays into the exchange (an evm_transfer, a
mint) with `depends_on`; the engine hands it the parent's evidence
(`work.inputs`). Where it waits is the registry's word (bybit_deposit_route:
the venue, its name for the chain, its deposit address for the coin, the
movement's amount, and from when the venue's records are read: a day before
the claim in which a parent first signed or sent).

    preflight  the route.
    prepare    the parent whose evidence shows a Transfer to the deposit
               address: its transaction hash and the value, kept in the
               prepared payload (observation does not see the inputs again).
               No such parent: the node fails (a plan error).
    submit     nothing is sent: the transaction hash is the external reference.
    observe    the venue's deposit records of that transaction to the deposit
               address: none yet, or to be confirmed / processing -> PENDING;
               all credited (status 3) for the movement's amount -> COMPLETED
               with the records as evidence; credited for another amount ->
               UNKNOWN (money landed, not as planned: an operator looks, and
               capital_transfer_mismatches shows it); failed (status 4) -> FAILED.
    recover    the same reading (nothing to resend); never prepared ->
               NOT_SUBMITTED.
    health     as bybit_withdraw's: every registered venue answers.

The capital_transfer_followup sidecar follows the transfers into a deposit
address whose plan has no bybit_deposit step; a transfer followed by this
step is left to it.
"""

from __future__ import annotations

from qtg_runner.db import procs
from qtg_runner.executors.base import (
    ExecutorError,
    JsonObject,
    NodeWork,
    ObserveResult,
    Prepared,
    RecoveryOutcome,
    RecoveryResult,
    SubmitResult,
    Verdicts,
    config_schema,
    route_row,
)
from qtg_runner.executors.bybit_withdraw import DepositWait, VenueExecutor

VERDICTS = Verdicts("credited", "failed", frozenset({"mismatch"}))
"""What a reading of the deposit means: credited as sent, failed at the venue,
credited for another amount (a mismatch) for a person."""


class BybitDepositExecutor(VenueExecutor):
    key = "bybit_deposit"
    has_side_effect = False
    deduplicated_by = "nothing is sent: it only reads the venue's deposit records"
    description = (
        "Waits until an exchange venue (Bybit v5) credits the deposit a parent step sent to its "
        "deposit address; no side effect"
    )
    node_config_schema = config_schema(("venue", "chain"), optional=("coin",))

    async def _route(self, work: NodeWork) -> procs.DepositRoute:
        return await route_row(self._pool, procs.bybit_deposit_route(work.node_id))

    async def preflight(self, work: NodeWork) -> None:
        await self._route(work)

    async def prepare(self, work: NodeWork) -> Prepared:
        route = await self._route(work)
        parent, tx_hash, value = _paying_parent(work, route.deposit_address)
        if route.since_ms is None:
            raise ExecutorError(
                f"node {work.node_id}: no parent step of it has sent anything, so there is no "
                "deposit to wait for (bybit_deposit_route.since_ms)",
                retryable=False,
            )
        wait = DepositWait.from_row(route, tx_hash=tx_hash, parent=parent, transfer_value=value)
        return Prepared(payload=wait.recorded())

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        assert prepared.payload is not None
        wait = DepositWait.from_payload(prepared.payload)
        return SubmitResult(
            wait.tx_hash,
            {
                "tx_hash": wait.tx_hash,
                "deposit_address": wait.deposit_address,
                "venue": wait.venue_key,
                "expected_amount": wait.amount,
                "parent": wait.parent,
            },
        )

    async def _read(self, work: NodeWork) -> tuple[str, JsonObject]:
        """(credited | mismatch | failed | pending, evidence)."""
        payload = (work.intent or {}).get("prepared_payload")
        if not payload:
            raise ExecutorError(f"node {work.node_id} has no recorded deposit", retryable=False)
        wait = DepositWait.from_payload(payload)
        return await wait.read(self._client(wait))

    async def observe(self, work: NodeWork) -> ObserveResult:
        status, evidence = await self._read(work)
        return VERDICTS.observation(status, evidence)

    async def recover(self, work: NodeWork) -> RecoveryResult:
        if not (work.intent or {}).get("prepared_payload"):
            return RecoveryResult(RecoveryOutcome.NOT_SUBMITTED, {})
        status, evidence = await self._read(work)
        return VERDICTS.recovery(status, evidence, external_ref=str(evidence["tx_hash"]))


def _paying_parent(work: NodeWork, deposit_address: str) -> tuple[str, str, str]:
    """(parent key, tx hash, value) of the one parent whose evidence shows a
    Transfer to ``deposit_address``; a plan error otherwise."""
    paying: list[tuple[str, str, str]] = []
    for key, parent in sorted((work.inputs or {}).items()):
        evidence = parent.get("evidence") or {}
        transfer = evidence.get("transfer") or {}
        to = str(transfer.get("to") or evidence.get("recipient") or "").lower()
        tx_hash = evidence.get("tx_hash") or parent.get("external_ref")
        if to == deposit_address and tx_hash:
            paying.append((key, str(tx_hash), str(transfer.get("value", ""))))
    if len(paying) != 1:
        raise ExecutorError(
            f"node {work.node_id}: {len(paying)} parent steps show a transfer to the deposit "
            f"address {deposit_address}; a bybit_deposit step depends on exactly one",
            retryable=False,
        )
    return paying[0]
