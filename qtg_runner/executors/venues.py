"""What the exchange executors and the capital_transfer_followup sidecar share:
a venue's API client made from the registry's word (the NAMES of the
environment variables of its base URL and API key file, never a URL or a key
from the database), and a venue's deposit records read for one transaction.

The key file is JSON ``{"api_key": ..., "api_secret": ...}``, mode 0600 (as
`qtg world up` writes the local exchange's; qtg_runner.venue_keys.load_api_key
refuses one open to others). The secret stays inside the client
(qtg_runner.exchanges.bybit), never in a log line, an error or evidence.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from qtg_runner.chains.errors import ChainError
from qtg_runner.exchanges.bybit import (
    DEPOSIT_FAILED,
    BybitClient,
    BybitError,
    BybitUnavailable,
    DepositRecord,
)
from qtg_runner.exchanges.bybit_codes import TOO_MANY_VISITS
from qtg_runner.executors.base import ExecutorError, JsonObject, executor_budget
from qtg_runner.venue_keys import load_api_key

__all__ = ["RETRY_LATER_S", "VenueClients", "deposit_evidence", "deposits_for", "venue_error"]

RETRY_LATER_S = 30.0
"""The retry hint when a venue cannot be reached or this runner lacks its settings."""

DEPOSIT_PAGES = 10
"""Pages of one transaction's deposit records (50 each) read at the most."""


class VenueClients:
    """One BybitClient per (base URL, key file), made on first use."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout: float = 10.0) -> None:
        self._env = os.environ if env is None else env
        self._timeout = timeout
        self._clients: dict[tuple[str, str], BybitClient] = {}

    def settings(self, venue_key: str, base_url_env: str, key_file_env: str) -> tuple[str, str]:
        """(base URL, key file path) from the environment, or a retryable
        ExecutorError naming the variable this runner lacks."""
        url = self._env.get(base_url_env)
        key_file = self._env.get(key_file_env)
        for name, value in ((base_url_env, url), (key_file_env, key_file)):
            if not value:
                raise ExecutorError(
                    f"venue {venue_key}: the environment variable {name} is not set in this runner",
                    retryable=True,
                    retry_after=RETRY_LATER_S,
                )
        assert url is not None and key_file is not None
        return url, key_file

    def client(
        self, venue_key: str, kind: str, base_url_env: str, key_file_env: str
    ) -> BybitClient:
        if kind != "bybit":
            raise ExecutorError(f"venue {venue_key} is of kind {kind}, not bybit", retryable=False)
        url, key_file = self.settings(venue_key, base_url_env, key_file_env)
        client = self._clients.get((url, key_file))
        if client is None:
            try:
                api_key, api_secret = load_api_key(key_file)
            except ChainError as exc:
                raise ExecutorError(
                    f"venue {venue_key}: {exc}", retryable=True, retry_after=RETRY_LATER_S
                ) from None
            client = BybitClient(
                url,
                api_key,
                api_secret,
                timeout=self._timeout,
                budget=executor_budget(self._env, url, base_url_env, "venue"),
            )
            del api_secret
            self._clients[(url, key_file)] = client
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


def venue_error(venue_key: str, exc: BybitError | BybitUnavailable) -> ExecutorError:
    """A read the venue answered with an error, or not at all: retry later,
    after the venue's own hint where it gave one (10006's reset). Throttled
    (the venue's limit, not the node's: no attempt spent, no time observing)
    when the venue's budget held it back or the venue said too many requests
    (HTTP 429, retCode 10006)."""
    if isinstance(exc, BybitError):
        retry_after, throttled = exc.retry_after, exc.ret_code == TOO_MANY_VISITS
    else:
        retry_after = exc.retry_after if exc.throttled else None
        throttled = exc.throttled
    return ExecutorError(
        f"venue {venue_key}: {exc}",
        retryable=True,
        retry_after=retry_after if retry_after is not None else RETRY_LATER_S,
        throttled=throttled,
    )


RECORD_WINDOW_MS = 29 * 24 * 3600 * 1000
"""The window a deposit is read in, from ``since_ms``: a query-record call takes
at most 30 days (Bybit: "endTime - startTime must be less than 30 days",
without endTime it ends now; the venue compares whole seconds, so a day is
left as margin), so that a step reading it long after (a withdrawal held for
weeks) is answered, not refused."""


async def deposits_for(
    client: BybitClient, coin: str, chain: str, tx_hash: str, to_address: str, since_ms: int
) -> list[DepositRecord]:
    """The venue's deposit records of transaction ``tx_hash`` to ``to_address``
    on ``chain`` (the venue's name of the chain; a transaction of another chain
    with that hash and address is not this one), one per Transfer log, seen
    in the RECORD_WINDOW_MS from ``since_ms``, newest first. The venue is
    asked for the transaction's records only (txID), so however many other
    deposits the window holds, they fill no page; each record is checked
    again here."""
    found: list[DepositRecord] = []
    cursor: str | None = None
    for _ in range(DEPOSIT_PAGES):
        page = await client.deposits(
            tx_id=tx_hash,
            coin=coin,
            start_time_ms=since_ms,
            end_time_ms=since_ms + RECORD_WINDOW_MS - 1,
            limit=50,
            cursor=cursor,
        )
        found.extend(
            r
            for r in page.rows
            if r.tx_id.lower() == tx_hash.lower()
            and r.to_address.lower() == to_address.lower()
            and r.chain == chain
        )
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    return found


def deposit_evidence(records: list[DepositRecord]) -> JsonObject:
    """The records as evidence: status, amount, confirmations, the log's index."""
    rows: list[dict[str, Any]] = [
        {
            "tx_id": r.tx_id,
            "chain": r.chain,
            "coin": r.coin,
            "amount": str(r.amount),
            "status": r.status,
            "confirmations": r.confirmations,
            "success_at_ms": r.success_at_ms,
            "log_index": r.log_index,
            "to_address": r.to_address,
        }
        for r in records
    ]
    credited = sum((r.amount for r in records if r.credited), Decimal(0))
    return {"deposits": rows, "credited_amount": str(credited)}


async def read_deposit(
    client: BybitClient,
    venue_key: str,
    coin: str,
    chain: str,
    tx_hash: str,
    to_address: str,
    since_ms: int,
    amount: str,
) -> tuple[str, JsonObject]:
    """What the venue says of the deposit of ``amount`` by ``tx_hash`` to
    ``to_address`` on ``chain``: (credited | mismatch | failed | pending,
    evidence). Credited: every record credited, for exactly the amount;
    mismatch: credited for another amount; failed: a record failed; pending:
    none yet, or not all credited. A venue error raises venue_error."""
    try:
        records = await deposits_for(client, coin, chain, tx_hash, to_address, since_ms)
    except (BybitError, BybitUnavailable) as exc:
        raise venue_error(venue_key, exc) from None
    evidence = {"tx_hash": tx_hash, "venue": venue_key, "expected_amount": amount}
    evidence |= deposit_evidence(records)
    if any(r.status == DEPOSIT_FAILED for r in records):
        return "failed", evidence
    if not records or not all(r.credited for r in records):
        return "pending", evidence
    credited = sum((r.amount for r in records), Decimal(0))
    if credited != Decimal(amount):
        return "mismatch", evidence | {
            "problem": f"the venue credited {credited}, the movement sent {amount}"
        }
    return "credited", evidence
