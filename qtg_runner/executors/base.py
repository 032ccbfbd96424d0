"""The executor protocol: what a runner calls for one node.

An executor knows one kind of external step (a CCTP burn, a Bybit withdrawal,
a simulated lane). The engine hands it a node's work; it answers with typed
results. It never decides a node's state: the procedures do, from its answers.

    preflight(work)            cheap checks before anything is signed (balances,
                               allow-lists); raise SubmitError to refuse.
    prepare(work) -> Prepared  build and sign, without broadcasting; the runner
                               records it (record_intent_prepared) before submit.
    submit(work, prepared)     the side effect itself; returns the external
                               reference (tx hash, withdrawal id).
    observe(work)              where is the side effect now? PENDING (with an
                               optional retry_after hint), COMPLETED, FAILED,
                               or UNKNOWN with evidence.
    recover(work)              reconcile a node whose outcome is in doubt from
                               external evidence only (never a blind retry).
                               Once the intent is PREPARED (work.prepared()),
                               the side effect may only be resubmitted with
                               that same payload (then IN_FLIGHT): the engine
                               refuses NOT_SUBMITTED for it, and only
                               requeue_node (two operators) allows a new one.
    health()                   is the external service usable?
"""

from __future__ import annotations

import dataclasses
import enum
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar, Protocol, Self, TypeVar, runtime_checkable

import psycopg
from psycopg_pool import AsyncConnectionPool

from qtg_runner.budget import (
    BudgetError,
    EndpointBudget,
    configured_rate,
    endpoint_budget,
    endpoint_name,
)
from qtg_runner.db.procs import Call, ClaimedNode, ObserveClaim, RecoveryClaim

JsonObject = dict[str, Any]

ADDRESS_PATTERN = "^0x[0-9a-fA-F]{40}$"
"""An EVM address in a node config's JSON schema."""
CHAIN_PATTERN = "^[a-z][a-z0-9-]{0,62}$"
"""A chain key in a node config's JSON schema, as the registry spells it."""

_KEY: JsonObject = {"type": "string", "pattern": CHAIN_PATTERN}
_ADDRESS: JsonObject = {"type": "string", "pattern": ADDRESS_PATTERN}
_SYMBOL: JsonObject = {"type": "string", "pattern": "^[A-Za-z0-9.]{1,16}$"}

NODE_CONFIG: Mapping[str, JsonObject] = {
    "lane": {"type": "string", "minLength": 1},
    "chain": _KEY,
    "source_chain": _KEY,
    "destination_chain": _KEY,
    "source": _KEY,
    "destination": _KEY,
    "venue": _KEY,
    "token": _SYMBOL,
    "coin": _SYMBOL,
    "from": _ADDRESS,
    "to": _ADDRESS,
    "max_fee_bps": {"type": "integer", "minimum": 0, "maximum": 100},
}
"""What a node config's key means, the same in every executor's schema: a
chain's or a venue's key, a token's or a coin's symbol, an account's address,
a fee cap in basis points."""


def config_schema(
    required: Sequence[str], optional: Sequence[str] = (), own: JsonObject | None = None
) -> JsonObject:
    """An executor's node config schema: its ``lane`` and the ``required`` keys
    (in that order), the ``optional`` ones, nothing else; each as NODE_CONFIG
    says, or as the executor's ``own`` properties say."""
    own = own or {}
    names = ("lane", *required, *optional)
    return {
        "type": "object",
        "required": ["lane", *required],
        "properties": {name: own.get(name) or NODE_CONFIG[name] for name in names} | own,
        "additionalProperties": False,
    }


_CLAIMED = (
    "node_id", "request_id", "claim_secret", "node_key", "executor_key", "node_config", "lane",
    "amount", "asset",
)  # fmt: skip
"""NodeWork's fields that every claim's row has, by the same names."""


@dataclass(frozen=True)
class NodeWork:
    """One node as a procedure handed it to the runner."""

    node_id: int
    request_id: int
    claim_secret: str = field(repr=False)
    """The claim's proof, presented by every completion call; never logged."""
    node_key: str
    executor_key: str
    node_config: JsonObject
    lane: str
    amount: Decimal
    asset: str
    idempotency_key: str | None = None
    external_ref: str | None = None
    intent: JsonObject | None = None
    network: str = "testnet"
    inputs: JsonObject | None = None
    """What the node's parents left, by parent node key ({executor_key,
    external_ref, evidence}); handed with a READY claim only (preflight,
    prepare, submit), None for a root node. An executor that needs it later
    keeps what it needs in its prepared payload or its external reference."""

    @property
    def route_problem(self) -> str | None:
        """Why the recorded intent's payload is not what the node's approved
        route says now (the claim's intent document, read in SQL), or None.
        The observer and recovery act on nothing of such an intent."""
        problem = (self.intent or {}).get("route_problem")
        return str(problem) if problem else None

    @classmethod
    def from_claim(cls, row: ClaimedNode | ObserveClaim | RecoveryClaim, network: str) -> NodeWork:
        """From a row of claim_ready_nodes, claim_observe or claim_recovery_nodes."""
        intent: JsonObject | None = None
        key: str | None = None
        external_ref: str | None = None
        inputs: JsonObject | None = None
        if isinstance(row, ClaimedNode):
            key = row.idempotency_key
            inputs = row.inputs or None
        else:
            intent = row.intent or None
            key = (intent or {}).get("idempotency_key")
            external_ref = row.external_ref
        return cls(
            **{name: getattr(row, name) for name in _CLAIMED},
            idempotency_key=key,
            external_ref=external_ref,
            intent=intent,
            network=network,
            inputs=inputs,
        )


@dataclass(frozen=True)
class Prepared:
    """What the side effect will be, recorded before it happens.

    An EVM transaction names the account whose nonce it uses (``chain_key``,
    ``sender``) and carries its signed bytes (``raw_tx``, 0x hex): the engine
    allocates the nonce when it records them, before the broadcast."""

    nonce: int | None = None
    signed_tx_hash: str | None = None
    external_request_id: str | None = None
    payload: JsonObject | None = None
    chain_key: str | None = None
    sender: str | None = None
    raw_tx: str | None = field(default=None, repr=False)

    @classmethod
    def from_intent(cls, intent: JsonObject | None) -> Prepared | None:
        """The payload recorded on a PREPARED intent (a recovery claim's
        ``intent``), or None when the intent was never prepared."""
        if not intent or intent.get("intent_state") != "PREPARED":
            return None
        transactions = intent.get("transactions") or []
        return cls(
            nonce=intent.get("nonce"),
            signed_tx_hash=intent.get("signed_tx_hash"),
            external_request_id=intent.get("external_request_id"),
            payload=intent.get("prepared_payload"),
            chain_key=intent.get("chain_key"),
            sender=intent.get("sender"),
            raw_tx=transactions[-1]["raw_tx"] if transactions else None,
        )


def seconds_from_ms(column: str) -> Mapping[str, Any]:
    """The metadata of a Recorded field in seconds (``field(metadata=...)``)
    that the procedure's row has in milliseconds, in ``column``."""
    return {"ms": column}


BIG: Mapping[str, Any] = {"big": True}
"""A route field's metadata (``field(metadata=BIG)``): an integer its payload
keeps as a string, as a uint256 (or a uint64 selector) is beyond what a JSON
number holds exactly."""


def big_from(column: str) -> Mapping[str, Any]:
    """The metadata of a BIG Recorded field that the procedure's row has under
    another name, ``column``."""
    return {**BIG, "column": column}


class Recorded:
    """A frozen dataclass that a prepared payload records flat, one key a field
    (what an executor's route or wait was when it prepared), so that observation
    and recovery never depend on a registry changed since. ``recorded`` writes
    the fields, ``from_payload`` reads them back, each as its annotation says
    (int, float or str; a BIG int written as a string)."""

    @classmethod
    def recorded_fields(cls) -> tuple[RecordedField, ...]:
        """The plain fields (int, float, str) in their order: not the ones of
        another type (an EVM route's leg) nor the keyword-only ones (what the
        registry said that the payload does not keep)."""
        found = _RECORDED_FIELDS.get(cls)
        if found is None:
            hints = typing.get_type_hints(cls)
            found = _RECORDED_FIELDS[cls] = tuple(
                RecordedField(f.name, hints[f.name], f.metadata)
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if hints[f.name] in (int, float, str) and not f.kw_only
            )
        return found

    @classmethod
    def recorded_values(cls, payload: Mapping[str, Any]) -> dict[str, Any]:
        return {f.name: f.kind(payload[f.name]) for f in cls.recorded_fields()}

    @classmethod
    def row_values(cls, row: Any, given: Mapping[str, Any]) -> dict[str, Any]:
        """The fields from a procedure's row, by their names (a field in
        seconds from its column in milliseconds, one named apart from its
        column by that column), but for the ``given`` ones."""
        values = dict(given)
        for f in cls.recorded_fields():
            if f.name not in values:
                ms = f.metadata.get("ms")
                column = f.metadata.get("column", f.name)
                values[f.name] = getattr(row, ms) / 1000 if ms else f.kind(getattr(row, column))
        return values

    @classmethod
    def from_row(cls, row: Any, **given: Any) -> Self:
        return cls(**cls.row_values(row, given))

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        return cls(**cls.recorded_values(payload))

    def recorded(self) -> JsonObject:
        return {
            f.name: str(getattr(self, f.name)) if f.metadata.get("big") else getattr(self, f.name)
            for f in self.recorded_fields()
        }


@dataclass(frozen=True)
class RecordedField:
    name: str
    kind: type[int] | type[float] | type[str]
    metadata: Mapping[str, Any]


_RECORDED_FIELDS: dict[type[Recorded], tuple[RecordedField, ...]] = {}


@dataclass(frozen=True)
class SubmitResult:
    external_ref: str
    evidence: JsonObject = field(default_factory=dict)
    settled: bool = False
    """True when the submit itself finished the work (no observation needed)."""


class ObserveStatus(enum.StrEnum):
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    THROTTLED = "THROTTLED"
    """Not observed: the endpoint's request budget had no turn for the read,
    or the endpoint answered 429. Looked at again after ``retry_after``; the
    wait is not the node's (complete_observe_batch does not count it as time
    observing)."""


THROTTLED_READING = "throttled"
"""An executor's reading of a read its endpoint's budget or 429 held back
(its evidence's ``throttled`` says why): a THROTTLED observation, and in
recovery still on its way."""


@dataclass(frozen=True)
class ObserveResult:
    status: ObserveStatus
    evidence: JsonObject = field(default_factory=dict)
    retry_after: float | None = None


class RecoveryOutcome(enum.StrEnum):
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    IN_FLIGHT = "IN_FLIGHT"
    NOT_SUBMITTED = "NOT_SUBMITTED"
    STILL_UNKNOWN = "STILL_UNKNOWN"


@dataclass(frozen=True)
class RecoveryResult:
    outcome: RecoveryOutcome
    evidence: JsonObject = field(default_factory=dict)
    external_ref: str | None = None
    retry_after: float | None = None


V = TypeVar("V", ObserveStatus, RecoveryOutcome)


@dataclass(frozen=True)
class Verdicts:
    """What an executor's readings mean for the node: the status of its work
    done, the status of its work failed for good, the statuses no retry
    settles (for a person); any other is still on its way."""

    done: str
    failed: str
    unsettled: frozenset[str]

    def observation(
        self, status: str, evidence: JsonObject, retry_after: float | None = None
    ) -> ObserveResult:
        """COMPLETED, FAILED, UNKNOWN, or PENDING (looked at again after
        ``retry_after``, if given); THROTTLED for THROTTLED_READING."""
        if status == THROTTLED_READING:
            return ObserveResult(ObserveStatus.THROTTLED, evidence, retry_after=retry_after)
        verdict = self._verdict(
            status,
            ObserveStatus.COMPLETED,
            ObserveStatus.FAILED,
            ObserveStatus.UNKNOWN,
            ObserveStatus.PENDING,
        )
        pending = verdict is ObserveStatus.PENDING
        return ObserveResult(verdict, evidence, retry_after=retry_after if pending else None)

    def recovery(
        self,
        status: str,
        evidence: JsonObject,
        external_ref: str | None = None,
        retry_after: float | None = None,
    ) -> RecoveryResult:
        """COMPLETED, FAILED, STILL_UNKNOWN, or IN_FLIGHT (the observer follows
        it from there)."""
        outcome = self._verdict(
            status,
            RecoveryOutcome.COMPLETED,
            RecoveryOutcome.FAILED,
            RecoveryOutcome.STILL_UNKNOWN,
            RecoveryOutcome.IN_FLIGHT,
        )
        return RecoveryResult(outcome, evidence, external_ref, retry_after)

    def _verdict(self, status: str, done: V, failed: V, unsettled: V, on_its_way: V) -> V:
        """The one reading of ``status`` that observation and recovery share,
        each in its own words: done, failed, unsettled (for a person), or still
        on its way."""
        if status == self.done:
            return done
        if status == self.failed:
            return failed
        if status in self.unsettled:
            return unsettled
        return on_its_way


class HealthStatus(enum.StrEnum):
    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    DOWN = "DOWN"


@dataclass(frozen=True)
class HealthResult:
    status: HealthStatus
    detail: JsonObject = field(default_factory=dict)


def parts_health(parts: Mapping[str, tuple[HealthStatus, str]]) -> HealthResult:
    """The health of an executor that reaches several parts (chains, venues),
    each read as HEALTHY, DEGRADED or DOWN with a line of detail, by its key:
    DOWN (which keeps the executor's nodes READY) only when every part is
    down, DEGRADED when any is down or degraded, else HEALTHY."""
    statuses = [status for status, _line in parts.values()]
    if statuses and all(status is HealthStatus.DOWN for status in statuses):
        worst = HealthStatus.DOWN
    elif any(status is not HealthStatus.HEALTHY for status in statuses):
        worst = HealthStatus.DEGRADED
    else:
        worst = HealthStatus.HEALTHY
    return HealthResult(worst, {key: line for key, (_status, line) in parts.items()})


class ExecutorError(Exception):
    """An external call failed. ``retryable`` says whether trying again later
    may succeed; the procedures decide what that means for the node (a
    retryable failure after a prepared side effect goes to recovery).
    ``throttled``: the outside world asked to wait, not for anything of the
    node's: the call was not made, or refused with a 429, for the endpoint's
    request budget (qtg_runner.budget), or a service is out of reach or has
    not made yet what the node needs (Iris's re-attestation). Before anything
    is signed the node goes back to READY after ``retry_after`` without
    counting an attempt."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        throttled: bool = False,
    ):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.throttled = throttled


ROUTE_REFUSALS = frozenset({"QT002", "QT014", "QT032"})
"""What a route procedure (evm_transfer_route, ccip_send_route,
bybit_withdraw_route...) raises for a node the registry will not let be
signed: its data wrong (QT002), an account, chain or venue not registered
(QT014), a destination not allowed (QT032)."""

R = TypeVar("R")


async def route_row(pool: AsyncConnectionPool[Any], call: Call[R]) -> R:
    """The registry's word on a node: the row of its route procedure, read
    again before every signature. A refusal (ROUTE_REFUSALS) fails the node
    before anything is signed, not to be retried: its message says what to
    change in the registry. Any other error is left to the caller's
    classification (the database out of reach is transient)."""
    try:
        async with pool.connection() as conn:
            return await call.aone(conn)
    except psycopg.Error as exc:
        if exc.sqlstate in ROUTE_REFUSALS:
            message = exc.diag.message_primary or str(exc)
            raise ExecutorError(f"{exc.sqlstate}: {message}", retryable=False) from None
        raise


def executor_budget(
    env: Mapping[str, str], url: str, url_variable: str, kind: str
) -> EndpointBudget:
    """The request budget of the endpoint at ``url`` (from ``url_variable``),
    at the rate its ``_RATE`` variable sets (qtg_runner.budget); a rate the
    runner cannot use is a retryable refusal naming it."""
    try:
        rate = configured_rate(env, url_variable, kind, url)
    except BudgetError as exc:
        raise ExecutorError(str(exc), retryable=True, retry_after=30.0) from None
    return endpoint_budget(url, endpoint_name(kind, url_variable), rate)


class ExecutorBase:
    """What a shipped executor is built with: the registry makes one with the
    runner's pool and network; its settings (RPC URLs, signers' keys, venues'
    key files) come from ``env``, the process environment by default, never
    from the database. A subclass sets what the Executor protocol asks of its
    class."""

    key: ClassVar[str]
    has_side_effect: ClassVar[bool]
    deduplicated_by: ClassVar[str]
    node_config_schema: ClassVar[JsonObject]
    description: ClassVar[str]

    def __init__(
        self, pool: AsyncConnectionPool[Any], network: str, env: Mapping[str, str] | None = None
    ) -> None:
        self._pool = pool
        self._network = network
        self._env = os.environ if env is None else env


@runtime_checkable
class Executor(Protocol):
    key: ClassVar[str]
    has_side_effect: ClassVar[bool]
    deduplicated_by: ClassVar[str]
    """What makes its outside world take a repeated submission of the same
    prepared payload once (an EVM nonce, a venue's request id): recovery
    resubmits a prepared payload only for an executor that names it; one that
    names nothing is never resubmitted (its UNKNOWN nodes wait for evidence or
    an operator)."""
    node_config_schema: ClassVar[JsonObject]
    description: ClassVar[str]

    async def preflight(self, work: NodeWork) -> None: ...

    async def prepare(self, work: NodeWork) -> Prepared: ...

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult: ...

    async def observe(self, work: NodeWork) -> ObserveResult: ...

    async def recover(self, work: NodeWork) -> RecoveryResult: ...

    async def health(self) -> HealthResult: ...


@runtime_checkable
class NonceSigner(Protocol):
    """Optional, beside Executor: an executor whose prepare() signs at an account
    nonce (EVM). The engine allocates the nonce when it records the intent
    (compare and set); when another dispatcher took that nonce first, the
    dispatcher asks for the same transaction signed again at ``nonce``, the
    account's next one, and records it again."""

    async def resign(self, work: NodeWork, prepared: Prepared, nonce: int) -> Prepared: ...


@runtime_checkable
class BatchSubmitter(Protocol):
    """Optional, beside Executor: many side effects in one external call (an
    exchange's batch endpoint, the sim's one INSERT). The dispatcher uses it for
    the nodes of a batch whose intents are recorded; results come back in the
    order of ``items``. Raising ExecutorError means none of them happened."""

    async def submit_many(
        self, items: Sequence[tuple[NodeWork, Prepared]]
    ) -> list[SubmitResult]: ...
