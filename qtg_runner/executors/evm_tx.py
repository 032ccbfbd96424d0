"""What the EVM executors share (evm_transfer, cctp_burn, cctp_mint, ccip,
stargate): the chains and signers a runner reaches, broadcasting a recorded
transaction, reading it back from the chain, and what a reading means for the
node (``observed``, ``recovered``).

A node's transaction is one account's nonce on one chain (``ChainLeg``, as the
executor's route function returned it and its prepared payload recorded it).
``read_recorded`` answers what the chain says about the node's recorded hashes
(replacements included), leaving to each executor what its receipt must show:

    final        mined in the canonical chain, at least ``finality_depth``
                 blocks deep, succeeded (``receipt`` set: the caller checks
                 its logs)
    reverted     the same, but the transaction reverted
    mined        mined, not yet final (or its block reorganised away meanwhile)
    pending      not mined, in the node's pool
    rebroadcast  not mined, nonce free, not in the pool (dropped, or
                 reorganised away): the identical recorded raw transaction was
                 broadcast again
    foreign      the nonce is taken by a transaction the engine never recorded
    refused      the node refuses the recorded bytes again

Each executor reads further what its send must have done (an attestation, a
mint, a message executed or delivered on the other chain) and names the
status of a send that landed (``done``: final, attested, minted, executed,
delivered). ``observed`` and ``recovered`` turn any such reading into the
node's outcome, the same way for every executor: ``done`` completes the node,
``reverted`` fails it, a status in ``UNSETTLED`` is for a person (UNKNOWN,
STILL_UNKNOWN), and anything else is still on its way.

``EvmExecutor`` is what the five executors have in common as classes: the
broadcast of the prepared transaction, signing the recorded call again at
another nonce (``resign``), observe and recover through ``observed`` and
``recovered``, the chains' health and closing the clients. A subclass names
the status of its landed send (``landed``), what its broadcast is (``sends``),
the call its payload records (``recorded_send``) and how it reads its send
(``read``); prepare and preflight are its own, from the pieces here: its
route (``EvmRoute``: the route procedure's row, recorded flat in the payload),
the pending nonce and fees, the funds for the gas, and ``signed``.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

from psycopg_pool import AsyncConnectionPool

from qtg_runner.chains.evm import (
    FeeCapExceeded,
    Fees,
    decode_raw,
    eip1559_transaction,
    estimate_gas,
    normalize_address,
    suggest_fees,
)
from qtg_runner.chains.evm_rpc import (
    EvmRpc,
    EvmRpcError,
    Receipt,
    RpcError,
    RpcErrorKind,
    RpcThrottled,
)
from qtg_runner.db import procs
from qtg_runner.executors.base import (
    ExecutorBase,
    ExecutorError,
    HealthResult,
    HealthStatus,
    JsonObject,
    NodeWork,
    ObserveResult,
    Prepared,
    Recorded,
    RecoveryOutcome,
    RecoveryResult,
    SubmitResult,
    Verdicts,
    big_from,
    executor_budget,
    parts_health,
    route_row,
    seconds_from_ms,
)
from qtg_runner.signers import Signer, SignerError, load_async

STALE_HEAD_BLOCKS = 30
"""A head block older than this many block times (at least a minute) is stale."""
RETRY_LATER_S = 30.0
HEAD_MAX_AGE_FRACTION = 0.5
"""How old a chain's head may be when a mined transaction's depth is read
from it, and its fee quote when a transaction is priced, in the chain's
block times: the nodes of one chain observed in one round read the head
once, those prepared together the fees once (EvmRpc.recent). An older head
counts fewer confirmations, never more; the fees stay under the caps."""
BROADCAST_THROTTLE_S = 20.0
"""How long a broadcast waits out its endpoint's throttle (within the
dispatcher's 30 s for a submit) before it is a retryable failure."""
"""The retry hint when the chain cannot be read or the fees are above the cap."""


@dataclass(frozen=True)
class ChainLeg(Recorded):
    """The chain and the account a node's transaction is signed for: the same
    columns in every route procedure's row (evm_transfer_route,
    cctp_burn_route...), recorded flat in the prepared payload."""

    chain_key: str
    chain_id: int
    rpc_url_env: str
    finality_depth: int
    block_time_s: float = field(metadata=seconds_from_ms("block_time_ms"))
    sender: str
    signer_id: str
    max_fee_cap: int = field(metadata=big_from("max_fee_per_gas"))
    priority_fee_cap: int = field(metadata=big_from("max_priority_fee_per_gas"))

    def payload(self) -> JsonObject:
        return self.recorded()


@dataclass(frozen=True)
class EvmRoute(Recorded):
    """A route procedure's word on one node (evm_transfer_route,
    cctp_burn_route...): the leg and the executor's own fields, read from the
    row by their names and recorded flat beside the leg's keys in the prepared
    payload. The engine's next nonce is the row's only."""

    procedure: ClassVar[Callable[[int], procs.Call[Any]]]
    """The route procedure, of a node id."""

    leg: ChainLeg
    engine_next_nonce: int | None = field(default=None, kw_only=True)
    """The sender's next nonce as the engine had it when the route was read
    (not recorded in the payload: a nonce is allocated when it is recorded)."""

    @classmethod
    def from_row(cls, row: Any, **given: Any) -> Self:
        """From a route procedure's row: the leg's columns and the engine's next nonce."""
        return cls(
            leg=ChainLeg.from_row(row),
            engine_next_nonce=row.next_nonce,
            **cls.row_values(row, given),
        )

    @classmethod
    async def of(cls, pool: AsyncConnectionPool[Any], work: NodeWork) -> Self:
        """The registry's word on the node: its route procedure's row, read
        again before every signature (a refusal fails the node: route_row)."""
        return cls.from_row(await route_row(pool, cls.procedure(work.node_id)))

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Self:
        return cls(leg=ChainLeg.from_payload(payload), **cls.recorded_values(payload))

    def recorded(self) -> JsonObject:
        return self.leg.payload() | super().recorded()

    def nonce(self, chain_next: int) -> int:
        """The nonce to sign at: the greater of the chain's pending count and
        the engine's next one."""
        return max(chain_next, self.engine_next_nonce or 0)


def gas_payload(gas: int, fees: Fees) -> JsonObject:
    """The gas and fees a prepared payload records (what a resign signs again)."""
    return {
        "gas": gas,
        "max_fee_per_gas": str(fees.max_fee_per_gas),
        "max_priority_fee_per_gas": str(fees.max_priority_fee_per_gas),
    }


def shared_for(leg: ChainLeg) -> float:
    """How long a read of the leg's chain is shared by the nodes that ask for
    it (EvmRpc.recent): HEAD_MAX_AGE_FRACTION of its block time."""
    return HEAD_MAX_AGE_FRACTION * leg.block_time_s


async def read_together(leg: ChainLeg, rpc: EvmRpc, *reads: Awaitable[Any]) -> list[Any]:
    """A preflight's ``reads`` (shared reads of ``leg``'s chain: ``max_age_s``
    shared_for(leg)) asked in one moment with the sender's ether, so that they
    go to the chain as one Multicall3 read (EvmRpc) and prepare's gas check
    finds the ether read: their answers, in order."""
    answers = await asyncio.gather(*reads, rpc.balance(leg.sender, max_age_s=shared_for(leg)))
    return list(answers[:-1])


async def pending_nonce_and_fees(rpc: EvmRpc, leg: ChainLeg) -> tuple[int, Fees]:
    """The account's pending transaction count and EIP-1559 fees under the
    leg's caps (inside the caller's chain_errors), asked together; the chain's
    fee quote read once for the nodes of one chain prepared together
    (HEAD_MAX_AGE_FRACTION)."""
    chain_next, fees = await asyncio.gather(
        rpc.transaction_count(leg.sender, "pending", max_age_s=shared_for(leg)),
        suggest_fees(
            rpc,
            max_fee_cap=leg.max_fee_cap,
            priority_fee_cap=leg.priority_fee_cap,
            max_age_s=shared_for(leg),
        ),
    )
    return chain_next, fees


def require_funds(
    leg: ChainLeg, funds: int, needed: int, what: str = "the gas needs up to {}"
) -> None:
    """Retry later, nothing signed, while the sender's ``funds`` (wei) are
    short of ``needed``; ``what`` says what needs it."""
    if funds < needed:
        raise ExecutorError(
            f"{leg.sender} holds {funds} wei on {leg.chain_key}, " + what.format(needed),
            retryable=True,
            retry_after=RETRY_LATER_S,
        )


def require_tokens(leg: ChainLeg, held: int, needed: int, token: str | None, send: str) -> None:
    """Retry later, nothing signed, while the sender's ``held`` base units of
    ``token`` are short of what its ``send`` needs."""
    if held < needed:
        of = f" of {token}" if token else ""
        raise ExecutorError(
            f"{leg.sender} holds {held} base units{of} on {leg.chain_key}, "
            f"the {send} needs {needed}",
            retryable=True,
            retry_after=RETRY_LATER_S,
        )


@dataclass(frozen=True)
class Send:
    """What a node's transaction calls: the contract, the calldata and the wei
    it pays."""

    to: str
    data: bytes
    value: int = 0


async def signed(
    signer: Signer, leg: ChainLeg, send: Send, nonce: int, payload: JsonObject
) -> Prepared:
    """``send`` signed at ``nonce`` with the gas and fees ``payload`` records, as
    the intent records it. A signer that gives no good signature this time (a
    KMS or remote signer's error, silence, another account's or a malformed
    signature: SigningFailed) is a retryable refusal: nothing is prepared, so no
    intent records a hash and nothing is broadcast, and the node waits for its
    backoff. Any other SignerError is raised as it is."""
    fees = Fees(int(payload["max_fee_per_gas"]), int(payload["max_priority_fee_per_gas"]))
    tx = eip1559_transaction(
        leg.chain_id, nonce, send.to, send.value, send.data, int(payload["gas"]), fees
    )
    refused: SignerError | None = None
    try:
        signature = await signer.sign_transaction(tx)
    except SignerError as exc:
        if not exc.retryable:
            raise
        refused = exc
    if refused is not None:
        raise ExecutorError(
            f"chain {leg.chain_key}, account {leg.sender}: {refused}",
            retryable=True,
            retry_after=RETRY_LATER_S,
        )
    return Prepared(
        nonce=nonce,
        signed_tx_hash=signature.tx_hash,
        payload=payload,
        chain_key=leg.chain_key,
        sender=leg.sender,
        raw_tx=signature.raw_hex,
    )


@dataclass(frozen=True)
class CallRoute(EvmRoute, abc.ABC):
    """The route of a send that is one call (evm_transfer's transfer,
    cctp_burn's depositForBurn): its payload is the route with the gas and
    fees."""

    @abc.abstractmethod
    def send(self) -> Send:
        """The call the route makes."""

    def payload(self, gas: int, fees: Fees) -> JsonObject:
        return self.recorded() | gas_payload(gas, fees)


class EvmAccess:
    """The RPC clients and signers of one executor instance, each made once.
    RPC URLs and keys come from the environment (the registry names the
    variable and the signer id), never from the database. Given ``signers``
    (by signer id: a rehearsal's stand-ins, qtg_rehearsal), they are the only
    signers: an id they lack is refused, never loaded (no key is read), and
    the check that a signer holds its account's key still holds."""

    def __init__(
        self,
        env: Mapping[str, str],
        rpc_timeout: float = 10.0,
        signers: Mapping[str, Signer] | None = None,
    ) -> None:
        self._env = env
        self._rpc_timeout = rpc_timeout
        self._rpcs: dict[str, EvmRpc] = {}
        self._signers: dict[str, Signer] = dict(signers or {})
        self._given_only = signers is not None

    def rpc(self, chain_key: str, rpc_url_env: str) -> EvmRpc:
        url = self._env.get(rpc_url_env)
        if not url:
            raise ExecutorError(
                f"chain {chain_key}: the environment variable {rpc_url_env} (its RPC URL) is not "
                "set in this runner",
                retryable=True,
                retry_after=RETRY_LATER_S,
            )
        rpc = self._rpcs.get(url)
        if rpc is None:
            budget = executor_budget(self._env, url, rpc_url_env, "rpc")
            rpc = self._rpcs[url] = EvmRpc(url, timeout=self._rpc_timeout, budget=budget)
        return rpc

    def leg_rpc(self, leg: ChainLeg) -> EvmRpc:
        return self.rpc(leg.chain_key, leg.rpc_url_env)

    async def signer(self, leg: ChainLeg) -> Signer:
        signer = self._signers.get(leg.signer_id)
        if signer is None and self._given_only:
            raise ExecutorError(
                f"signer {leg.signer_id} of {leg.sender} on {leg.chain_key} is not among the "
                "signers this runner was given; no other key is loaded",
                retryable=False,
            )
        if signer is None:
            try:
                signer = await load_async(leg.signer_id, self._env)
            except SignerError as exc:
                raise ExecutorError(str(exc), retryable=True, retry_after=RETRY_LATER_S) from None
            self._signers[leg.signer_id] = signer
        if signer.address != leg.sender:
            if not self._given_only:  # the next attempt loads it again, the key fixed or not
                self._signers.pop(leg.signer_id, None)
            raise ExecutorError(
                f"signer {leg.signer_id} holds the key of {signer.address}, not of the treasury "
                f"account {leg.sender} on {leg.chain_key}: nothing was signed; fix the registry "
                "or the signer, the node is tried again after its backoff",
                retryable=True,
                retry_after=RETRY_LATER_S,
            )
        return signer

    async def chains_health(self, pool: AsyncConnectionPool[Any]) -> HealthResult:
        """Every registered chain whose RPC URL this runner has: the node answers
        with the chain id registered, and its head block is fresh. DOWN (which
        stops every claim of the executor) only when no chain can be reached;
        one chain down is DEGRADED (its nodes fail at preflight and are
        retried, the others go on)."""
        async with pool.connection() as conn:
            chains = await procs.evm_chains().aall(conn)
        return parts_health({chain.chain_key: await self._chain_health(chain) for chain in chains})

    async def _chain_health(self, chain: procs.EvmChain) -> tuple[HealthStatus, str]:
        url = self._env.get(chain.rpc_url_env)
        if not url:
            return HealthStatus.DEGRADED, f"{chain.rpc_url_env} is not set in this runner"
        rpc = self.rpc(chain.chain_key, chain.rpc_url_env)
        try:
            chain_id = await rpc.chain_id()
            head = await rpc.block("latest")
        except EvmRpcError as exc:
            return HealthStatus.DOWN, f"down: {exc}"
        if chain_id != chain.chain_id:
            return HealthStatus.DOWN, f"the RPC answers chain id {chain_id}, not {chain.chain_id}"
        age = time.time() - head.timestamp if head is not None else math.inf
        stale_after = max(60.0, STALE_HEAD_BLOCKS * chain.block_time_ms / 1000)
        if age > stale_after:
            return HealthStatus.DEGRADED, f"head block is {age:.0f} s old"
        return HealthStatus.HEALTHY, f"head {head.number if head else '?'}, {age:.0f} s old"

    async def aclose(self) -> None:
        for rpc in self._rpcs.values():
            await rpc.aclose()
        self._rpcs.clear()


_SEVERITY = {HealthStatus.HEALTHY: 0, HealthStatus.DEGRADED: 1, HealthStatus.DOWN: 2}


def worse(a: HealthStatus, b: HealthStatus) -> HealthStatus:
    """The worse of two health states."""
    return a if _SEVERITY[a] >= _SEVERITY[b] else b


async def broadcast(rpc: EvmRpc, leg: ChainLeg, prepared: Prepared, what: str) -> SubmitResult:
    """eth_sendRawTransaction of the recorded bytes. "already known" is the same
    transaction: accepted. "nonce too low" is resolved by the recorded hash: mined
    is ours; not mined is a nonce taken by a transaction the engine never
    recorded, which recovery reports for an operator. A node that refuses the
    bytes for want of funds sent nothing: the nonce stays free for the
    evm_nonce_reaper to close. A send the endpoint's budget throttles (no turn,
    or a 429: the node processed nothing) is made again after the wait, the
    same bytes, for up to BROADCAST_THROTTLE_S: a signed transaction waiting
    for a provider's turn is no reason for recovery."""
    assert prepared.raw_tx is not None and prepared.signed_tx_hash is not None
    tx_hash = prepared.signed_tx_hash
    raw = bytes.fromhex(prepared.raw_tx[2:])
    async with chain_errors(leg.chain_key):
        try:
            await send_when_let(rpc, raw)
        except RpcError as exc:
            if exc.kind is RpcErrorKind.ALREADY_KNOWN:
                return SubmitResult(tx_hash, {"tx_hash": tx_hash, "already_known": True})
            if exc.kind is RpcErrorKind.NONCE_TOO_LOW:
                if await rpc.receipt(tx_hash) is not None:
                    return SubmitResult(tx_hash, {"tx_hash": tx_hash, "already_mined": True})
                raise ExecutorError(
                    f"nonce {prepared.nonce} of {leg.sender} on {leg.chain_key} is taken "
                    f"and {tx_hash} is not mined: recovery reads the chain",
                    retryable=True,
                ) from None
            if exc.kind is RpcErrorKind.INSUFFICIENT_FUNDS:
                raise ExecutorError(
                    f"{leg.chain_key} refused the {what}: {exc.message}", retryable=False
                ) from None
            raise
        finally:
            rpc.sent_from(leg.sender)
    return SubmitResult(tx_hash, {"tx_hash": tx_hash, "nonce": prepared.nonce})


async def send_when_let(rpc: EvmRpc, raw: bytes) -> None:
    """eth_sendRawTransaction of ``raw``, again after each throttle's wait
    while BROADCAST_THROTTLE_S allows (RpcThrottled past it)."""
    deadline = time.monotonic() + BROADCAST_THROTTLE_S
    while True:
        try:
            await rpc.send_raw_transaction(raw)
            return
        except RpcThrottled as exc:
            if time.monotonic() + exc.wait_s > deadline:
                raise
            await asyncio.sleep(exc.wait_s)


@dataclass(frozen=True)
class TxReading:
    """What the chain says about a node's transaction now (the module's header
    lists the statuses)."""

    status: str
    evidence: JsonObject
    tx_hash: str | None = None
    wait_s: float | None = None
    receipt: Receipt | None = None


UNSETTLED = frozenset({"foreign", "refused", "mismatch"})
"""Readings no retry settles, left to recovery and a person: the nonce taken by
a transaction the engine never recorded, the recorded bytes refused again, a
send that landed but is not what the intent recorded (cctp_burn's mismatch)."""


class Reading(Protocol):
    """What the chains say about a node's send now (TxReading, or an executor's
    own reading of what its send must have done)."""

    @property
    def status(self) -> str: ...
    @property
    def evidence(self) -> JsonObject: ...
    @property
    def tx_hash(self) -> str | None: ...
    @property
    def wait_s(self) -> float | None: ...


def verdicts(done: str) -> Verdicts:
    """What an EVM executor's readings mean: ``done`` (its status of a send
    that landed), reverted failed, UNSETTLED for a person."""
    return Verdicts(done, "reverted", UNSETTLED)


def observed(reading: Reading, done: str) -> ObserveResult:
    """The observation ``reading`` makes: ``done`` (the executor's status of a
    send that landed) COMPLETED, reverted FAILED, UNSETTLED UNKNOWN, anything
    else PENDING, looked at again after the reading's wait (if it has one)."""
    return verdicts(done).observation(reading.status, reading.evidence, reading.wait_s)


async def recovered(
    work: NodeWork, done: str, read: Callable[[NodeWork], Awaitable[Reading]]
) -> RecoveryResult:
    """Recovery of a node whose send may be out. NOT_SUBMITTED when its intent
    records no transaction: nothing was ever signed and recorded for it, so
    nothing can be out. Otherwise from ``read``'s reading: ``done`` COMPLETED,
    reverted FAILED, UNSETTLED STILL_UNKNOWN, anything else IN_FLIGHT (the
    observer follows it from there)."""
    intent = work.intent or {}
    if not intent.get("transactions"):
        return RecoveryResult(
            RecoveryOutcome.NOT_SUBMITTED, {"intent_state": intent.get("intent_state")}
        )
    reading = await read(work)
    return verdicts(done).recovery(
        reading.status, reading.evidence, reading.tx_hash, reading.wait_s
    )


async def read_recorded(rpc: EvmRpc, leg: ChainLeg, work: NodeWork) -> TxReading:
    """The chain's word on the node's transaction, from its recorded hashes."""
    intent = work.intent or {}
    transactions = intent.get("transactions") or []
    nonce = intent.get("nonce")
    if not transactions or nonce is None:
        raise ExecutorError(
            f"node {work.node_id} has no recorded transaction to read", retryable=False
        )
    hashes = [str(t["tx_hash"]) for t in transactions]
    for tx_hash in reversed(hashes):
        settled = rpc.settled_of(tx_hash)
        if isinstance(settled, TxReading):
            return settled  # final or reverted at its finality depth: read once
    async with chain_errors(leg.chain_key):
        found = await _receipt_of(rpc, leg, hashes)
        if found is None:
            account_nonce = await rpc.transaction_count(
                leg.sender, "latest", max_age_s=shared_for(leg)
            )
            if account_nonce <= nonce:
                return await _unmined(rpc, leg, transactions, nonce)
            # mined between the two reads, or taken by another transaction
            found = await _receipt_of(rpc, leg, hashes)
            if found is None:
                return TxReading(
                    "foreign",
                    {
                        "problem": "the nonce is taken by a transaction the engine never recorded",
                        "nonce": nonce,
                        "account_nonce": account_nonce,
                        "sender": leg.sender,
                        "recorded_hashes": hashes,
                    },
                )
        return await _mined(rpc, leg, found)


async def _receipt_of(rpc: EvmRpc, leg: ChainLeg, hashes: list[str]) -> Receipt | None:
    """The receipt of any recorded hash (the newest replacement first) that the
    leg's sender signed: bytes recorded as a replacement are checked in SQL for
    what they do and their hash, not for who signed them, so a transaction of
    another account at that nonce is never read as the node's."""
    for tx_hash in reversed(hashes):
        receipt = await rpc.receipt(tx_hash)
        if receipt is not None and normalize_address(receipt.sender) == normalize_address(
            leg.sender
        ):
            return receipt
    return None


async def _mined(rpc: EvmRpc, leg: ChainLeg, receipt: Receipt) -> TxReading:
    """The mined ``receipt`` read against the chain now: in a reorganisation,
    short of the finality depth, or settled (final or reverted), which the
    client keeps and is not read again."""
    head = await rpc.head(shared_for(leg))
    canonical = await rpc.block(receipt.block_number, max_age_s=shared_for(leg))
    depth = head - receipt.block_number
    evidence: JsonObject = {
        "tx_hash": receipt.tx_hash,
        "block_number": receipt.block_number,
        "block_hash": receipt.block_hash,
        "confirmations": depth + 1,
        "finality_depth": leg.finality_depth,
    }
    if canonical is None or canonical.hash != receipt.block_hash:
        # a reorganisation under way: the receipt's block is not the chain's now
        return TxReading("mined", evidence | {"reorg": True}, receipt.tx_hash, leg.block_time_s)
    if depth < leg.finality_depth:
        wait = leg.block_time_s * (leg.finality_depth - depth)
        return TxReading("mined", evidence, receipt.tx_hash, wait)
    if not receipt.succeeded:
        settled = TxReading(
            "reverted", evidence | {"status": receipt.status}, receipt.tx_hash, receipt=receipt
        )
    else:
        settled = TxReading("final", evidence, receipt.tx_hash, receipt=receipt)
    rpc.keep_settled(receipt.tx_hash, settled)
    return settled


async def _unmined(rpc: EvmRpc, leg: ChainLeg, transactions: list[Any], nonce: int) -> TxReading:
    """Not mined and the nonce is still free: pending in the pool, or dropped
    (by the pool, or by a reorganisation), then broadcast again from the
    identical recorded bytes of the newest recorded transaction the node takes
    (an older one when it refuses the newer: bytes recorded as a replacement
    are the engine's to check but their signature is not, so one the node
    finds unsigned never stands in for the transaction the intent signed).
    Only the transactions signed by the key that signed the intent's own
    bytes are waited for or sent again (same_signer): a "replacement" signed by
    another key, even one never broadcast, cannot take the node's nonce, and
    sent first it would only be answered "nonce too low" from its own
    account. So is a recorded transaction the node knows from another
    account."""
    transactions = same_signer(transactions)
    others: set[str] = set()
    for t in reversed(transactions):
        tx_hash = str(t["tx_hash"])
        known = await rpc.transaction(tx_hash)
        if known is None:
            continue
        if normalize_address(known.sender) != normalize_address(leg.sender):
            others.add(tx_hash)
            continue
        return TxReading("pending", {"tx_hash": tx_hash, "nonce": nonce}, tx_hash, leg.block_time_s)
    refused: RpcError | None = None
    for t in reversed(transactions):
        tx_hash, raw = str(t["tx_hash"]), str(t["raw_tx"])
        if tx_hash in others:
            continue
        try:
            await rpc.send_raw_transaction(bytes.fromhex(raw[2:]))
        except RpcError as exc:
            if exc.kind in (RpcErrorKind.ALREADY_KNOWN, RpcErrorKind.NONCE_TOO_LOW):
                # it reached the pool, or was mined, meanwhile: read again next time
                return TxReading(
                    "pending", {"tx_hash": tx_hash, "nonce": nonce}, tx_hash, leg.block_time_s
                )
            if exc.kind is RpcErrorKind.UNDERPRICED:
                return _refused_again("foreign", exc, tx_hash, nonce)
            refused = refused or exc
            continue
        return TxReading(
            "rebroadcast",
            {"tx_hash": tx_hash, "nonce": nonce, "rebroadcast": True},
            tx_hash,
            leg.block_time_s,
        )
    if refused is None:  # every recorded transaction is another account's
        return TxReading(
            "foreign",
            {
                "problem": "every transaction recorded at the nonce was sent by another account",
                "nonce": nonce,
                "sender": leg.sender,
                "recorded_hashes": sorted(others),
            },
        )
    return _refused_again("refused", refused, str(transactions[-1]["tx_hash"]), nonce)


_SIGNERS: dict[str, str | None] = {}
"""Recorded bytes' hash -> the address that signed them (None: not a signed
transaction), recovered once per process: about 25 ms each."""


def _signer_of(t: Mapping[str, Any]) -> str | None:
    tx_hash = str(t["tx_hash"])
    if tx_hash not in _SIGNERS:
        if len(_SIGNERS) >= 4096:
            _SIGNERS.pop(next(iter(_SIGNERS)))
        try:
            _SIGNERS[tx_hash] = decode_raw(bytes.fromhex(str(t["raw_tx"])[2:])).sender
        except ValueError:
            _SIGNERS[tx_hash] = None
    return _SIGNERS[tx_hash]


def same_signer(transactions: list[Any]) -> list[Any]:
    """The recorded transactions signed by the key that signed the intent's
    own (its first, purpose 'intent'): the engine checks a replacement's bytes
    for what they do and their hash, not for who signed them. The treasury
    account's key in production, a rehearsal's stand-in on its fork. A lone
    transaction is not read (nothing to tell it from)."""
    if len(transactions) < 2:
        return transactions
    own = next((t for t in transactions if t.get("purpose") == "intent"), None)
    if own is None or own.get("raw_tx") is None:
        return transactions
    signer = _signer_of(own)
    return [t for t in transactions if t.get("raw_tx") is not None and _signer_of(t) == signer]


def _refused_again(status: str, exc: RpcError, tx_hash: str, nonce: int) -> TxReading:
    return TxReading(
        status,
        {
            "problem": "the recorded transaction is not mined and the node refuses it again",
            "tx_hash": tx_hash,
            "nonce": nonce,
            "answer": exc.message,
        },
        tx_hash,
    )


@contextlib.asynccontextmanager
async def chain_errors(chain_key: str) -> AsyncIterator[None]:
    """Turn what reading or writing a chain may raise into an ExecutorError: an
    unreachable node or fees above the cap retry later, as does a node's answer
    nothing here resolves; a call that reverts does not; a call throttled by
    the endpoint's budget or its 429 is ``throttled``, after its wait."""
    try:
        yield
    except RpcThrottled as exc:
        raise ExecutorError(
            f"chain {chain_key}: {exc}", retryable=True, retry_after=exc.wait_s, throttled=True
        ) from None
    except (EvmRpcError, FeeCapExceeded) as exc:
        retryable = not (isinstance(exc, RpcError) and exc.kind is RpcErrorKind.REVERTED)
        raise ExecutorError(
            f"chain {chain_key}: {exc}", retryable=retryable, retry_after=RETRY_LATER_S
        ) from None


def recorded_payload(work: NodeWork) -> JsonObject:
    """The prepared payload the node's intent recorded: what there is to read of
    its send. A node without one has no recorded transaction (not retryable)."""
    payload = (work.intent or {}).get("prepared_payload")
    if not payload:
        raise ExecutorError(
            f"node {work.node_id} has no recorded transaction to read", retryable=False
        )
    return dict(payload)


class AbandonedTransactionMined(Exception):
    """A transaction a requeued node abandoned is mined: its side effect
    happened, and the node must not sign another. Not an ExecutorError on
    purpose: the dispatcher quarantines the node, for a person."""


class EvmExecutor(ExecutorBase, abc.ABC):
    """The part of an EVM executor that is the same in each (the module's
    header): its RPC clients and signers made once (``EvmAccess``)."""

    has_side_effect = True
    deduplicated_by = (
        "the account's nonce: the recorded bytes, or a replacement at their nonce, are mined "
        "once at most"
    )
    landed: ClassVar[str]
    """The reading's status of a send that landed: the node is COMPLETED."""
    sends: ClassVar[str]
    """What the broadcast sends, for its messages ("transfer", "burn", ...)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        network: str,
        env: Mapping[str, str] | None = None,
        rpc_timeout: float = 10.0,
        signers: Mapping[str, Signer] | None = None,
    ) -> None:
        super().__init__(pool, network, env)
        self._evm = EvmAccess(self._env, rpc_timeout, signers)

    async def abandoned_settled(self, work: NodeWork) -> None:
        """Before anything is signed again for a node two operators requeued,
        the chain, not a runner's report, shows that each transaction it
        abandoned can never be mined: its account's count is past its nonce
        (else retry later, nothing signed: the nonce reaper fills it), and
        none of its hashes took it and succeeded (else
        AbandonedTransactionMined)."""
        async with self._pool.connection() as conn:
            abandoned = await procs.abandoned_transactions(work.node_id).aall(conn)
        for tx in abandoned:
            rpc = self._evm.rpc(tx.chain_key, tx.rpc_url_env)
            async with chain_errors(tx.chain_key):
                latest = await rpc.transaction_count(tx.sender, "latest")
                if latest <= tx.nonce:
                    raise ExecutorError(
                        f"node {work.node_id} abandoned a transaction at nonce {tx.nonce} of "
                        f"{tx.sender} on {tx.chain_key}, which the chain has not used yet "
                        f"(its count is {latest}): it may still be mined, so nothing is "
                        "signed again until the nonce is used",
                        retryable=True,
                        retry_after=RETRY_LATER_S,
                        throttled=True,  # a wait for the chain, not a failure: no attempt spent
                    )
                for tx_hash in tx.tx_hashes:
                    receipt = await rpc.receipt(tx_hash)
                    # (one that reverted moved nothing but its gas: a CCTP mint past
                    # its message's expiration, given up for the message re-attested)
                    if (
                        receipt is not None
                        and receipt.succeeded
                        and receipt.sender.lower() == tx.sender
                    ):
                        raise AbandonedTransactionMined(
                            f"node {work.node_id}: the transaction it abandoned at nonce "
                            f"{tx.nonce} of {tx.sender} on {tx.chain_key}, {tx_hash}, is mined "
                            f"in block {receipt.block_number}: its side effect happened; "
                            "settle the movement, do not sign again"
                        )

    def sending_leg(self, payload: JsonObject) -> ChainLeg:
        """The chain and account a prepared payload sends from (its leg's keys)."""
        return ChainLeg.from_payload(payload)

    @abc.abstractmethod
    async def read(self, work: NodeWork) -> Reading:
        """The chains' word on the node's send, from what its intent recorded."""

    @abc.abstractmethod
    def recorded_send(self, prepared: Prepared) -> Send:
        """The call a prepared payload records, to sign again at another nonce
        (checked again where there is something to check)."""

    async def resign(self, work: NodeWork, prepared: Prepared, nonce: int) -> Prepared:
        """The recorded call signed again at ``nonce``, or the chain's pending
        count when that is greater, with the recorded gas and fees."""
        assert prepared.payload is not None
        send = self.recorded_send(prepared)
        leg = self.sending_leg(prepared.payload)
        rpc = self._evm.leg_rpc(leg)
        async with chain_errors(leg.chain_key):
            chain_next = await rpc.transaction_count(
                leg.sender, "pending", max_age_s=shared_for(leg)
            )
        signer = await self._evm.signer(leg)
        return await signed(signer, leg, send, max(nonce, chain_next), prepared.payload)

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        assert prepared.payload is not None
        leg = self.sending_leg(prepared.payload)
        return await broadcast(self._evm.leg_rpc(leg), leg, prepared, self.sends)

    async def observe(self, work: NodeWork) -> ObserveResult:
        return observed(await self.read(work), self.landed)

    async def recover(self, work: NodeWork) -> RecoveryResult:
        return await recovered(work, self.landed, self.read)

    async def health(self) -> HealthResult:
        return await self._evm.chains_health(self._pool)

    async def aclose(self) -> None:
        await self._evm.aclose()


class CallExecutor(EvmExecutor):
    """An EVM executor whose send is its route's one call (``CallRoute``):
    prepared with the chain's gas estimate for it, at the fees under the
    chain's caps, once the sender holds the gas."""

    route_type: ClassVar[type[CallRoute]]

    async def prepare(self, work: NodeWork) -> Prepared:
        route = await self.route_type.of(self._pool, work)
        rpc = self._evm.leg_rpc(route.leg)
        signer = await self._evm.signer(route.leg)
        send = route.send()
        async with chain_errors(route.leg.chain_key):
            # asked together: one JSON-RPC batch where the provider takes them
            (chain_next, fees), gas, funds = await asyncio.gather(
                pending_nonce_and_fees(rpc, route.leg),
                estimate_gas(rpc, route.leg.sender, send.to, send.data),
                rpc.balance(route.leg.sender, max_age_s=shared_for(route.leg)),
            )
        require_funds(route.leg, funds, gas * fees.max_fee_per_gas)
        payload = route.payload(gas, fees)
        return await signed(signer, route.leg, send, route.nonce(chain_next), payload)

    def recorded_send(self, prepared: Prepared) -> Send:
        assert prepared.payload is not None
        return self.route_type.from_payload(prepared.payload).send()
