"""The `bybit_withdraw` executor: a USDC withdrawal from an exchange venue's FUND
account to a treasury account or an allow-listed address on one of our chains
(Bybit v5: POST /v5/asset/withdraw/create, GET /v5/asset/withdraw/query-record).

What it may request is the registry's word, read again before the request
(bybit_withdraw_route, in SQL): the venue (the NAMES of the environment
variables of its base URL and API key file), the venue's name for the chain,
the coin's token contract there, a recipient that is a treasury account or
allow-listed on the chain (QT032 otherwise: nothing is requested, the node
fails), and the amount as the exchange's decimal string.

What the venue's answers mean is one table (qtg_runner.exchanges.bybit_codes):
retryable (nothing done, the same request later), permanent (refused, nothing
done) or unknown (whether a withdrawal exists is not said: a server error, "do
not repeat the request", a code the table lacks, no answer at all).

    preflight  the route; and verify before spending: each deposit step the
               node follows (paid_in_deposits) shows its recorded deposit
               credited at the venue for its amount, else nothing is
               requested (not shown yet: the node waits; anything else fails
               it), nor repeated by recover (a parent's COMPLETED is a
               runner's word, and the withdrawal pays from a pooled balance).
    prepare    the requestId, request_id_for(the venue's request salt and the
               intent's idempotency key: the key is unique in one database, the
               salt is made when the venue is registered in it), and the route
               as the prepared payload: the dispatcher records both on the
               intent (external_request_id) BEFORE the request.
    submit     withdraw/create with the recorded requestId, to the recipient
               spelled as the venue's address book holds it (the venue compares
               addresses case-sensitively; the registry keeps them lower-case).
               Its id, also the original one for a repeated requestId.
               Permanent: the node fails with the venue's reason (nothing was
               created). Retryable (10006, the withdrawal interval): recovery
               repeats it after the venue's wait. Unknown: logged
               (bybit_withdraw_unknown_answer), the node's error says so, and
               recovery decides from the venue's records; never failed.
    observe    query-record by withdrawID: SecurityCheck, Pending,
               BlockchainConfirmed -> PENDING; success with its txID ->
               COMPLETED only once the chain shows that transaction, at the
               chain's finality depth, with exactly the Transfer of the token
               to the recipient for the amount (evidence: withdrawId, txID,
               amount, fee, block, confirmations, the Transfer); Fail, Reject,
               CancelByUser -> FAILED. A failed read: the observation's retry
               hint (the venue's wait, e.g. 10006's reset).
    recover    the withdrawal by its recorded withdrawId; else the request
               repeated with the recorded requestId (the venue's documented
               idempotency key: it answers the original id, or creates the
               withdrawal if the first request never reached it). A repeat
               answered retryable waits (STILL_UNKNOWN after the venue's wait);
               answered unknown or refused, it proves nothing of the first
               request, so the venue's records decide: the one withdrawal of
               the coin, chain, address and amount in the intent's time window
               is it; none after a refusal, all the venue's withdrawals of the
               window read: FAILED (nothing was made); none after a refusal
               the first request could have caused (the balance or a limit
               it used: SPENT_BY_A_FIRST_REQUEST), after an unknown answer,
               or with records left unread, or several: STILL_UNKNOWN, for
               an operator. Then read as observe does (IN_FLIGHT while it walks).
               An intent older than REPEAT_WINDOW_S is only searched for.
               Never a request with a new requestId.
    health     every registered venue this runner has settings for answers
               its server time, a signed balance read and its coin info
               (USDC withdrawals suspended on a chain: DEGRADED).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from psycopg_pool import AsyncConnectionPool

from qtg_runner.chains.evm import EvmRpc, EvmRpcError, decode_transfers
from qtg_runner.db import procs
from qtg_runner.exchanges import bybit_codes
from qtg_runner.exchanges.bybit import (
    BybitClient,
    BybitError,
    BybitUnavailable,
    WithdrawalRecord,
    classify,
    request_id_for,
)
from qtg_runner.exchanges.bybit_codes import Kind
from qtg_runner.executors.base import (
    ExecutorBase,
    ExecutorError,
    HealthResult,
    HealthStatus,
    JsonObject,
    NodeWork,
    ObserveResult,
    ObserveStatus,
    Prepared,
    Recorded,
    RecoveryOutcome,
    RecoveryResult,
    SubmitResult,
    Verdicts,
    config_schema,
    parts_health,
    route_row,
)
from qtg_runner.executors.evm_tx import EvmAccess
from qtg_runner.executors.venues import RETRY_LATER_S, VenueClients, read_deposit, venue_error
from qtg_runner.log import event

WINDOW_BEFORE_MS = 5 * 60 * 1000
"""How far before the intent's times a withdrawal is looked for (clocks differ)."""
SEARCH_PAGES = 10
"""Pages of query-record (50 rows each) read when looking for a withdrawal."""
FAILED_STATUSES = frozenset({"Fail", "Reject", "CancelByUser"})
VERDICTS = Verdicts("final", "failed", frozenset({"refused"}))
"""What a reading of a withdrawal means: final on the chain, failed at the venue,
refused (not the withdrawal requested) for a person."""
SPENT_BY_A_FIRST_REQUEST = frozenset(
    {
        bybit_codes.INSUFFICIENT_BALANCE,  # 131212
        131085,  # more than the available balance
        131088,  # past the remaining withdrawal limit
        131095,  # past the 24 hour platform limit
    }
)
"""Refusals of a repeated request that the first one, had it reached the venue,
could have caused itself (it took the balance or the limit): after one, no
withdrawal found proves nothing of the first request."""
REPEAT_WINDOW_S = 3600.0
"""Recovery repeats a request with its recorded requestId (the venue's documented
idempotency key) only this long after it was prepared; later it only searches,
so that a venue forgetting old requestIds can never be asked to pay twice."""


@dataclass(frozen=True)
class VenueRecord(Recorded):
    """The venue a payload names: its key, kind and the NAMES of the environment
    variables of its base URL and API key file (never a URL or a key)."""

    venue_key: str
    kind: str
    base_url_env: str
    key_file_env: str


class VenueExecutor(ExecutorBase):
    """What the exchange executors share: a venue's client made once, the
    venues' health."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        network: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        super().__init__(pool, network, env)
        self._timeout = timeout
        self._venues = VenueClients(self._env, timeout)

    def _client(self, venue: VenueRecord) -> BybitClient:
        return self._venues.client(
            venue.venue_key, venue.kind, venue.base_url_env, venue.key_file_env
        )

    async def health(self) -> HealthResult:
        return await venue_health(self._pool, self._venues)

    async def aclose(self) -> None:
        await self._venues.aclose()


@dataclass(frozen=True)
class _Route(VenueRecord):
    """The registry's word on one node (bybit_withdraw_route), as recorded in
    the intent's payload, so that observation and recovery never depend on a
    registry changed since the request."""

    chain_key: str
    venue_chain: str
    rpc_url_env: str
    finality_depth: int
    coin: str
    token_address: str
    recipient: str
    amount: str
    amount_units: str
    request_id: str


@dataclass(frozen=True)
class DepositWait(VenueRecord):
    """What a bybit_deposit node waits for, as recorded in its prepared
    payload: the transfer (tx_hash) its parent made into the venue's deposit
    address, and the amount it should credit. Read by that node, and by a
    withdrawal after it before it requests anything (_unfunded)."""

    chain_key: str
    venue_chain: str
    coin: str
    deposit_address: str
    amount: str
    tx_hash: str
    parent: str
    transfer_value: str
    since_ms: int

    async def read(self, client: BybitClient) -> tuple[str, JsonObject]:
        """What the venue says of this deposit (venues.read_deposit)."""
        return await read_deposit(
            client,
            self.venue_key,
            self.coin,
            self.venue_chain,
            self.tx_hash,
            self.deposit_address,
            self.since_ms,
            self.amount,
        )


@dataclass(frozen=True)
class _Unfunded:
    """Why a withdrawal's deposits do not stand at the venue (problem), and
    whether waiting may change it (wait: not shown yet)."""

    problem: str
    wait: bool


@dataclass(frozen=True)
class _Refused:
    """withdraw/create answered without an id: the answer's kind
    (bybit_codes.Kind), what it said, its retCode if any and the wait before
    the same request again."""

    kind: Kind
    error: str
    ret_code: int | None
    retry_after: float | None


@dataclass(frozen=True)
class _Search:
    """The venue's withdrawals that match a recorded one, and whether it listed
    every withdrawal of the window (``complete``)."""

    found: list[WithdrawalRecord]
    complete: bool


class BybitWithdrawExecutor(VenueExecutor):
    key = "bybit_withdraw"
    has_side_effect = True
    deduplicated_by = "the venue's requestId, repeated only within REPEAT_WINDOW_S of the claim"
    description = (
        "Withdrawal from an exchange venue (Bybit v5) to a treasury account or an allow-listed "
        "address, idempotent on a requestId derived from the intent; complete when the chain "
        "shows the transfer at its finality depth"
    )
    node_config_schema = config_schema(("venue", "coin", "chain", "to"))

    @functools.cached_property
    def _evm(self) -> EvmAccess:
        """The chains the venue pays out on, read for its withdrawals' transfers."""
        return EvmAccess(self._env, self._timeout)

    # -- the registry and the environment ----------------------------------------

    async def _route_row(self, work: NodeWork) -> procs.WithdrawRoute:
        return await route_row(self._pool, procs.bybit_withdraw_route(work.node_id))

    def _rpc(self, route: _Route) -> EvmRpc:
        return self._evm.rpc(route.chain_key, route.rpc_url_env)

    @staticmethod
    def _recorded(work: NodeWork, prepared: Prepared | None = None) -> _Route:
        payload = (prepared.payload if prepared else None) or (work.intent or {}).get(
            "prepared_payload"
        )
        if not payload:
            raise ExecutorError(f"node {work.node_id} has no recorded withdrawal", retryable=False)
        return _Route.from_payload(payload)

    # -- the protocol ------------------------------------------------------------

    async def preflight(self, work: NodeWork) -> None:
        await self._route_row(work)
        unfunded = await self._unfunded(work)
        if unfunded is not None:
            raise ExecutorError(
                unfunded.problem + ": nothing is requested", retryable=unfunded.wait
            )

    async def _unfunded(self, work: NodeWork) -> _Unfunded | None:
        """Verify before spending: why a deposit step this withdrawal follows
        (paid_in_deposits) does not show its recorded deposit credited at the
        venue for its amount, or None when every one does. A parent's
        COMPLETED is a runner's word, and the withdrawal pays from the venue's
        pooled balance: nothing is requested (preflight) nor requested again
        (recover) for a deposit the venue does not show credited. Not yet shown
        (pending) is worth waiting for; no checked record, failed or another
        amount is not."""
        async with self._pool.connection() as conn:
            deposits = await procs.paid_in_deposits(work.node_id).aall(conn)
        for deposit in deposits:
            step = f"deposit step {deposit.node_key!r}"
            if deposit.payload is None or deposit.payload_problem is not None:
                return _Unfunded(
                    f"{step} has no deposit the engine checked ({deposit.payload_problem})", False
                )
            wait = DepositWait.from_payload(deposit.payload)
            status, evidence = await wait.read(self._client(wait))
            if status != "credited":
                return _Unfunded(
                    f"{step} is {deposit.node_state}, but venue {wait.venue_key} shows its "
                    f"deposit {wait.tx_hash} {status} (credited "
                    f"{evidence.get('credited_amount')} of {wait.amount})",
                    status == "pending",
                )
        return None

    async def prepare(self, work: NodeWork) -> Prepared:
        row = await self._route_row(work)
        if not work.idempotency_key:
            raise ExecutorError(f"node {work.node_id} has no idempotency key", retryable=False)
        # the intent's key, unique in this database, with the venue's salt made
        # in this database: unique at the venue across databases too
        request_id = request_id_for(f"{row.request_salt}:{work.idempotency_key}")
        route = _Route.from_row(row, amount_units=str(int(row.amount_units)), request_id=request_id)
        # the venue's client is made now: a runner without its settings fails
        # here, before anything is recorded
        self._client(route)
        return Prepared(external_request_id=request_id, payload=route.recorded())

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        route = self._recorded(work, prepared)
        answer = await self._ask(work, route)
        if isinstance(answer, _Refused):
            raise self._submit_error(work, route, answer)
        return SubmitResult(
            answer,
            {"withdraw_id": answer, "request_id": route.request_id, "amount": route.amount},
        )

    def _submit_error(self, work: NodeWork, route: _Route, answer: _Refused) -> ExecutorError:
        """The dispatcher's word on a submit the venue answered without an id:
        permanent fails the node (nothing was created); retryable and unknown
        leave it to recovery (its intent is recorded), after the venue's wait."""
        venue = f"venue {route.venue_key}"
        if answer.kind is Kind.PERMANENT:
            return ExecutorError(f"{venue} refused the withdrawal: {answer.error}", retryable=False)
        if answer.kind is Kind.RETRYABLE:
            return ExecutorError(
                f"{venue} did not take the withdrawal now: {answer.error}; the same request "
                "again after its wait",
                retryable=True,
                retry_after=answer.retry_after if answer.retry_after is not None else RETRY_LATER_S,
            )
        self._unknown(work, route, answer, "submit")
        return ExecutorError(
            f"{venue} answered requestId {route.request_id} with {answer.error}: whether the "
            "withdrawal exists is unknown; left for recovery",
            retryable=True,
            retry_after=answer.retry_after,
        )

    @staticmethod
    def _unknown(work: NodeWork, route: _Route, answer: _Refused, step: str) -> None:
        event(
            logging.WARNING,
            "bybit_withdraw_unknown_answer",
            network=work.network,
            movement=work.request_id,
            node=work.node_id,
            step=step,
            venue=route.venue_key,
            request_id=route.request_id,
            ret_code=answer.ret_code,
            error=answer.error,
        )

    async def _ask(self, work: NodeWork, route: _Route) -> str | _Refused:
        """withdraw/create with the recorded requestId: the withdrawal's id (the
        original one for a repeated requestId), or what the venue answered
        instead. Nothing here concludes anything from an answer without an id."""
        client = self._client(route)
        address = await self._spelling(work, route, client)
        try:
            return await client.withdraw(
                coin=route.coin,
                chain=route.venue_chain,
                address=address,
                amount=Decimal(route.amount),
                request_id=route.request_id,
            )
        except (BybitError, BybitUnavailable) as exc:
            return _Refused(
                classify(exc),
                str(exc),
                exc.ret_code if isinstance(exc, BybitError) else None,
                exc.retry_after,
            )

    async def _spelling(self, work: NodeWork, route: _Route, client: BybitClient) -> str:
        """The recipient as the venue's address book spells it (on the chain, or
        as a universal address): withdraw/create compares the address
        case-sensitively ("use the exact same address added in address book",
        v5 withdraw docs), and the registry keeps EVM addresses lower-case.
        Without such an entry, or when the book cannot be read for good (the
        key may not list it), the node config's spelling of the same address:
        the venue then refuses an address not on its book (131093). A book
        not read for now: retryable, nothing requested."""
        try:
            book = await client.address_book(chain=route.venue_chain)
        except (BybitError, BybitUnavailable) as exc:
            if classify(exc) is not Kind.PERMANENT:
                raise venue_error(route.venue_key, exc) from None
            book = []
        for entry in book:
            if entry.address.lower() == route.recipient and entry.coin in (route.coin, "baseCoin"):
                return entry.address
        configured = str(work.node_config.get("to") or "")
        return configured if configured.lower() == route.recipient else route.recipient

    async def _search(self, work: NodeWork, route: _Route) -> _Search:
        """The venue's withdrawals that match the recorded one: its coin, chain,
        address and amount, made within the intent's time window; and whether
        the venue listed all of them (a cursor left after SEARCH_PAGES pages:
        the oldest were not read)."""
        client = self._client(route)
        start = int(_claimed_at_s(work) * 1000) - WINDOW_BEFORE_MS
        amount = Decimal(route.amount)
        found: list[WithdrawalRecord] = []
        cursor: str | None = None
        try:
            for _ in range(SEARCH_PAGES):
                page = await client.withdrawals(
                    coin=route.coin, start_time_ms=start, limit=50, cursor=cursor
                )
                found.extend(
                    r
                    for r in page.rows
                    if r.to_address.lower() == route.recipient
                    and r.amount == amount
                    and r.chain == route.venue_chain
                )
                if not page.next_cursor:
                    return _Search(found, complete=True)
                cursor = page.next_cursor
        except (BybitError, BybitUnavailable) as exc:
            raise venue_error(route.venue_key, exc) from None
        return _Search(found, complete=False)

    async def observe(self, work: NodeWork) -> ObserveResult:
        route = self._recorded(work)
        if not work.external_ref:
            raise ExecutorError(f"node {work.node_id} has no withdrawal id", retryable=False)
        try:
            record = await self._client(route).withdrawal(work.external_ref)
        except (BybitError, BybitUnavailable) as exc:
            raise venue_error(route.venue_key, exc) from None
        if record is None:
            return ObserveResult(
                ObserveStatus.UNKNOWN,
                {
                    "problem": f"venue {route.venue_key} has no withdrawal {work.external_ref}",
                    "request_id": route.request_id,
                },
            )
        status, evidence = await self._read(route, record)
        return VERDICTS.observation(status, evidence)

    async def _read(self, route: _Route, record: WithdrawalRecord) -> tuple[str, JsonObject]:
        """(final | failed | refused | pending, evidence) of a withdrawal record,
        the chain read for its txID once the venue says success."""
        evidence: JsonObject = {
            "withdraw_id": record.withdraw_id,
            "request_id": route.request_id,
            "status": record.status,
            "tx_id": record.tx_id or None,
            "amount": str(record.amount),
            "fee": str(record.fee),
            "chain": route.chain_key,
            "to": route.recipient,
        }
        evidence = {k: v for k, v in evidence.items() if v is not None}
        if (
            record.to_address.lower() != route.recipient
            or record.amount != Decimal(route.amount)
            or record.chain != route.venue_chain
            or record.coin != route.coin
        ):
            return "refused", evidence | {
                "problem": f"withdrawal {record.withdraw_id} is not the one requested",
                "expected": {
                    "to": route.recipient,
                    "amount": route.amount,
                    "chain": route.venue_chain,
                    "coin": route.coin,
                },
                "found": {"to": record.to_address, "chain": record.chain, "coin": record.coin},
            }
        if record.status in FAILED_STATUSES:
            return "failed", evidence
        if record.status != "success" or not record.tx_id:
            return "pending", evidence
        rpc = self._rpc(route)
        try:
            receipt = await rpc.receipt(record.tx_id)
            if receipt is None:
                return "pending", evidence | {"mined": False}
            head = await rpc.block_number()
            canonical = await rpc.block(receipt.block_number)
        except EvmRpcError as exc:
            raise ExecutorError(
                f"chain {route.chain_key}: {exc}", retryable=True, retry_after=RETRY_LATER_S
            ) from None
        depth = head - receipt.block_number
        evidence |= {
            "block_number": receipt.block_number,
            "block_hash": receipt.block_hash,
            "confirmations": depth + 1,
            "finality_depth": route.finality_depth,
        }
        if canonical is None or canonical.hash != receipt.block_hash:
            return "pending", evidence | {"reorg": True}
        if depth < route.finality_depth:
            return "pending", evidence
        transfers = [
            t
            for t in decode_transfers(receipt)
            if t.token == route.token_address and t.recipient == route.recipient
        ]
        if (
            not receipt.succeeded
            or len(transfers) != 1
            or transfers[0].value != int(route.amount_units)
        ):
            return "refused", evidence | {
                "problem": "the venue's transaction does not show exactly the transfer requested",
                "expected": {
                    "token": route.token_address,
                    "to": route.recipient,
                    "value": route.amount_units,
                },
                "transfers": [
                    {"from": t.sender, "to": t.recipient, "value": str(t.value)} for t in transfers
                ],
                "receipt_status": receipt.status,
            }
        t = transfers[0]
        return "final", evidence | {
            "transfer": {
                "token": t.token,
                "from": t.sender,
                "to": t.recipient,
                "value": str(t.value),
                "log_index": t.log_index,
            }
        }

    async def recover(self, work: NodeWork) -> RecoveryResult:
        intent = work.intent or {}
        if not intent.get("prepared_payload") or not intent.get("external_request_id"):
            # no requestId was ever recorded: no request can have been made
            return RecoveryResult(
                RecoveryOutcome.NOT_SUBMITTED, {"intent_state": intent.get("intent_state")}
            )
        route = self._recorded(work)
        withdraw_id = work.external_ref or intent.get("external_ref")
        evidence: JsonObject = {"request_id": route.request_id}
        record: WithdrawalRecord | None = None
        repeatable = self._age_s(work, route) <= REPEAT_WINDOW_S
        if withdraw_id and repeatable:
            # the recorded id is a runner's word: one the venue does not know
            # (never its answer) gives way to the venue's answer to the requestId
            record = await self._withdrawal(route, str(withdraw_id))
            if record is None:
                evidence["unknown_withdrawal"] = str(withdraw_id)
                withdraw_id = None
        unfunded = None
        if not withdraw_id and repeatable:
            # a repeat may create the withdrawal: never for deposits the venue
            # does not show credited (verify before spending); then only the
            # venue's records say whether a first request made it
            unfunded = await self._unfunded(work)
            if unfunded is not None:
                evidence["unfunded"] = unfunded.problem
        if not withdraw_id and unfunded is None and repeatable:
            # by the recorded requestId: the venue answers a repeat with the
            # original withdrawal, and creates it only if the first request
            # never reached it
            answer = await self._ask(work, route)
            if not isinstance(answer, _Refused):
                withdraw_id = answer
                evidence["requested_again"] = True
            elif answer.kind is Kind.RETRYABLE:
                raise self._submit_error(work, route, answer)
            else:
                # refused or unknown, the answer to a REPEATED request says
                # nothing of the first one: the venue's records decide
                if answer.kind is Kind.UNKNOWN:
                    self._unknown(work, route, answer, "recover")
                evidence["repeat_answer"] = answer.error
                search = await self._search(work, route)
                found = search.found
                if len(found) == 1 and search.complete:
                    record = found[0]
                elif (
                    not found
                    and search.complete
                    and answer.kind is Kind.PERMANENT
                    and answer.ret_code not in SPENT_BY_A_FIRST_REQUEST
                    and "unknown_withdrawal" not in evidence
                ):
                    # (a recorded id the venue did not show may be a withdrawal it
                    # does not list yet: a refusal of the repeat proves nothing then)
                    return RecoveryResult(
                        RecoveryOutcome.FAILED,
                        evidence
                        | {
                            "problem": f"venue {route.venue_key} refused the request "
                            "and shows no withdrawal that matches it",
                            "found": False,
                        },
                    )
                else:
                    unread = "" if search.complete else " (of the newest it lists: not all read)"
                    return RecoveryResult(
                        RecoveryOutcome.STILL_UNKNOWN,
                        evidence
                        | {
                            "problem": f"venue {route.venue_key} answered the repeated request "
                            f"with {answer.error}, and {len(found)} withdrawals match it{unread}: "
                            "an operator decides",
                            "candidates": [r.withdraw_id for r in found],
                        },
                        retry_after=answer.retry_after,
                    )
        if record is None and withdraw_id:
            record = await self._withdrawal(route, str(withdraw_id))
        elif record is None:
            # too old to repeat the request, or its deposits do not stand:
            # only what the venue shows counts
            search = await self._search(work, route)
            found = search.found
            if len(found) == 1 and search.complete:
                record = found[0]
            else:
                why = (
                    "its deposits do not stand at the venue, so its request is not repeated"
                    if unfunded is not None
                    else "the intent is too old to repeat its request"
                )
                unread = "" if search.complete else " (of the newest it lists: not all read)"
                return RecoveryResult(
                    RecoveryOutcome.STILL_UNKNOWN,
                    evidence
                    | {
                        "problem": f"{len(found)} withdrawals match the recorded one{unread} and "
                        f"{why}: an operator decides",
                        "candidates": [r.withdraw_id for r in found],
                    },
                )
        if record is None:
            return RecoveryResult(
                RecoveryOutcome.STILL_UNKNOWN,
                evidence | {"problem": f"venue {route.venue_key} has no withdrawal {withdraw_id}"},
            )
        status, read = await self._read(route, record)
        return VERDICTS.recovery(status, evidence | read, external_ref=record.withdraw_id)

    async def _withdrawal(self, route: _Route, withdraw_id: str) -> WithdrawalRecord | None:
        """The venue's withdrawal ``withdraw_id``, or None when it has none such."""
        try:
            return await self._client(route).withdrawal(withdraw_id)
        except (BybitError, BybitUnavailable) as exc:
            raise venue_error(route.venue_key, exc) from None

    @staticmethod
    def _age_s(work: NodeWork, route: _Route) -> float:
        """Seconds since the intent was claimed (the database's time of the
        claim, read on the runner's clock)."""
        return time.time() - _claimed_at_s(work)

    async def aclose(self) -> None:
        await super().aclose()
        await self._evm.aclose()


def _claimed_at_s(work: NodeWork) -> float:
    """When the node's intent was claimed, by the database's clock (the intent's
    created_at, which observation and recovery are handed): before any request
    was made. A dispatcher holds its claim of a moment ago and no intent
    document: now. Never the payload's word."""
    created = (work.intent or {}).get("created_at")
    if not isinstance(created, str):
        return time.time()
    return datetime.fromisoformat(created).timestamp()


async def venue_health(pool: AsyncConnectionPool[Any], venues: VenueClients) -> HealthResult:
    """Every registered venue: its server time (unsigned), a signed balance
    read and its coin info for USDC (GET /v5/asset/coin/query-info). A venue
    this runner has no settings for, one of several that does not answer (or
    refuses a signed read), or one that has suspended USDC withdrawals on a
    chain is DEGRADED; DOWN, which keeps the executor's nodes READY, only when
    no venue answers."""
    async with pool.connection() as conn:
        rows = await procs.exchange_venue_list().aall(conn)
    return parts_health({row.venue_key: await _venue_health(venues, row) for row in rows})


async def _venue_health(venues: VenueClients, row: procs.ExchangeVenue) -> tuple[HealthStatus, str]:
    try:
        client = venues.client(row.venue_key, row.kind, row.base_url_env, row.key_file_env)
    except ExecutorError as exc:
        return HealthStatus.DEGRADED, str(exc)
    try:
        server_ms = await client.server_time()
        await client.fund_balance("USDC")
        chains = await client.coin_info("USDC")
    except (BybitError, BybitUnavailable) as exc:
        return HealthStatus.DOWN, f"down: {exc}"
    skew = server_ms / 1000 - time.time()
    line = f"answers, clock skew {skew:+.1f} s"
    suspended = sorted(c.chain for c in chains if not c.withdraw_open)
    if suspended:
        return (
            HealthStatus.DEGRADED,
            f"{line}; USDC withdrawals suspended on {', '.join(suspended)}",
        )
    return HealthStatus.HEALTHY, line
