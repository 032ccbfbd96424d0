"""The public procedures, typed: one Python function per procedure a runner or an
operator may EXECUTE, and per deploy step the owner (the admin login) calls.

Each wrapper's signature is the procedure's contract, written once: its name,
its arguments (the SQL names without ``p_``, in the SQL order), their
PostgreSQL types (the ``Pg`` in each ``Annotated`` alias below), which have a
default, and its result (a frozen dataclass per row type, or a scalar).
``@procedure`` turns the signature into a call; the function bodies are
empty on purpose. What two procedures share is declared once: a row type
that begins with another's columns is its subclass (the routes begin with
their chain, the claims with the node and the claim's secret), and a
procedure that takes another's arguments is declared ``like=`` it, with only
its result. tests/runner/test_procs.py compares every signature with pg_proc,
so a change of a procedure fails that test instead of a runner.

A wrapper returns a ``Call``: the SQL text in named-argument notation with an
explicit cast per argument (``p_worker => %s::text``), the parameters (sent
server-side, never spliced into the text), and how to decode a row. The same
``Call`` runs on a sync connection (``all``, ``one``, ``one_or_none``) or an
async one (``aall``, ``aone``, ``aone_or_none``):

    claims = procs.claim_ready_nodes(worker_id, max=64).all(conn)
    state = await procs.fail_submit(node_id, claim.claim_secret, error, True).aone(aconn)

An argument left at ``DEFAULT`` is not sent, so the procedure's own default
applies (the default is written once, in SQL). ``None`` is sent as NULL.
jsonb arguments take dicts and lists, arrays take sequences; enum results come
back as the StrEnums below.
"""

from __future__ import annotations

import enum
import functools
import inspect
import types
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from decimal import Decimal
from typing import (
    Annotated,
    Any,
    ClassVar,
    Final,
    Generic,
    Literal,
    ParamSpec,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from qtg_runner.errors import QT_ERRORS

R = TypeVar("R")
P = ParamSpec("P")
Access = Literal["runner", "operator", "owner"]
"""Who may call a wrapped procedure: the network's runner or operator role
(EXECUTE granted), or only the owner: a deploy step (sql/functions/admin/, or an
internal routine) run on the admin connection (no network role may EXECUTE it)."""
JsonObject = dict[str, Any]


# -- PostgreSQL types, as Python sees them ---------------------------------------


@dataclass(frozen=True)
class Pg:
    """The PostgreSQL type of an argument or a result column, spelt as format_type
    spells it (with search_path = the network schema, pg_catalog)."""

    type: str


class Default(enum.Enum):
    """The type of ``DEFAULT``: the argument is not sent; the procedure's default applies."""

    DEFAULT = "DEFAULT"


DEFAULT: Final = Default.DEFAULT

Text = Annotated[str, Pg("text")]
Integer = Annotated[int, Pg("integer")]
BigInt = Annotated[int, Pg("bigint")]
Boolean = Annotated[bool, Pg("boolean")]
SmallInt = Annotated[int, Pg("smallint")]
Numeric = Annotated[Decimal | float, Pg("numeric")]
"""A numeric argument: a Decimal, a float or an int."""
NumericValue = Annotated[Decimal, Pg("numeric")]
"""A numeric result."""
Timestamp = Annotated[datetime, Pg("timestamp with time zone")]
Json = Annotated[Mapping[str, Any] | list[Any] | Jsonb, Pg("jsonb")]
"""A jsonb argument: a dict or a list (or one wrapped as Jsonb already)."""
JsonValue = Annotated[JsonObject, Pg("jsonb")]
"""A jsonb result (every jsonb the procedures return is an object)."""
BigIntArray = Annotated[Sequence[int | None], Pg("bigint[]")]
TextArray = Annotated[Sequence[str | None], Pg("text[]")]
BooleanArray = Annotated[Sequence[bool | None], Pg("boolean[]")]
JsonArray = Annotated[Sequence[Mapping[str, Any] | list[Any] | None], Pg("jsonb[]")]
NumericArray = Annotated[Sequence[Decimal | None], Pg("numeric[]")]
TimestampArray = Annotated[Sequence[datetime | None], Pg("timestamp with time zone[]")]
ClaimSecret = Annotated[str, Pg("text")]
"""A claim's secret: what a claim hands its claimer, the one proof every
completion call presents. Never logged: the rows that carry one leave it out of
their repr, and so does a ``Call``."""
ClaimSecretArray = Annotated[Sequence[str | None], Pg("text[]")]


class RequestState(enum.StrEnum):
    PENDING_APPROVAL = "PENDING_APPROVAL"
    APPROVED = "APPROVED"
    EXECUTING = "EXECUTING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"


class NodeState(enum.StrEnum):
    PENDING = "PENDING"
    READY = "READY"
    SUBMITTING = "SUBMITTING"
    SUBMITTED = "SUBMITTED"
    OBSERVING = "OBSERVING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    SKIPPED = "SKIPPED"


class ObservePhase(enum.StrEnum):
    PRE_BASELINE = "pre_baseline"
    AT_BASELINE = "at_baseline"
    OVER_BASELINE = "over_baseline"
    FATAL = "fatal"


class ProposalKind(enum.StrEnum):
    LANE_BASELINE = "lane_baseline"
    TEMPLATE = "template"
    EXECUTOR_CONFIG = "executor_config"
    CALLBACK_TARGET = "callback_target"
    REGISTRY = "registry"


class ProposalState(enum.StrEnum):
    PROPOSED = "PROPOSED"
    APPLIED = "APPLIED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    SUPERSEDED = "SUPERSEDED"


ENUM_TYPES: Final[dict[type[enum.StrEnum], str]] = {
    RequestState: "qtg.request_state",
    NodeState: "qtg.node_state",
    ObservePhase: "qtg.observe_phase",
    ProposalKind: "qtg.proposal_kind",
    ProposalState: "qtg.proposal_state",
}
"""The shared enum types, with their PostgreSQL names (test_procs checks the labels)."""


# -- result rows ----------------------------------------------------------------
# A row type that begins with another's columns is declared as its subclass:
# the shared columns are written once, in the order both have them.


@dataclass(frozen=True)
class NodeClaim:
    """What every claim of a node starts with: the node, its movement, and the
    secret that proves the claim."""

    node_id: BigInt
    request_id: BigInt
    claim_secret: ClaimSecret = field(repr=False)


@dataclass(frozen=True)
class ClaimedNode(NodeClaim):
    """A node claim_ready_nodes moved to SUBMITTING, with its new intent."""

    intent_id: BigInt
    idempotency_key: Text
    node_key: Text
    executor_key: Text
    has_side_effect: Boolean
    node_config: JsonValue
    lane: Text
    amount: NumericValue
    asset: Text
    attempt: Integer
    inputs: JsonValue | None
    """For a node with parents, what they left: {parent node_key: {executor_key,
    external_ref, evidence}}; None for a root node."""


@dataclass(frozen=True)
class ObserveClaim(NodeClaim):
    """A node claim_observe locked for one observation."""

    node_key: Text
    executor_key: Text
    node_config: JsonValue
    lane: Text
    external_ref: Text | None
    observe_started_at: Timestamp | None
    observe_count: Integer
    amount: NumericValue
    asset: Text
    intent: JsonValue | None


@dataclass(frozen=True)
class RecoveryClaim(NodeClaim):
    """A node claim_recovery_nodes leased for reconciliation, with its latest intent."""

    node_state: NodeState
    node_key: Text
    executor_key: Text
    has_side_effect: Boolean
    node_config: JsonValue
    lane: Text
    external_ref: Text | None
    amount: NumericValue
    asset: Text
    recovery_attempts: Integer
    intent: JsonValue | None


@dataclass(frozen=True)
class RecordedIntent:
    """One element of record_intent_prepared_batch: the intent id, or the refusal."""

    node_id: BigInt
    intent_id: BigInt | None
    error_code: Text | None
    error_message: Text | None


@dataclass(frozen=True)
class NodeOutcome:
    """One element of a batch call on nodes (complete_submit_batch, release_nodes,
    quarantine_nodes):
    the node's new state, or the refusal."""

    node_id: BigInt
    node_state: NodeState | None
    error_code: Text | None
    error_message: Text | None


@dataclass(frozen=True)
class ObserveOutcome:
    """complete_observe's answer: where the node is now and when it is looked at next."""

    node_state: NodeState
    observe_phase: ObservePhase | None
    next_observe_at: Timestamp | None


@dataclass(frozen=True)
class ObservedNode:
    """One element of complete_observe_batch: where the node is now and when it
    is looked at next, or the refusal."""

    node_id: BigInt
    node_state: NodeState | None
    observe_phase: ObservePhase | None
    next_observe_at: Timestamp | None
    error_code: Text | None
    error_message: Text | None


@dataclass(frozen=True)
class EvmChain:
    """A row of evm_chains."""

    chain_key: Text
    chain_id: BigInt
    rpc_url_env: Text
    finality_depth: Integer
    block_time_ms: Integer


@dataclass(frozen=True)
class SigningChain(EvmChain):
    """What every route a node signs on an EVM chain starts with: the chain and
    the fee caps of its transactions."""

    max_fee_per_gas: NumericValue
    max_priority_fee_per_gas: NumericValue


@dataclass(frozen=True)
class TokenSend(SigningChain):
    """What every route that sends a token from a treasury account starts with:
    the token, the account and its signer, the recipient and the amount."""

    token: Text
    token_address: Text
    decimals: SmallInt
    sender: Text
    signer_id: Text
    recipient: Text
    recipient_kind: Text
    amount_units: NumericValue


@dataclass(frozen=True)
class TransferRoute(TokenSend):
    """evm_transfer_route: what an ERC-20 transfer node may sign, from the registry."""

    next_nonce: BigInt | None


@dataclass(frozen=True)
class CcipSendRoute(SigningChain):
    """ccip_send_route: what a CCIP send node may sign, from the registry (both chains)."""

    token: Text
    token_address: Text
    source_selector: NumericValue
    router: Text
    onramp: Text
    sender: Text
    signer_id: Text
    dest_chain_key: Text
    dest_chain_id: BigInt
    dest_rpc_url_env: Text
    dest_finality_depth: Integer
    dest_block_time_ms: Integer
    dest_selector: NumericValue
    dest_offramp: Text
    dest_token_address: Text
    recipient: Text
    recipient_kind: Text
    amount_units: NumericValue
    next_nonce: BigInt | None
    ccip_version: Text
    gas_limit: Integer
    fee_margin_bps: Integer
    max_fee_wei: NumericValue


@dataclass(frozen=True)
class CctpBurnRoute(SigningChain):
    """cctp_burn_route: what a CCTP v2 burn node may sign, from the registry."""

    token_address: Text
    source_domain: BigInt
    token_messenger: Text
    message_transmitter: Text
    sender: Text
    signer_id: Text
    destination_chain: Text
    destination_domain: BigInt
    destination_token_messenger: Text
    mint_recipient: Text
    recipient_kind: Text
    amount_units: NumericValue
    max_fee_units: NumericValue
    min_finality_threshold: Integer
    next_nonce: BigInt | None


@dataclass(frozen=True)
class CctpMintRoute(SigningChain):
    """cctp_mint_route: what a CCTP v2 mint node may sign and what its burn must show."""

    token_address: Text
    destination_domain: BigInt
    message_transmitter: Text
    token_messenger: Text
    sender: Text
    signer_id: Text
    source_chain: Text
    source_domain: BigInt
    source_token_messenger: Text
    source_token: Text
    mint_recipient: Text
    recipient_kind: Text
    amount_units: NumericValue
    max_fee_units: NumericValue
    next_nonce: BigInt | None


@dataclass(frozen=True)
class StargateRoute(TokenSend):
    """stargate_send_route: what a Stargate send node may sign, from the registry."""

    min_amount_units: NumericValue
    mode: Text
    src_eid: BigInt
    src_pool: Text
    src_token_messaging: Text
    dst_chain_key: Text
    dst_chain_id: BigInt
    dst_rpc_url_env: Text
    dst_finality_depth: Integer
    dst_block_time_ms: Integer
    dst_eid: BigInt
    dst_pool: Text
    dst_token_address: Text
    next_nonce: BigInt | None


@dataclass(frozen=True)
class ExchangeVenue:
    """A row of exchange_venue_list."""

    venue_key: Text
    kind: Text
    base_url_env: Text
    key_file_env: Text


@dataclass(frozen=True)
class WithdrawRoute(ExchangeVenue):
    """bybit_withdraw_route: what an exchange withdrawal node may request, from the registry."""

    request_salt: Text
    chain_key: Text
    venue_chain: Text
    chain_id: BigInt
    rpc_url_env: Text
    finality_depth: Integer
    block_time_ms: Integer
    coin: Text
    token_address: Text
    decimals: SmallInt
    recipient: Text
    recipient_kind: Text
    amount: Text
    amount_units: NumericValue


@dataclass(frozen=True)
class DepositRoute(ExchangeVenue):
    """bybit_deposit_route: where an exchange deposit node waits for its credit."""

    chain_key: Text
    venue_chain: Text
    coin: Text
    deposit_address: Text
    amount: Text
    since_ms: BigInt | None


@dataclass(frozen=True)
class AbandonedTransaction:
    """abandoned_transactions: a transaction a requeued node abandoned, which the
    chain must show can never be mined before the node signs again."""

    chain_key: Text
    rpc_url_env: Text
    sender: Text
    nonce: BigInt
    tx_hashes: Annotated[list[str], Pg("text[]")]


@dataclass(frozen=True)
class PaidInDeposit:
    """paid_in_deposits: a bybit_deposit parent of a node and the deposit it
    recorded, with why that record does not stand (None when it does)."""

    node_key: Text
    node_state: NodeState
    payload: JsonValue | None
    payload_problem: Text | None


@dataclass(frozen=True)
class CapitalTransfer:
    """A row of claim_capital_transfers: a transfer into a deposit address, due a check."""

    node_id: BigInt
    request_id: BigInt
    venue_key: Text
    kind: Text
    base_url_env: Text
    key_file_env: Text
    chain_key: Text
    venue_chain: Text
    coin: Text
    deposit_address: Text
    tx_hash: Text
    expected_amount: NumericValue
    landed_at: Timestamp
    deadline_at: Timestamp
    checks: Integer


@dataclass(frozen=True)
class BalanceAccount:
    """A row of begin_balance_read: one account to read, with the read's id and
    the database clock taken before any of it is read."""

    read_id: BigInt
    read_started_at: Timestamp
    account_kind: Text
    account_key: Text
    address: Text
    asset: Text
    rpc_url_env: Text | None
    token_address: Text | None
    decimals: SmallInt | None
    venue_kind: Text | None
    base_url_env: Text | None
    key_file_env: Text | None


@dataclass(frozen=True)
class DriftCheck:
    """A row of verify_drift: one snapshot verified against the engine's records."""

    snapshot_id: BigInt
    account_kind: Text
    account_key: Text
    address: Text
    asset: Text
    actual: NumericValue | None
    expected_low: NumericValue | None
    expected_high: NumericValue | None
    outcome: Text
    alert_id: BigInt | None


@dataclass(frozen=True)
class StrandedCcipSend:
    """A row of ccip_stranded_sends: a CCIP send whose destination execution FAILED."""

    node_id: BigInt
    message_id: Text
    source_chain_key: Text
    source_rpc_url_env: Text
    source_tx: Text
    source_onramp: Text
    token_data: Text
    dest_chain_key: Text
    dest_chain_id: BigInt
    dest_rpc_url_env: Text
    dest_offramp: Text
    max_fee_per_gas: NumericValue
    max_priority_fee_per_gas: NumericValue
    attempts: Annotated[list[Any], Pg("jsonb")]
    sender: Text
    """The node's sender: the source transaction's receipt must be its."""


@dataclass(frozen=True)
class NonceMark:
    """A row of settle_evm_nonces: where an account's settled nonces end."""

    chain_key: Text
    address: Text
    settled_below: BigInt
    moved: BigInt
    behind: Boolean


@dataclass(frozen=True)
class ClaimCheck:
    """One element of check_claims: NULL error when the claim still holds."""

    node_id: BigInt
    error_code: Text | None
    error_message: Text | None


@dataclass(frozen=True)
class EndedSession:
    """A row of end_stalled_sessions: a session held past the engine's bounds."""

    pid: Integer
    login: Text
    state: Text
    held_seconds: NumericValue
    ended: Boolean


@dataclass(frozen=True)
class NonceGap:
    """A row of evm_nonce_gaps: a nonce that will never be broadcast unless filled."""

    chain_key: Text
    sender: Text
    nonce: BigInt
    signer_id: Text
    rpc_url_env: Text
    max_fee_per_gas: NumericValue
    max_priority_fee_per_gas: NumericValue
    chain_id: BigInt
    tx_hashes: Annotated[list[str], Pg("text[]")]


@dataclass(frozen=True)
class StaleTransaction:
    """A row of evm_stale_transactions: an intent's or a fill's newest transaction, waiting long."""

    kind: Text
    intent_id: BigInt | None
    node_id: BigInt | None
    chain_key: Text
    sender: Text
    nonce: BigInt
    tx_hash: Text
    raw_tx: Text
    recorded_at: Timestamp
    tx_hashes: Annotated[list[str], Pg("text[]")]
    tx_purposes: Annotated[list[str], Pg("text[]")]
    signer_id: Text
    rpc_url_env: Text
    max_fee_per_gas: NumericValue
    max_priority_fee_per_gas: NumericValue
    chain_id: BigInt


@dataclass(frozen=True)
class LanePacing:
    """A row of refresh_lane_pacing: a lane's learned poll schedule, or none yet."""

    lane: Text
    samples: Integer
    learned: Boolean
    poll_at: Annotated[list[Decimal], Pg("numeric[]")] | None


@dataclass(frozen=True)
class EndpointLease:
    """A row of lease_endpoints: the runner processes sharing an endpoint now
    (this one included), and until when one of them was asked to slow down."""

    endpoint: Text
    sharers: Integer
    slowed_until: Timestamp | None


@dataclass(frozen=True)
class PipelineRollup:
    """A row of roll_up_pipeline_counts: where an entity's counted history ends."""

    entity: Text
    below_id: BigInt
    open_rows: Integer
    rolled: Boolean
    behind: BigInt


@dataclass(frozen=True)
class RegisteredExecutor:
    """A row of registered_executors."""

    executor_key: Text
    has_side_effect: Boolean
    node_config_schema: JsonValue


@dataclass(frozen=True)
class AuditChainCheck:
    """verify_audit_chain's answer: where the audit log's hash chain first breaks."""

    ok: Boolean
    checked: BigInt
    first_bad_seq: BigInt | None
    problem: Text | None
    head_seq: BigInt
    head_hash: Text


@dataclass(frozen=True)
class HeldNode:
    """A READY node a value limit or a tripped breaker holds, and why."""

    node_id: BigInt
    movement_id: BigInt
    node_key: Text
    lane: Text
    executor_key: Text
    reason: Text


@dataclass(frozen=True)
class AuditExportRow:
    """One audit_log row as an export carries it: the hashed text and both hashes (hex)."""

    seq: BigInt
    canonical: Text
    prev_hash: Text
    row_hash: Text


@dataclass(frozen=True)
class ClaimedCallback:
    """A callback claim_callbacks handed out: what the POST needs, and the claim's
    secret for complete_callback. Where the target's signing secret is
    (secret_ref), never the secret: that is not in the database."""

    callback_id: BigInt
    movement_id: BigInt
    event_type: Text
    idempotency_key: Text
    payload: JsonValue
    target_name: Text
    url: Text
    allow_private: Boolean
    secret_ref: Text
    attempt: Integer
    lease_seconds: Numeric
    claim_secret: ClaimSecret = field(repr=False)


@dataclass(frozen=True)
class CreatedMovement:
    movement_id: BigInt
    created: Boolean


@dataclass(frozen=True)
class TrippedBreaker:
    """trip_breaker's answer: the breaker's state (TRIPPED) and whether this call
    tripped it (false: it was tripped already)."""

    breaker_state: Text
    tripped: Boolean


@dataclass(frozen=True)
class IntakeMovement:
    """One item of create_movements: its movement, the state it is in now, and
    whether this call created it (false: its external id named it already)."""

    movement_id: BigInt
    request_state: RequestState
    created: Boolean


@dataclass(frozen=True)
class ApprovalOutcome:
    """One movement of approve_movements: its state after the call, or the
    refusal (QT022: the caller created it; the refusal is audited)."""

    movement_id: BigInt
    request_state: RequestState
    error_code: Text | None
    error_message: Text | None


@dataclass(frozen=True)
class Requeue:
    requeue_id: BigInt
    requeue_state: Text
    node_state: NodeState


@dataclass(frozen=True)
class RehearsalRequest:
    """A rehearsal request claim_rehearsal_request handed to the calling service."""

    request_id: BigInt
    movement_id: BigInt
    claim: Integer
    """The claim's number: finish_rehearsal_request takes it back."""


@dataclass(frozen=True)
class Proposal:
    """A configuration proposal just made: PROPOSED until a second operator
    approves it, with the open proposal of the same subject it superseded."""

    proposal_id: BigInt
    proposal_state: ProposalState
    expires_at: Timestamp
    supersedes: BigInt | None


@dataclass(frozen=True)
class LaneBaseline:
    """A row of lane_baselines: one lane's pacing parameters."""

    PG_TYPE: ClassVar[str] = "lane_baselines"

    lane: Text
    baseline_seconds: NumericValue
    first_poll_fraction: NumericValue
    poll_fraction: NumericValue
    over_factor: NumericValue
    fatal_factor: NumericValue
    min_poll_seconds: NumericValue
    max_poll_seconds: NumericValue
    updated_at: Timestamp
    observe_error_retry_seconds: NumericValue
    recovery_retry_seconds: NumericValue
    release_retry_seconds: NumericValue


# -- the call -------------------------------------------------------------------


class ResultMismatch(RuntimeError):
    """A procedure answered without a column its wrapper declares, or with another
    number of rows than asked for (a bug: the SQL and this module disagree;
    tests/runner/test_procs.py should have said so)."""


class Refused(RuntimeError):
    """A procedure refused the call with a WARNING that carries a QT SQLSTATE (one
    that is not ADVICE).

    A procedure does this, instead of raising an error, when the refusal itself
    must be kept (an error would roll back its audit row): e.g. approve_movement
    by the movement's creator (QT022). Nothing else changed."""

    def __init__(self, sqlstate: str, message: str, hint: str | None) -> None:
        super().__init__(f"{sqlstate}: {message}")
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint


ADVICE: Final[frozenset[str]] = frozenset(code for code, e in QT_ERRORS.items() if e.advice)
"""The QT codes a procedure warns with to advise, not to refuse (qtg_runner/errors.py):
the call went ahead (QT025: a movement approved whose latest rehearsal failed).
Never raised as Refused; ``advice`` hands them to the caller."""


@dataclass(frozen=True)
class Advice:
    """A WARNING with an ADVICE code: what the caller should be told about a call
    that went ahead."""

    sqlstate: str
    message: str
    hint: str | None


@contextmanager
def advice(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
) -> Iterator[list[Advice]]:
    """The advice of the calls made on ``conn`` in the block: a list, in the
    order the warnings came, filled as each call is made (sync or async)::

        with procs.advice(conn) as advised:
            state = procs.approve_movement(movement_id).one(conn)
        for a in advised:
            print(a.message)
    """
    seen: list[Advice] = []

    def note(diag: psycopg.errors.Diagnostic) -> None:
        sqlstate = diag.sqlstate or ""
        if diag.severity_nonlocalized == "WARNING" and sqlstate in ADVICE:
            seen.append(Advice(sqlstate, diag.message_primary or "", diag.message_hint))

    conn.add_notice_handler(note)
    try:
        yield seen
    finally:
        conn.remove_notice_handler(note)


class _Refusals:
    """Collects the QT warnings of one call that refuse it, the ADVICE codes left
    out (a notice handler; a notice's fields are only readable inside the
    handler, so they are copied there)."""

    def __init__(self) -> None:
        self.seen: list[Refused] = []

    def __call__(self, diag: psycopg.errors.Diagnostic) -> None:
        sqlstate = diag.sqlstate or ""
        if (
            diag.severity_nonlocalized == "WARNING"
            and sqlstate.startswith("QT")
            and sqlstate not in ADVICE
        ):
            self.seen.append(Refused(sqlstate, diag.message_primary or "", diag.message_hint))

    def raise_first(self) -> None:
        if self.seen:
            raise self.seen[0]


@contextmanager
def _refusals_raised(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
) -> Iterator[None]:
    """Raise Refused after the block when a statement in it warned with a QT code."""
    refusals = _Refusals()
    conn.add_notice_handler(refusals)
    try:
        yield
    finally:
        conn.remove_notice_handler(refusals)
    refusals.raise_first()


@dataclass(frozen=True)
class Call(Generic[R]):
    """One procedure call, ready to run on a sync or an async connection."""

    procedure: str
    query: str
    params: tuple[Any, ...] = field(repr=False)
    """Sent server-side; left out of the repr (they may hold a claim secret)."""
    decode: Callable[[tuple[Any, ...]], R]
    columns: tuple[str, ...] | None
    """The result columns a row result must have (None for a scalar)."""

    def _rows(
        self, cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], rows: list[tuple[Any, ...]]
    ) -> list[tuple[Any, ...]]:
        """``rows`` with the declared columns, in the declared order. A column the
        procedure has and the wrapper does not know is left out (a newer
        procedure still serves this runner); a declared column it lacks is a bug."""
        if self.columns is None:
            return rows
        names = [c.name for c in cursor.description or ()]
        if tuple(names) == self.columns:
            return rows
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise ResultMismatch(f"{self.procedure} returned no column {', '.join(missing)}")
        at = [names.index(c) for c in self.columns]
        return [tuple(row[i] for i in at) for row in rows]

    def _one(self, rows: list[tuple[Any, ...]]) -> R:
        if len(rows) != 1:
            raise ResultMismatch(f"{self.procedure} returned {len(rows)} rows, expected one")
        return self.decode(rows[0])

    def _one_or_none(self, rows: list[tuple[Any, ...]]) -> R | None:
        if len(rows) > 1:
            raise ResultMismatch(
                f"{self.procedure} returned {len(rows)} rows, expected at most one"
            )
        return self.decode(rows[0]) if rows else None

    def _fetch(self, conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        with _refusals_raised(conn), conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(self.query, self.params)
            return self._rows(cur, cur.fetchall())

    async def _afetch(self, conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
        with _refusals_raised(conn):
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(self.query, self.params)
                return self._rows(cur, await cur.fetchall())

    def all(self, conn: psycopg.Connection[Any]) -> list[R]:
        """Every row, decoded."""
        return [self.decode(row) for row in self._fetch(conn)]

    def one(self, conn: psycopg.Connection[Any]) -> R:
        """The one row (a scalar procedure, void included, answers one row)."""
        return self._one(self._fetch(conn))

    def one_or_none(self, conn: psycopg.Connection[Any]) -> R | None:
        """The row, or None when the procedure returned none (e.g. a claim miss)."""
        return self._one_or_none(self._fetch(conn))

    async def aall(self, conn: psycopg.AsyncConnection[Any]) -> list[R]:
        return [self.decode(row) for row in await self._afetch(conn)]

    async def aone(self, conn: psycopg.AsyncConnection[Any]) -> R:
        return self._one(await self._afetch(conn))

    async def aone_or_none(self, conn: psycopg.AsyncConnection[Any]) -> R | None:
        return self._one_or_none(await self._afetch(conn))

    def _fetch_between(
        self, conn: psycopg.Connection[Any], before: Sequence[str], after: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        with _refusals_raised(conn), conn.cursor(row_factory=tuple_row) as cur:
            # the pipeline's end sends them all with one Sync and reads every result
            with conn.pipeline():
                for statement in before:
                    conn.execute(statement)
                cur.execute(self.query, self.params)
                for statement in after:
                    conn.execute(statement)
            return self._rows(cur, cur.fetchall())

    async def _afetch_between(
        self, conn: psycopg.AsyncConnection[Any], before: Sequence[str], after: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        with _refusals_raised(conn):
            async with conn.cursor(row_factory=tuple_row) as cur:
                async with conn.pipeline():
                    for statement in before:
                        await conn.execute(statement)
                    await cur.execute(self.query, self.params)
                    for statement in after:
                        await conn.execute(statement)
                return self._rows(cur, await cur.fetchall())

    def all_between(
        self, conn: psycopg.Connection[Any], before: Sequence[str], after: Sequence[str] = ()
    ) -> list[R]:
        """Every row, decoded, the call sent between the statements ``before``
        and ``after`` it (transaction control: BEGIN, SAVEPOINT, RELEASE,
        COMMIT), all of them in one round trip (pipeline mode). The first
        statement that fails raises its error, and the server runs none after it."""
        return [self.decode(row) for row in self._fetch_between(conn, before, after)]

    async def aall_between(
        self,
        conn: psycopg.AsyncConnection[Any],
        before: Sequence[str],
        after: Sequence[str] = (),
    ) -> list[R]:
        """all_between on an async connection."""
        return [self.decode(row) for row in await self._afetch_between(conn, before, after)]


_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


def _not_committed(status: TransactionStatus) -> psycopg.OperationalError:
    return psycopg.OperationalError(
        f"the transaction did not commit: the connection was {status.name} at its end"
        " (a statement in it failed, or the connection was lost); nothing of it stands"
    )


@contextmanager
def begun_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The block of a transaction a call of it begins (``BEGIN`` sent with the
    call by all_between): rolled back when the block raises; committed on
    leaving it unless a call in it sent the ``COMMIT`` already. A block left
    with the transaction failed or the connection lost (an error swallowed
    in it) raises OperationalError: nothing of it committed."""
    try:
        yield
    except BaseException:
        if conn.info.transaction_status in _OPEN:
            with suppress(psycopg.Error):
                conn.execute("ROLLBACK")
        raise
    status = conn.info.transaction_status
    if status == TransactionStatus.INTRANS:
        conn.execute("COMMIT")
    elif status != TransactionStatus.IDLE:
        if status == TransactionStatus.INERROR:
            with suppress(psycopg.Error):
                conn.execute("ROLLBACK")
        raise _not_committed(status)


@asynccontextmanager
async def abegun_transaction(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """begun_transaction on an async connection (aall_between)."""
    try:
        yield
    except BaseException:
        if conn.info.transaction_status in _OPEN:
            with suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise
    status = conn.info.transaction_status
    if status == TransactionStatus.INTRANS:
        await conn.execute("COMMIT")
    elif status != TransactionStatus.IDLE:
        if status == TransactionStatus.INERROR:
            with suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise _not_committed(status)


def one_each(conn: psycopg.Connection[Any], calls: Sequence[Call[R]]) -> list[R]:
    """The one row of each of many calls of one procedure, sent together in a
    pipeline (executemany): for bulk set-up, one round trip instead of one a call."""
    if not calls:
        return []
    query = calls[0].query
    if any(call.query != query for call in calls):
        raise ValueError("one_each: every call must be the same procedure with the same arguments")
    results: list[R] = []
    with _refusals_raised(conn), conn.cursor(row_factory=tuple_row) as cur:
        cur.executemany(query, [call.params for call in calls], returning=True)
        while True:
            results.append(calls[0]._one(calls[0]._rows(cur, cur.fetchall())))
            if not cur.nextset():
                break
    return results


# -- the procedure registry -----------------------------------------------------


@dataclass(frozen=True)
class Arg:
    name: str
    """The SQL name (with ``p_``)."""
    type: str
    has_default: bool


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class Procedure:
    """What a wrapper declares about its procedure (tests/runner/test_procs.py checks it)."""

    name: str
    access: Access
    args: tuple[Arg, ...]
    returns: str
    """The return type: 'record' for a TABLE result, a composite type's name,
    a scalar type, or 'void'."""
    columns: tuple[Column, ...]
    """The result columns of a row result; empty for a scalar."""


PROCEDURES: dict[str, Procedure] = {}
"""Every wrapped procedure, by name."""


def _pg_type(hint: Any) -> str:
    """The PostgreSQL type of an annotation: its ``Pg`` marker, or a shared enum's
    name, looking through ``| None`` and ``| Default``."""
    if hint is None or hint is type(None):
        return "void"
    if get_origin(hint) is Annotated:
        marks = [m for m in hint.__metadata__ if isinstance(m, Pg)]
        if len(marks) == 1:
            return marks[0].type
    if get_origin(hint) in (Union, types.UnionType):
        found = {_pg_type(a) for a in get_args(hint) if a not in (type(None), Default)}
        if len(found) == 1:
            return found.pop()
    if hint in ENUM_TYPES:
        return ENUM_TYPES[hint]
    raise TypeError(f"no PostgreSQL type for {hint!r}")


def _converter(hint: Any) -> Callable[[Any], Any] | None:
    """How to turn a returned value into the annotation's type (enums only)."""
    if get_origin(hint) in (Union, types.UnionType):
        for arg in get_args(hint):
            if arg is not type(None):
                return _converter(arg)
    if isinstance(hint, type) and hint in ENUM_TYPES:
        return hint
    return None


def _adapt(pg_type: str, value: Any) -> Any:
    """A Python value as psycopg should send it for ``pg_type``."""
    if value is None:
        return None
    if pg_type == "jsonb":
        if isinstance(value, Jsonb):
            return value
        return Jsonb(dict(value) if isinstance(value, Mapping) else value)
    if pg_type == "jsonb[]":
        return [_adapt("jsonb", v) for v in value]
    if pg_type.endswith("[]"):
        return list(value)
    return value


Decoder = Callable[[tuple[Any, ...]], Any]


def _row_decoder(row_type: type[Any]) -> tuple[Decoder, tuple[Column, ...]]:
    hints = get_type_hints(row_type, include_extras=True)
    names = [f.name for f in fields(row_type)]
    columns = tuple(Column(name, _pg_type(hints[name])) for name in names)
    converters = [_converter(hints[name]) for name in names]

    def decode(row: tuple[Any, ...]) -> Any:
        return row_type(
            *(
                value if conv is None or value is None else conv(value)
                for conv, value in zip(converters, row, strict=True)
            )
        )

    return decode, columns


def _scalar_decoder(hint: Any) -> Decoder:
    if _pg_type(hint) == "void":
        return lambda row: None
    conv = _converter(hint)
    if conv is None:
        return lambda row: row[0]
    return lambda row: None if row[0] is None else conv(row[0])


@overload
def procedure(access: Access) -> Callable[[Callable[P, Call[R]]], Callable[P, Call[R]]]: ...


@overload
def procedure(
    access: Access, *, like: Callable[P, Call[Any]]
) -> Callable[[Callable[[], Call[R]]], Callable[P, Call[R]]]: ...


def procedure(access: Access, *, like: Callable[..., Call[Any]] | None = None) -> Any:
    """Make the decorated signature a wrapper of the procedure of the same name,
    EXECUTE-granted to ``access``'s role. With ``like`` (a wrapper declared
    above), the procedure takes that one's arguments, as they are declared
    there: the decorated signature declares no arguments, only the result."""

    def wrap(signature: Callable[..., Call[R]]) -> Callable[..., Call[R]]:
        name = signature.__name__
        sig = inspect.signature(signature)
        (result,) = get_args(get_type_hints(signature, include_extras=True)["return"])
        if like is not None:
            if sig.parameters:
                raise TypeError(f"{name}: a wrapper like {like.__name__} declares no arguments")
            sig = inspect.signature(like).replace(return_annotation=sig.return_annotation)
        hints = get_type_hints(inspect.unwrap(like or signature), include_extras=True)
        args: list[Arg] = []
        for param in sig.parameters.values():
            if param.default is not inspect.Parameter.empty and param.default is not DEFAULT:
                raise TypeError(f"{name}({param.name}): the only Python default is DEFAULT")
            args.append(
                Arg(f"p_{param.name}", _pg_type(hints[param.name]), param.default is DEFAULT)
            )
        if is_dataclass(result):
            assert isinstance(result, type)
            decode, columns = _row_decoder(result)
            returns = getattr(result, "PG_TYPE", "record")
            column_names: tuple[str, ...] | None = tuple(c.name for c in columns)
        else:
            decode, columns, column_names = _scalar_decoder(result), (), None
            returns = _pg_type(result)
        PROCEDURES[name] = Procedure(name, access, tuple(args), returns, columns)

        @functools.cache
        def query(sent: tuple[int, ...]) -> str:
            named = ", ".join(f"{args[i].name} => %s::{args[i].type}" for i in sent)
            return f"SELECT * FROM {name}({named})"

        @functools.wraps(signature)
        def call(*a: Any, **kw: Any) -> Call[R]:
            bound = sig.bind(*a, **kw)
            sent: list[int] = []
            params: list[Any] = []
            for i, arg in enumerate(args):
                value = bound.arguments.get(arg.name[2:], DEFAULT)
                if value is not DEFAULT:
                    sent.append(i)
                    params.append(_adapt(arg.type, value))
            return Call(name, query(tuple(sent)), tuple(params), decode, column_names)

        call.__signature__ = sig  # type: ignore[attr-defined]
        return call

    return wrap


# -- runner procedures ----------------------------------------------------------
# The bodies are empty: @procedure builds each call from its signature. A
# procedure that takes another's arguments says so (``like=``) and declares
# only its result.


@procedure("runner")
def start_approved_movements(
    max: Integer | Default = DEFAULT, actor: Text | Default = DEFAULT
) -> Call[Integer]:
    """APPROVED -> EXECUTING for up to ``max`` movements; returns how many started."""


@procedure("runner")
def claim_ready_nodes(
    worker: Text,
    max: Integer | Default = DEFAULT,
    lease_seconds: Numeric | Default = DEFAULT,
    instance_id: Text | Default | None = DEFAULT,
    start: Integer | Default = DEFAULT,
) -> Call[ClaimedNode]:
    """READY -> SUBMITTING for up to ``max`` nodes, each with a new intent. With
    ``instance_id`` (``worker`` and it as the worker's heartbeat names them), the
    claims are recovered at once once that heartbeat says the worker is dead.
    With ``start``, up to that many APPROVED movements start first, in the same
    transaction, and their root nodes are claimed with the READY ones."""


@procedure("runner")
def record_intent_prepared(
    node_id: BigInt,
    claim_secret: ClaimSecret,
    nonce: BigInt | Default | None = DEFAULT,
    signed_tx_hash: Text | Default | None = DEFAULT,
    external_request_id: Text | Default | None = DEFAULT,
    payload: Json | Default | None = DEFAULT,
    chain_key: Text | Default | None = DEFAULT,
    sender: Text | Default | None = DEFAULT,
    raw_tx: Text | Default | None = DEFAULT,
) -> Call[BigInt]:
    """Intent CLAIMED | PREPARED -> PREPARED, before the side effect; returns the
    intent id. With ``chain_key`` and ``sender`` the nonce is allocated from the
    account's evm_nonces row (QT031 when it is not the next one)."""


@procedure("runner")
def record_intent_prepared_batch(
    node_ids: BigIntArray,
    claim_secrets: ClaimSecretArray,
    nonces: BigIntArray | Default | None = DEFAULT,
    signed_tx_hashes: TextArray | Default | None = DEFAULT,
    external_request_ids: TextArray | Default | None = DEFAULT,
    payloads: JsonArray | Default | None = DEFAULT,
    chain_keys: TextArray | Default | None = DEFAULT,
    senders: TextArray | Default | None = DEFAULT,
    raw_txs: TextArray | Default | None = DEFAULT,
) -> Call[RecordedIntent]:
    """record_intent_prepared for many nodes in one transaction; one row per element."""


@procedure("runner")
def evm_transfer_route(node_id: BigInt) -> Call[TransferRoute]:
    """What an ERC-20 transfer node may sign, as the chain registry says now."""


@procedure("runner")
def ccip_send_route(node_id: BigInt) -> Call[CcipSendRoute]:
    """What a CCIP send node may sign: source chain, Router, sender, destination
    chain, the lane (version, ramps, fee margin and cap), a receiver allowed
    there, the amount in base units, the token-only gas limit."""


@procedure("runner")
def cctp_burn_route(node_id: BigInt) -> Call[CctpBurnRoute]:
    """What a CCTP v2 burn node may sign, as the registry says now."""


@procedure("runner")
def cctp_mint_route(node_id: BigInt) -> Call[CctpMintRoute]:
    """What a CCTP v2 mint node may sign, and what its burn's message must show."""


@procedure("runner")
def stargate_send_route(node_id: BigInt) -> Call[StargateRoute]:
    """What a Stargate send node may sign, as the chain registry says now."""


@procedure("runner")
def bybit_withdraw_route(node_id: BigInt) -> Call[WithdrawRoute]:
    """What an exchange withdrawal node may request, as the venue and chain registry say now."""


@procedure("runner")
def bybit_deposit_route(node_id: BigInt) -> Call[DepositRoute]:
    """Where an exchange deposit node waits for its credit: the venue and its deposit address."""


@procedure("runner")
def abandoned_transactions(node_id: BigInt) -> Call[AbandonedTransaction]:
    """The EVM transactions a requeued node abandoned, to read on the chain first."""


@procedure("runner")
def paid_in_deposits(node_id: BigInt) -> Call[PaidInDeposit]:
    """The deposits a node spends from a venue after: its bybit_deposit parents' records."""


@procedure("runner")
def exchange_venue_list() -> Call[ExchangeVenue]:
    """The network's registered exchange venues, for an executor's health check."""


@procedure("runner")
def claim_capital_transfers(
    max: Integer | Default = DEFAULT, lease_seconds: Numeric | Default = DEFAULT
) -> Call[CapitalTransfer]:
    """Transfers into a venue's deposit address, followed until credited: the due ones."""


@procedure("runner")
def record_capital_transfer_check(
    node_id: BigInt,
    status: Text,
    credited_amount: Numeric | Default | None = DEFAULT,
    record: Json | Default | None = DEFAULT,
    error: Text | Default | None = DEFAULT,
    retry_after_seconds: Numeric | Default | None = DEFAULT,
) -> Call[Text]:
    """What the venue says about a followed transfer; the followup's state afterwards."""


@procedure("runner")
def begin_balance_read() -> Call[BalanceAccount]:
    """A balance read: its id, the database clock before it, and every account to read."""


@procedure("runner")
def record_balance_snapshots(
    read_id: BigInt,
    account_kinds: TextArray,
    account_keys: TextArray,
    addresses: TextArray,
    assets: TextArray,
    balances: NumericArray,
    block_numbers: BigIntArray,
    errors: TextArray,
) -> Call[Integer]:
    """What a read found, one element per account: a balance (a chain's with its
    block) or the error that kept it from being read; how many were recorded."""


@procedure("runner")
def verify_drift(
    worker: Text,
    max: Integer | Default = DEFAULT,
    anchor_lag_seconds: Numeric | Default = DEFAULT,
) -> Call[DriftCheck]:
    """The unverified snapshots against the engine's records; drift raises an alert
    and trips the breakers of the account's lanes and venues. The effects decided
    more than ``anchor_lag_seconds`` ago are summed once into the accounts' anchors."""


@procedure("runner")
def prune_balance_snapshots(worker: Text, max: Integer | Default = DEFAULT) -> Call[Integer]:
    """Deletes the verified snapshots past the network's snapshot_keep_days (never
    a baseline, an alert's, or an account's newest); how many."""


@procedure("runner")
def evm_chains() -> Call[EvmChain]:
    """The network's registered EVM chains (key, id, RPC URL's variable, finality, block time)."""


@procedure("runner")
def evm_next_nonce(chain_key: Text, sender: Text) -> Call[BigInt | None]:
    """The nonce the engine hands out next for a treasury account (None before its first)."""


@procedure("runner")
def settle_evm_nonces(max: Integer | Default = DEFAULT) -> Call[NonceMark]:
    """Each treasury account's mark moved up over the nonces settled for good."""


@procedure("runner")
def evm_nonce_gaps(max: Integer | Default = DEFAULT) -> Call[NonceGap]:
    """Nonces allocated to intents that will never broadcast (FAILED, ABANDONED, skipped)."""


@procedure("runner")
def record_nonce_fill(
    chain_key: Text,
    sender: Text,
    nonce: BigInt,
    tx_hash: Text,
    raw_tx: Text,
    replaces: Text | Default | None = DEFAULT,
) -> Call[Boolean]:
    """Records a fill (a zero-value self-transfer closing a gap) before it is broadcast."""


@procedure("runner")
def ccip_stranded_sends(max: Integer | Default = DEFAULT) -> Call[StrandedCcipSend]:
    """CCIP sends whose destination execution FAILED, waiting for a manual execution."""


@procedure("runner")
def record_ccip_manual_execution(
    node_id: BigInt,
    message_id: Text,
    executor: Text,
    nonce: BigInt,
    tx_hash: Text,
    raw_tx: Text,
    replaces: Text | Default | None = DEFAULT,
) -> Call[Boolean]:
    """Records a manual execution of a stranded CCIP message before it is broadcast."""


@procedure("runner")
def evm_stale_transactions(
    blocks: Integer | Default = DEFAULT,
    min_seconds: Integer | Default = DEFAULT,
    max: Integer | Default = DEFAULT,
) -> Call[StaleTransaction]:
    """Sent intents' and open fills' newest transactions recorded long ago (fee bump candidates)."""


@procedure("runner")
def record_evm_replacement(intent_id: BigInt, tx_hash: Text, raw_tx: Text) -> Call[Boolean]:
    """Records a fee bump of an intent's transaction (same nonce) before it is broadcast."""


@procedure("runner")
def record_nonce_closed(
    chain_key: Text,
    sender: Text,
    nonce: BigInt,
    how: Text,
    evidence: Json | Default = DEFAULT,
) -> Call[Boolean]:
    """Reports a nonce consumed on its chain (fill_mined, consumed, found_mined): an audit row."""


@procedure("runner")
def complete_submit(
    node_id: BigInt,
    claim_secret: ClaimSecret,
    external_ref: Text,
    evidence: Json | Default | None = DEFAULT,
    settled: Boolean | Default = DEFAULT,
) -> Call[NodeState]:
    """SUBMITTING -> SUBMITTED, or COMPLETED when ``settled``."""


@procedure("runner")
def check_claims(node_ids: BigIntArray, claim_secrets: ClaimSecretArray) -> Call[ClaimCheck]:
    """Whether each claim still holds (SUBMITTING, its secret, a live lease)."""


@procedure("runner")
def complete_submit_batch(
    node_ids: BigIntArray,
    claim_secrets: ClaimSecretArray,
    external_refs: TextArray,
    evidence: JsonArray | Default | None = DEFAULT,
    settled: BooleanArray | Default | None = DEFAULT,
) -> Call[NodeOutcome]:
    """complete_submit for many nodes in one transaction; one row per element."""


@procedure("runner")
def fail_submit(
    node_id: BigInt,
    claim_secret: ClaimSecret,
    error: Text,
    retryable: Boolean,
    retry_after_seconds: Numeric | Default | None = DEFAULT,
) -> Call[NodeState]:
    """SUBMITTING -> READY | FAILED | UNKNOWN after the executor refused the node."""


@procedure("runner")
def release_nodes(
    node_ids: BigIntArray,
    claim_secrets: ClaimSecretArray,
    reason: Text,
    wait_seconds: Numeric | Default | None = DEFAULT,
) -> Call[NodeOutcome]:
    """SUBMITTING -> READY for claimed nodes whose intent was never PREPARED (this
    runner cannot run them, or their endpoint is throttled); no submit attempt is
    consumed. They wait ``wait_seconds`` (0 to 3600), or their lane's
    release_retry_seconds when it is None. One row per element."""


@procedure("runner")
def observe_candidates(
    max: Integer | Default = DEFAULT, movement_id: BigInt | Default | None = DEFAULT
) -> Call[BigInt]:
    """The observer's advisory, unlocked list of node ids due for observation."""


@procedure("runner")
def claim_observe(
    node_id: BigInt, worker: Text, movement_id: BigInt | Default | None = DEFAULT
) -> Call[ObserveClaim]:
    """Locks one candidate for observation; no row when it no longer qualifies."""


@procedure("runner")
def claim_observe_batch(
    node_ids: BigIntArray, worker: Text, movement_id: BigInt | Default | None = DEFAULT
) -> Call[ObserveClaim]:
    """Locks candidates for observation (at most 32), each on its own as
    claim_observe does; one row per node claimed, in id order."""


@procedure("runner")
def complete_observe(
    node_id: BigInt,
    claim_secret: ClaimSecret,
    outcome: Text,
    evidence: Json | Default | None = DEFAULT,
    retry_after_seconds: Numeric | Default | None = DEFAULT,
    worker: Text | Default | None = DEFAULT,
) -> Call[ObserveOutcome]:
    """SUBMITTED | OBSERVING -> OBSERVING | COMPLETED | FAILED | UNKNOWN."""


@procedure("runner")
def complete_observe_batch(
    node_ids: BigIntArray,
    claim_secrets: ClaimSecretArray,
    outcomes: TextArray,
    evidence: JsonArray | Default | None = DEFAULT,
    retry_after_seconds: NumericArray | Default | None = DEFAULT,
    worker: Text | Default | None = DEFAULT,
) -> Call[ObservedNode]:
    """complete_observe for the nodes of one observer's claim, in one call (in
    the claim's transaction: its secrets prove that transaction's claim); one
    row per element, in input order."""


@procedure("runner")
def claim_recovery_nodes(
    worker: Text,
    max: Integer | Default = DEFAULT,
    lease_seconds: Numeric | Default = DEFAULT,
    instance_id: Text | Default | None = DEFAULT,
) -> Call[RecoveryClaim]:
    """Leases UNKNOWN and stale SUBMITTING nodes for reconciliation: those whose
    lease ran out and those whose claimer's heartbeat says it is dead; quarantines
    a node whose claims keep dying instead."""


@procedure("runner")
def quarantine_nodes(
    node_ids: BigIntArray, claim_secrets: ClaimSecretArray, errors: TextArray
) -> Call[NodeOutcome]:
    """Sets claimed nodes aside, in their state, with why: no claim hands them out
    until an operator releases them. One row per element."""


@procedure("runner")
def complete_recovery(
    node_id: BigInt,
    claim_secret: ClaimSecret,
    outcome: Text,
    evidence: Json | Default | None = DEFAULT,
    external_ref: Text | Default | None = DEFAULT,
    retry_after_seconds: Numeric | Default | None = DEFAULT,
) -> Call[NodeState]:
    """UNKNOWN | SUBMITTING -> whatever recover()'s evidence says."""


@procedure("runner")
def expire_movements(
    max: Integer | Default = DEFAULT, actor: Text | Default = DEFAULT
) -> Call[Integer]:
    """Movements past expires_at with no side effect started -> EXPIRED; returns how many."""


@procedure("runner")
def promote_audit(worker: Text, max: Integer | Default = DEFAULT) -> Call[Integer]:
    """audit_outbox -> the hash-chained audit_log, oldest first; returns how many."""


@procedure("runner")
def claim_callbacks(worker: Text, max: Integer | Default = DEFAULT) -> Call[ClaimedCallback]:
    """Due PENDING callbacks leased to this dispatcher (SKIP LOCKED); rows without
    a registered target REFUSED, rows past their attempts or age DEAD."""


@procedure("runner")
def complete_callback(
    callback_id: BigInt,
    claim_secret: ClaimSecret,
    status_code: Integer | None,
    error: Text | Default | None = DEFAULT,
) -> Call[Text]:
    """One POST's result: 2xx SENT; otherwise PENDING after a backoff with jitter,
    or DEAD past the attempts or the age. Returns the new delivery_state."""


@procedure("runner")
def end_stalled_sessions(
    worker: Text,
    idle_seconds: Numeric | Default = DEFAULT,
    statement_seconds: Numeric | Default = DEFAULT,
    transaction_seconds: Numeric | Default = DEFAULT,
) -> Call[EndedSession]:
    """Ends the network's logins' sessions idle in a transaction, in one
    statement or in one transaction past the engine's bounds, whatever their
    own timeouts."""


@procedure("runner")
def prune_callbacks(worker: Text, max: Integer | Default = DEFAULT) -> Call[Integer]:
    """Deletes the SENT and NO_TARGET callbacks done with more than the network's
    callback_settings.keep_days ago (never PENDING, DEAD or REFUSED); how many."""


@procedure("runner")
def expire_proposals(
    max: Integer | Default = DEFAULT, actor: Text | Default = DEFAULT
) -> Call[Integer]:
    """Configuration proposals past expires_at -> EXPIRED; returns how many."""


@procedure("runner")
def heartbeat(
    worker_name: Text,
    instance_id: Text,
    tier: Text,
    expected_interval_seconds: Numeric,
    processed: Integer | Default = DEFAULT,
    consecutive_errors: Integer | Default = DEFAULT,
    last_error: Text | Default | None = DEFAULT,
    host: Text | Default | None = DEFAULT,
    pid: Integer | Default | None = DEFAULT,
) -> Call[None]:
    """Upserts one worker instance's heartbeat."""


@procedure("runner")
def worker_stopped(worker_name: Text, instance_id: Text) -> Call[Boolean]:
    """Marks a worker instance not live after a clean stop."""


@procedure("runner")
def refresh_lane_pacing() -> Call[LanePacing]:
    """Each lane's poll schedule learned again from its latency samples."""


@procedure("runner")
def roll_up_pipeline_counts(max: Integer | Default = DEFAULT) -> Call[PipelineRollup]:
    """The finished movements and nodes since the last call added to pipeline_counts' totals."""


@procedure("runner")
def registered_executors() -> Call[RegisteredExecutor]:
    """The executor registry, as a runner checks it at start."""


@procedure("runner")
def report_executor_health(
    executor_key: Text,
    status: Text,
    detail: Json | Default = DEFAULT,
    reported_by: Text | Default = DEFAULT,
) -> Call[None]:
    """Records an executor's latest health check."""


@procedure("runner")
def lease_endpoints(
    instance: Text,
    endpoints: TextArray,
    slowed_until: TimestampArray,
    ttl_seconds: Numeric,
) -> Call[EndpointLease]:
    """Renews this runner process's leases on the endpoints it calls (for
    ``ttl_seconds``, 1 to 600), records a 429's Retry-After per endpoint (None:
    none), and answers per endpoint, in the order given, how many processes
    share it and until when one of them was asked to slow down."""


# -- operator procedures --------------------------------------------------------


@procedure("operator")
def create_movement(
    external_id: Text,
    amount: Numeric,
    plan: Json | Default | None = DEFAULT,
    template: Text | Default | None = DEFAULT,
    params: Json | Default | None = DEFAULT,
    asset: Text | Default = DEFAULT,
    expires_at: Timestamp | Default | None = DEFAULT,
    callback_url: Text | Default | None = DEFAULT,
    priority: Integer | Default = DEFAULT,
) -> Call[CreatedMovement]:
    """(none) -> PENDING_APPROVAL, from a plan or a template; idempotent on external_id.
    The creator is the calling login."""


@procedure("operator")
def create_movements(items: Json) -> Call[IntakeMovement]:
    """create_movement for up to 1000 items (a list of dicts of its arguments by
    name) in one transaction; one row per item, in order. A bad item refuses the
    whole batch, its index in the message."""


@procedure("operator")
def verify_audit_chain(
    expected_seq: BigInt | Default | None = DEFAULT,
    expected_hash: Text | Default | None = DEFAULT,
) -> Call[AuditChainCheck]:
    """Recomputes the audit log's hash chain: the first broken row, or ok; with an
    exported head (seq and hash), that row must still carry that hash."""


@procedure("operator")
def trip_breaker(
    scope: Text, name: Text, reason: Text, for_seconds: Numeric | Default | None = DEFAULT
) -> Call[TrippedBreaker]:
    """One operator pauses a scope (movement, lane, venue, chain or the network
    '*'), with a reason, until another resumes it or for_seconds pass; a
    breaker tripped already stays so, a reset asked for withdrawn."""


@procedure("operator")
def reset_breaker(scope: Text, name: Text) -> Call[Text]:
    """A paused scope resumes: by another operator than its pauser at once
    (CLOSED; the pauser is refused, QT022); one the engine tripped when two
    different operators ask (RESET_REQUESTED, then CLOSED)."""


@procedure("operator")
def confirm_balance_baseline(
    account_kind: Text,
    account_key: Text,
    address: Text,
    asset: Text,
    snapshot_id: BigInt,
    reason: Text,
) -> Call[Text]:
    """An operator confirms an account's baseline (one runner's first reading):
    drifts from it trip breakers from then on. Returns who confirmed it."""


@procedure("operator")
def acknowledge_drift_alert(alert_id: BigInt, reason: Text) -> Call[Text]:
    """Two different operators accept a drifted balance: the first gets
    ACK_REQUESTED, the second ACKNOWLEDGED (the account re-baselined); the same
    login twice is Refused (QT022)."""


@procedure("operator")
def limit_held_nodes() -> Call[HeldNode]:
    """The READY nodes a value limit or a tripped breaker holds now, and why."""


@procedure("operator")
def audit_export(
    after_seq: BigInt | Default = DEFAULT, max: Integer | Default = DEFAULT
) -> Call[AuditExportRow]:
    """The audit log's rows after ``after_seq``, in order, as an export carries them."""


@procedure("operator")
def replay_callback(callback_id: BigInt, reason: Text) -> Call[Text]:
    """DEAD | REFUSED -> PENDING, due at once, the same webhook-id; audited."""


@procedure("operator")
def approve_movement(movement_id: BigInt) -> Call[RequestState]:
    """PENDING_APPROVAL -> APPROVED, by the calling login, which must not be the
    creator's (else Refused, QT022: the refusal is audited). A movement whose
    latest rehearsal failed is approved with a QT025 warning: ``advice``
    collects it."""


@procedure("operator")
def approve_movements(movement_ids: BigIntArray) -> Call[ApprovalOutcome]:
    """approve_movement for up to 1000 movements in one transaction; the creator's
    own are refused in their rows (QT022, audited), not with a warning."""


@procedure("operator")
def rehearsal_input(movement_id: BigInt) -> Call[JsonValue]:
    """What a rehearsal of the movement needs, read in one snapshot: the movement,
    its plan as create_movement takes it, and every row of the network's
    configuration tables (``registry``, what load_rehearsal_registry takes)."""


@procedure("operator")
def record_rehearsal(
    movement_id: BigInt,
    outcome: Text,
    summary: Json,
    registry_revision: BigInt | Default | None = DEFAULT,
) -> Call[BigInt]:
    """Records a rehearsal ('passed' or 'failed', its summary a JSON object) on a
    movement PENDING_APPROVAL, as the calling login, with the registry's
    revision (``registry_revision``, rehearsal_input's: refused with QT024
    when the registry changed since); audited. Returns its id."""


@procedure("operator")
def request_rehearsal(movement_id: BigInt) -> Call[BigInt]:
    """Asks for a rehearsal of a movement PENDING_APPROVAL, to be served by a
    rehearsal service (`qtg rehearse --requested`); audited, NOTIFYs
    qtg_<network>_rehearsals. While one is open, answers its id, writing nothing."""


@procedure("operator")
def claim_rehearsal_request() -> Call[RehearsalRequest]:
    """The oldest open rehearsal request (or one whose claim is over 30 minutes
    old), claimed by the calling login; none when nothing waits. Requests of
    movements no longer awaiting approval are finished in passing."""


@procedure("operator")
def finish_rehearsal_request(
    request_id: BigInt, claim: Integer, rehearsal_id: BigInt | None, problem: Text | None
) -> Call[Timestamp]:
    """Closes a request the calling login claimed, by the claim's number
    claim_rehearsal_request handed it, with the rehearsal it recorded or the
    problem that kept it from recording one (exactly one); the same call
    again answers the same. Returns when it was finished."""


@procedure("operator")
def cancel_movement(
    movement_id: BigInt, reason: Text | Default | None = DEFAULT
) -> Call[RequestState]:
    """-> CANCELLED at once, or once the nodes in flight settle."""


@procedure("operator")
def set_priority(movement_id: BigInt, priority: Integer, reason: Text) -> Call[Integer]:
    """A movement not finished, and its nodes not finished, take a new priority
    (higher: claimed sooner), with a reason; audited. The same again writes
    nothing. Returns the priority."""


@procedure("operator")
def requeue_node(node_id: BigInt, reason: Text) -> Call[Requeue]:
    """A fresh side effect for an UNKNOWN node with a PREPARED intent, or a
    retry of a FAILED node of which nothing was prepared: the first login's
    call requests it (REQUESTED), another login's call applies it (APPLIED,
    node READY); the requester's own second call is Refused (QT022)."""


@procedure("operator")
def propose_lane_baseline(
    lane: Text,
    baseline_seconds: Numeric,
    min_poll_seconds: Numeric | Default | None = DEFAULT,
    max_poll_seconds: Numeric | Default | None = DEFAULT,
    first_poll_fraction: Numeric | Default | None = DEFAULT,
    poll_fraction: Numeric | Default | None = DEFAULT,
    over_factor: Numeric | Default | None = DEFAULT,
    fatal_factor: Numeric | Default | None = DEFAULT,
    observe_error_retry_seconds: Numeric | Default | None = DEFAULT,
    recovery_retry_seconds: Numeric | Default | None = DEFAULT,
    release_retry_seconds: Numeric | Default | None = DEFAULT,
) -> Call[Proposal]:
    """Proposes a lane's pacing and retry settings; NULL keeps the current value."""


@procedure("operator")
def propose_template(
    template_name: Text, plan: Json | None, description: Text | Default = DEFAULT
) -> Call[Proposal]:
    """Proposes a named plan template, new or replacing one."""


@procedure("operator")
def propose_executor_config(
    executor_key: Text,
    node_config_schema: Json | None,
    description: Text | Default | None = DEFAULT,
) -> Call[Proposal]:
    """Proposes a registered executor's node config schema and description."""


@procedure("operator")
def propose_callback_target(
    target_name: Text,
    url: Text,
    secret_ref: Text,
    allow_private: Boolean | Default = DEFAULT,
    enabled: Boolean | Default = DEFAULT,
) -> Call[Proposal]:
    """Proposes a receiver of signed callbacks (registered when a second
    operator approves); the same login and value again answer the open proposal."""


@procedure("operator")
def release_quarantine(node_id: BigInt, reason: Text) -> Call[NodeState]:
    """A quarantined node back into circulation in its state, on one operator's word."""


@procedure("operator")
def approve_proposal(proposal_id: BigInt) -> Call[ProposalState]:
    """PROPOSED -> APPLIED, by another login than the proposer's (a self-approval
    answers PROPOSED with a QT022 warning)."""


@procedure("operator")
def reject_proposal(proposal_id: BigInt, reason: Text) -> Call[ProposalState]:
    """PROPOSED -> REJECTED, with a reason."""


CALL_FORMS: Final[Mapping[str, str]] = {
    "movement_create": "create_movement",
    "movement_approve": "approve_movement",
    "movement_cancel": "cancel_movement",
    "movement_priority": "set_priority",
    "node_requeue": "requeue_node",
    "proposal_approve": "approve_proposal",
    "proposal_reject": "reject_proposal",
    "quarantine_release": "release_quarantine",
    "drift_acknowledge": "acknowledge_drift_alert",
    "breaker_trip": "trip_breaker",
    "breaker_reset": "reset_breaker",
}
"""The operator's procedures, for CALL in psql (``CALL movement_approve(21)``,
named as the CLI's ``qtg movement approve``), each with the function it calls
(a wrapper above): they take its arguments (names, types, defaults), then
answer its result in INOUT parameters that default to NULL, so psql prints
the row. They have no wrapper of their own (Python SELECTs the functions);
tests/runner/test_procs.py checks this table against pg_proc."""


# -- deploy steps: the owner's (admin) connection only ----------------------------


@procedure("owner")
def register_executor(
    executor_key: Text,
    has_side_effect: Boolean,
    node_config_schema: Json,
    description: Text | Default = DEFAULT,
) -> Call[None]:
    """Adds or updates an executor (`qtg executors register`, sql/functions/admin/)."""


@procedure("owner")
def upsert_chain(
    chain_key: Text,
    chain_id: BigInt,
    rpc_url_env: Text,
    finality_depth: Integer,
    block_time_ms: Integer,
    max_fee_per_gas: Numeric | Default | None = DEFAULT,
    max_priority_fee_per_gas: Numeric | Default | None = DEFAULT,
) -> Call[None]:
    """Registers or updates an EVM chain of the network; the RPC URL is named by an
    environment variable, never stored (sql/functions/admin/)."""


@procedure("owner")
def propose_registry_change(subject: Text, change: Json) -> Call[Proposal]:
    """Proposes a change to an existing registry entry (chain/KEY, token/CHAIN/SYMBOL,
    protocol/CHAIN/PROTOCOL, ccip_lane/SOURCE/DEST, venue/KEY), applied when a
    second login, an operator's, approves it."""


@procedure("owner")
def upsert_chain_token(
    chain_key: Text, symbol: Text, address: Text, decimals: Integer
) -> Call[None]:
    """Records a token contract on a registered chain (symbol, address, decimals)."""


@procedure("owner")
def set_value_limit(
    scope: Text,
    name: Text,
    max_in_flight: Numeric | None,
    max_per_day: Numeric | None,
    max_per_movement: Numeric | None,
    trip_after_failures: Integer | Default | None = DEFAULT,
    trip_window_seconds: Numeric | Default = DEFAULT,
) -> Call[None]:
    """A scope's value limits (USDC in flight, per UTC day, per movement) and when
    its breaker trips; None: no such limit, all None removes the scope's row."""


@procedure("owner")
def set_balance_settings(
    drift_threshold: Numeric | Default | None = DEFAULT,
    venue_withdraw_fee_cap: Numeric | Default | None = DEFAULT,
    max_balance: Numeric | Default | None = DEFAULT,
    snapshot_keep_days: Integer | Default | None = DEFAULT,
) -> Call[None]:
    """The network's drift threshold, the exchange withdrawal fee cap, the largest
    balance a read may report and the days a verified snapshot is kept (0: all);
    None keeps one as it is."""


@procedure("owner")
def set_callback_settings(
    max_attempts: Integer | Default | None = DEFAULT,
    max_age_seconds: Numeric | Default | None = DEFAULT,
    backoff_base_seconds: Numeric | Default | None = DEFAULT,
    backoff_cap_seconds: Numeric | Default | None = DEFAULT,
    lease_seconds: Numeric | Default | None = DEFAULT,
    keep_days: Integer | Default | None = DEFAULT,
) -> Call[None]:
    """The network's callback delivery rules (attempts, largest age, first and
    longest wait, lease) and the days a SENT or NO_TARGET callback is kept (0:
    all); None keeps one as it is. Audited."""


@procedure("owner")
def upsert_chain_protocol(
    chain_key: Text, protocol: Text, remote_id: Numeric, contracts: Json
) -> Call[None]:
    """Records a bridge protocol on a registered chain: its id in the protocol
    (CCTP domain, CCIP chain selector, LayerZero endpoint id) and its contracts."""


@procedure("owner")
def upsert_ccip_lane(
    source_chain_key: Text,
    dest_chain_key: Text,
    version: Text,
    token_data: Text | Default = DEFAULT,
    fee_margin_bps: Integer | Default = DEFAULT,
    max_fee_wei: Numeric | Default = DEFAULT,
    onramp: Text | Default | None = DEFAULT,
    offramp: Text | Default | None = DEFAULT,
) -> Call[None]:
    """Records a CCIP lane between two registered chains: its version (1.5 or
    1.6), ramps, the token pool's offchain data (cctp or none), the fee
    margin over the Router's quote and the most a send pays."""


@procedure("owner")
def upsert_treasury_account(chain_key: Text, address: Text, signer_id: Text) -> Call[None]:
    """Records a treasury account on a registered chain with its signer's id (never a key)."""


@procedure("owner", like=propose_callback_target)
def upsert_callback_target() -> Call[None]:
    """Registers or changes a receiver of signed callbacks: its url, where its
    signing secret is (env:NAME or file:NAME, never the secret), whether it may be
    private, whether it is enabled."""


@procedure("owner")
def allow_destination(chain_key: Text, address: Text, label: Text) -> Call[None]:
    """Puts an address on a registered chain's allow-list of destinations."""


@procedure("owner")
def disallow_destination(chain_key: Text, address: Text) -> Call[Boolean]:
    """Takes an address off a chain's allow-list; whether it was on it."""


@procedure("owner")
def upsert_exchange_venue(
    venue_key: Text, kind: Text, base_url_env: Text, key_file_env: Text
) -> Call[None]:
    """An exchange venue: its kind, the NAMES of the variables of its URL and key file."""


@procedure("owner")
def upsert_venue_chain(venue_key: Text, chain_key: Text, venue_chain: Text) -> Call[None]:
    """Records the venue's name for one of our registered chains."""


@procedure("owner")
def upsert_venue_deposit_address(
    venue_key: Text, chain_key: Text, coin: Text, address: Text
) -> Call[None]:
    """Records the venue's deposit address for a coin on a chain (and allow-lists it there)."""


@procedure("owner")
def load_rehearsal_registry(registry: Json) -> Call[Integer]:
    """Replaces this database's registry tables named in ``registry`` (rehearsal_input's)
    with its rows; only in a database marked a test database (else QT042).
    Returns the number of rows loaded."""


@procedure("owner")
def register_template(
    template_name: Text, plan: Json, description: Text | Default = DEFAULT
) -> Call[None]:
    """Adds or replaces a named plan template at once (operators propose_template)."""


@procedure("owner", like=propose_lane_baseline)
def upsert_lane_baseline() -> Call[LaneBaseline]:
    """Sets a lane's pacing and retry parameters at once; NULL keeps the current
    value (operators propose_lane_baseline)."""


@procedure("owner")
def set_executor_config(
    executor_key: Text, node_config_schema: Json, description: Text | None
) -> Call[None]:
    """Sets a registered executor's node config schema and description at once
    (operators propose_executor_config)."""
