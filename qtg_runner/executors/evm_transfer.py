"""The `evm_transfer` executor: an ERC-20 transfer from a treasury account to
another treasury account or to an allow-listed address, on an EVM chain of the
network's chain registry.

What it may sign is the registry's word, read again before every signature
(evm_transfer_route, in SQL): the chain, the token contract, the sender (a
treasury account and its signer's id), a recipient that is a treasury account
or allow-listed, and the amount in the token's base units. The RPC URL comes
from the environment variable the registry names; the key from the signer
(qtg_runner.signers), never the database.

    preflight  the route; the sender holds the amount of the token and the
               ETH for the gas at the fee cap.
    prepare    EIP-1559 fees under the chain's caps, gas from the node's
               estimate, the nonce at the greater of the chain's pending count
               and the engine's next one, signed. The dispatcher records the
               signed bytes (the engine allocates the nonce there) before
               anything is broadcast; resign() signs the same transfer again at
               another nonce when the engine says the nonce was taken.
    submit     eth_sendRawTransaction of the recorded bytes. "already known" is
               the same transaction: accepted. "nonce too low" is resolved by
               the recorded hashes: one of them mined is ours; none is a nonce
               taken by a transaction the engine never recorded, which recovery
               reports for an operator.
    observe    the receipt of any recorded hash (replacements included), still
               in the canonical chain and at least ``finality_depth`` blocks
               deep, with exactly one Transfer log of the token from the sender
               to the recipient for the amount: COMPLETED. Mined but not final:
               PENDING. Reverted and final: FAILED. Not mined, nonce still free
               and nothing in the pool (dropped, or reorganised away): the
               identical recorded raw transaction is broadcast again, PENDING.
               Nonce consumed by none of our hashes: UNKNOWN, with the evidence.
    recover    the same reading from the recorded hashes and the account nonce:
               final -> COMPLETED / FAILED; mined, pending or rebroadcast ->
               IN_FLIGHT; never prepared -> NOT_SUBMITTED; the nonce taken by a
               hash never recorded -> STILL_UNKNOWN, for an operator.
    health     every registered chain whose RPC URL this runner has: the node
               answers with the chain id registered, and its head block is fresh.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from qtg_runner.chains.evm import (
    FeeCapExceeded,
    Fees,
    balance_of,
    build_transfer,
    decode_transfers,
    estimate_gas,
    suggest_fees,
    transfer_calldata,
)
from qtg_runner.chains.evm_rpc import (
    EvmRpc,
    EvmRpcError,
    Receipt,
    RpcError,
    RpcErrorKind,
)
from qtg_runner.db import procs
from qtg_runner.executors.base import (
    ExecutorError,
    HealthResult,
    HealthStatus,
    JsonObject,
    NodeWork,
    ObserveResult,
    ObserveStatus,
    Prepared,
    RecoveryOutcome,
    RecoveryResult,
    SubmitResult,
)
from qtg_runner.signers import Signer, SignerError, load_async

ADDRESS_PATTERN = "^0x[0-9a-fA-F]{40}$"
STALE_HEAD_BLOCKS = 30
"""A head block older than this many block times (at least a minute) is stale."""
ROUTE_REFUSALS = frozenset({"QT002", "QT014", "QT032"})
"""evm_transfer_route's refusals of a node's own route (see its header)."""
RETRY_LATER_S = 30.0
"""The retry hint when the chain cannot be read or the fees are above the cap."""


@dataclass(frozen=True)
class _Route:
    """The registry's word on one node (evm_transfer_route), as recorded in the
    intent's payload at prepare so that observation never depends on a registry
    changed since the transaction was signed."""

    chain_key: str
    chain_id: int
    rpc_url_env: str
    finality_depth: int
    block_time_s: float
    token: str
    token_address: str
    sender: str
    signer_id: str
    recipient: str
    amount_units: int
    max_fee_cap: int
    priority_fee_cap: int
    engine_next_nonce: int | None = None
    """The sender's next nonce as the engine had it when the route was read
    (not recorded in the payload: a nonce is allocated when it is recorded)."""

    @classmethod
    def from_row(cls, row: procs.TransferRoute) -> _Route:
        return cls(
            chain_key=row.chain_key,
            chain_id=row.chain_id,
            rpc_url_env=row.rpc_url_env,
            finality_depth=row.finality_depth,
            block_time_s=row.block_time_ms / 1000,
            token=row.token,
            token_address=row.token_address,
            sender=row.sender,
            signer_id=row.signer_id,
            recipient=row.recipient,
            amount_units=int(row.amount_units),
            max_fee_cap=int(row.max_fee_per_gas),
            priority_fee_cap=int(row.max_priority_fee_per_gas),
            engine_next_nonce=row.next_nonce,
        )

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> _Route:
        return cls(
            chain_key=str(payload["chain_key"]),
            chain_id=int(payload["chain_id"]),
            rpc_url_env=str(payload["rpc_url_env"]),
            finality_depth=int(payload["finality_depth"]),
            block_time_s=float(payload["block_time_s"]),
            token=str(payload["token"]),
            token_address=str(payload["token_address"]),
            sender=str(payload["sender"]),
            signer_id=str(payload["signer_id"]),
            recipient=str(payload["recipient"]),
            amount_units=int(payload["amount_units"]),
            max_fee_cap=int(payload["max_fee_cap"]),
            priority_fee_cap=int(payload["priority_fee_cap"]),
        )

    def payload(self, gas: int, fees: Fees) -> JsonObject:
        return {
            "chain_key": self.chain_key,
            "chain_id": self.chain_id,
            "rpc_url_env": self.rpc_url_env,
            "finality_depth": self.finality_depth,
            "block_time_s": self.block_time_s,
            "token": self.token,
            "token_address": self.token_address,
            "sender": self.sender,
            "signer_id": self.signer_id,
            "recipient": self.recipient,
            # a string: a uint256 is beyond what a JSON number holds exactly
            "amount_units": str(self.amount_units),
            "gas": gas,
            "max_fee_per_gas": str(fees.max_fee_per_gas),
            "max_priority_fee_per_gas": str(fees.max_priority_fee_per_gas),
            "max_fee_cap": str(self.max_fee_cap),
            "priority_fee_cap": str(self.priority_fee_cap),
        }


@dataclass(frozen=True)
class _Reading:
    """What the chain says about a node's transaction now."""

    status: str
    """final, reverted, mined, pending, rebroadcast, foreign, refused."""
    evidence: JsonObject
    tx_hash: str | None = None
    wait_s: float | None = None


class EvmTransferExecutor:
    key: ClassVar[str] = "evm_transfer"
    has_side_effect: ClassVar[bool] = True
    description: ClassVar[str] = (
        "ERC-20 transfer from a treasury account to a treasury account or an allow-listed "
        "address, signed at a nonce the engine allocates, final at the chain's finality depth"
    )
    node_config_schema: ClassVar[JsonObject] = {
        "type": "object",
        "required": ["lane", "chain", "from", "to"],
        "properties": {
            "lane": {"type": "string", "minLength": 1},
            "chain": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,62}$"},
            "token": {"type": "string", "pattern": "^[A-Za-z0-9.]{1,16}$"},
            "from": {"type": "string", "pattern": ADDRESS_PATTERN},
            "to": {"type": "string", "pattern": ADDRESS_PATTERN},
        },
        "additionalProperties": False,
    }

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        network: str,
        env: Mapping[str, str] | None = None,
        rpc_timeout: float = 10.0,
    ) -> None:
        self._pool = pool
        self._network = network
        self._env = os.environ if env is None else env
        self._rpc_timeout = rpc_timeout
        self._rpcs: dict[str, EvmRpc] = {}
        self._signers: dict[str, Signer] = {}

    # -- what the registry and the environment say -----------------------------

    async def _route(self, work: NodeWork) -> _Route:
        """The registry's word on the node. A refusal (a destination not
        allowed, an account or a chain not registered) fails the node before
        anything is signed; the message says what to change."""
        try:
            async with self._pool.connection() as conn:
                row = await procs.evm_transfer_route(work.node_id).aone(conn)
        except psycopg.Error as exc:
            if exc.sqlstate in ROUTE_REFUSALS:
                message = exc.diag.message_primary or str(exc)
                raise ExecutorError(f"{exc.sqlstate}: {message}", retryable=False) from None
            raise
        return _Route.from_row(row)

    def _rpc(self, chain_key: str, rpc_url_env: str) -> EvmRpc:
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
            rpc = self._rpcs[url] = EvmRpc(url, timeout=self._rpc_timeout)
        return rpc

    async def _signer(self, route: _Route) -> Signer:
        signer = self._signers.get(route.signer_id)
        if signer is None:
            try:
                signer = await load_async(route.signer_id, self._env)
            except SignerError as exc:
                raise ExecutorError(str(exc), retryable=True, retry_after=RETRY_LATER_S) from None
            self._signers[route.signer_id] = signer
        if signer.address != route.sender:
            raise ExecutorError(
                f"signer {route.signer_id} holds the key of {signer.address}, not of the treasury "
                f"account {route.sender} on {route.chain_key}: fix the registry or the signer",
                retryable=False,
            )
        return signer

    # -- the protocol ------------------------------------------------------------

    async def preflight(self, work: NodeWork) -> None:
        route = await self._route(work)
        rpc = self._rpc(route.chain_key, route.rpc_url_env)
        async with _chain_errors(route):
            held = await balance_of(rpc, route.token_address, route.sender)
            if held < route.amount_units:
                raise ExecutorError(
                    f"{route.sender} holds {held} base units of {route.token} on "
                    f"{route.chain_key}, the transfer needs {route.amount_units}",
                    retryable=True,
                    retry_after=RETRY_LATER_S,
                )

    async def prepare(self, work: NodeWork) -> Prepared:
        route = await self._route(work)
        rpc = self._rpc(route.chain_key, route.rpc_url_env)
        signer = await self._signer(route)
        async with _chain_errors(route):
            chain_next = await rpc.transaction_count(route.sender, "pending")
            fees = await suggest_fees(
                rpc, max_fee_cap=route.max_fee_cap, priority_fee_cap=route.priority_fee_cap
            )
            gas = await estimate_gas(
                rpc,
                route.sender,
                route.token_address,
                transfer_calldata(route.recipient, route.amount_units),
            )
            funds = await rpc.balance(route.sender)
        if funds < gas * fees.max_fee_per_gas:
            raise ExecutorError(
                f"{route.sender} holds {funds} wei on {route.chain_key}, the gas needs up to "
                f"{gas * fees.max_fee_per_gas}",
                retryable=True,
                retry_after=RETRY_LATER_S,
            )
        nonce = max(chain_next, route.engine_next_nonce or 0)
        return await self._sign(route, signer, nonce, gas, fees)

    async def resign(self, work: NodeWork, prepared: Prepared, nonce: int) -> Prepared:
        assert prepared.payload is not None
        route = _Route.from_payload(prepared.payload)
        rpc = self._rpc(route.chain_key, route.rpc_url_env)
        async with _chain_errors(route):
            chain_next = await rpc.transaction_count(route.sender, "pending")
        fees = Fees(
            int(prepared.payload["max_fee_per_gas"]),
            int(prepared.payload["max_priority_fee_per_gas"]),
        )
        signer = await self._signer(route)
        return await self._sign(
            route, signer, max(nonce, chain_next), int(prepared.payload["gas"]), fees
        )

    async def _sign(
        self, route: _Route, signer: Signer, nonce: int, gas: int, fees: Fees
    ) -> Prepared:
        tx = build_transfer(
            route.chain_id,
            route.token_address,
            route.recipient,
            route.amount_units,
            nonce,
            fees,
            gas,
        )
        signed = await signer.sign_transaction(tx)
        return Prepared(
            nonce=nonce,
            signed_tx_hash=signed.tx_hash,
            payload=route.payload(gas, fees),
            chain_key=route.chain_key,
            sender=route.sender,
            raw_tx=signed.raw_hex,
        )

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        assert prepared.payload is not None and prepared.raw_tx is not None
        assert prepared.signed_tx_hash is not None
        route = _Route.from_payload(prepared.payload)
        rpc = self._rpc(route.chain_key, route.rpc_url_env)
        tx_hash = prepared.signed_tx_hash
        async with _chain_errors(route):
            try:
                await rpc.send_raw_transaction(bytes.fromhex(prepared.raw_tx[2:]))
            except RpcError as exc:
                if exc.kind is RpcErrorKind.ALREADY_KNOWN:
                    return SubmitResult(tx_hash, {"tx_hash": tx_hash, "already_known": True})
                if exc.kind is RpcErrorKind.NONCE_TOO_LOW:
                    receipt = await rpc.receipt(tx_hash)
                    if receipt is not None:
                        return SubmitResult(tx_hash, {"tx_hash": tx_hash, "already_mined": True})
                    raise ExecutorError(
                        f"nonce {prepared.nonce} of {route.sender} on {route.chain_key} is taken "
                        f"and {tx_hash} is not mined: recovery reads the chain",
                        retryable=True,
                    ) from None
                if exc.kind is RpcErrorKind.INSUFFICIENT_FUNDS:
                    # the node refused the bytes: nothing went out, the nonce
                    # stays free for the evm_nonce_reaper to close
                    raise ExecutorError(
                        f"{route.chain_key} refused the transfer: {exc.message}", retryable=False
                    ) from None
                raise
        return SubmitResult(tx_hash, {"tx_hash": tx_hash, "nonce": prepared.nonce})

    async def observe(self, work: NodeWork) -> ObserveResult:
        reading = await self._read(work)
        if reading.status == "final":
            return ObserveResult(ObserveStatus.COMPLETED, reading.evidence)
        if reading.status == "reverted":
            return ObserveResult(ObserveStatus.FAILED, reading.evidence)
        if reading.status in ("foreign", "refused"):
            return ObserveResult(ObserveStatus.UNKNOWN, reading.evidence)
        return ObserveResult(ObserveStatus.PENDING, reading.evidence, retry_after=reading.wait_s)

    async def recover(self, work: NodeWork) -> RecoveryResult:
        intent = work.intent or {}
        if not intent.get("transactions"):
            # nothing was ever signed and recorded for it: nothing can be out
            return RecoveryResult(
                RecoveryOutcome.NOT_SUBMITTED, {"intent_state": intent.get("intent_state")}
            )
        reading = await self._read(work)
        outcome = {
            "final": RecoveryOutcome.COMPLETED,
            "reverted": RecoveryOutcome.FAILED,
            "foreign": RecoveryOutcome.STILL_UNKNOWN,
            "refused": RecoveryOutcome.STILL_UNKNOWN,
        }.get(reading.status, RecoveryOutcome.IN_FLIGHT)
        return RecoveryResult(outcome, reading.evidence, reading.tx_hash, reading.wait_s)

    async def _read(self, work: NodeWork) -> _Reading:
        """The chain's word on the node's transaction, from its recorded hashes."""
        intent = work.intent or {}
        payload = intent.get("prepared_payload")
        transactions = intent.get("transactions") or []
        nonce = intent.get("nonce")
        if not payload or not transactions or nonce is None:
            raise ExecutorError(
                f"node {work.node_id} has no recorded transaction to read", retryable=False
            )
        route = _Route.from_payload(payload)
        rpc = self._rpc(route.chain_key, route.rpc_url_env)
        hashes = [str(t["tx_hash"]) for t in transactions]
        async with _chain_errors(route):
            found = await _receipt_of(rpc, hashes)
            if found is None:
                account_nonce = await rpc.transaction_count(route.sender, "latest")
                if account_nonce > nonce:
                    # mined between the two reads, or taken by another transaction
                    found = await _receipt_of(rpc, hashes)
                    if found is None:
                        return _Reading(
                            "foreign",
                            {
                                "problem": "the nonce is taken by a transaction the engine never "
                                "recorded",
                                "nonce": nonce,
                                "account_nonce": account_nonce,
                                "sender": route.sender,
                                "recorded_hashes": hashes,
                            },
                        )
                else:
                    return await _unmined(rpc, route, transactions, nonce)
            return await _mined(rpc, route, found)

    async def health(self) -> HealthResult:
        async with self._pool.connection() as conn:
            chains = await procs.evm_chains().aall(conn)
        detail: JsonObject = {}
        worst = HealthStatus.HEALTHY
        down = 0
        for chain in chains:
            url = self._env.get(chain.rpc_url_env)
            if not url:
                detail[chain.chain_key] = f"{chain.rpc_url_env} is not set in this runner"
                if worst is HealthStatus.HEALTHY:
                    worst = HealthStatus.DEGRADED
                continue
            rpc = self._rpc(chain.chain_key, chain.rpc_url_env)
            try:
                chain_id = await rpc.chain_id()
                head = await rpc.block("latest")
            except EvmRpcError as exc:
                detail[chain.chain_key] = f"down: {exc}"
                down += 1
                continue
            if chain_id != chain.chain_id:
                detail[chain.chain_key] = (
                    f"the RPC answers chain id {chain_id}, not {chain.chain_id}"
                )
                down += 1
                continue
            age = time.time() - head.timestamp if head is not None else math.inf
            stale_after = max(60.0, STALE_HEAD_BLOCKS * chain.block_time_ms / 1000)
            if age > stale_after:
                detail[chain.chain_key] = f"head block is {age:.0f} s old"
                if worst is HealthStatus.HEALTHY:
                    worst = HealthStatus.DEGRADED
            else:
                detail[chain.chain_key] = f"head {head.number if head else '?'}, {age:.0f} s old"
        # DOWN stops every claim of the executor (the dispatcher leaves its nodes
        # READY): only when no chain can be reached; one chain down is DEGRADED
        # (its nodes fail at preflight and are retried, the others go on)
        if chains and down == len(chains):
            worst = HealthStatus.DOWN
        elif down:
            worst = HealthStatus.DEGRADED
        return HealthResult(worst, detail)

    async def aclose(self) -> None:
        for rpc in self._rpcs.values():
            await rpc.aclose()
        self._rpcs.clear()


async def _receipt_of(rpc: EvmRpc, hashes: list[str]) -> Receipt | None:
    """The receipt of any recorded hash (the newest replacement first)."""
    for tx_hash in reversed(hashes):
        receipt = await rpc.receipt(tx_hash)
        if receipt is not None:
            return receipt
    return None


async def _mined(rpc: EvmRpc, route: _Route, receipt: Receipt) -> _Reading:
    head = await rpc.block_number()
    canonical = await rpc.block(receipt.block_number)
    depth = head - receipt.block_number
    evidence: JsonObject = {
        "tx_hash": receipt.tx_hash,
        "block_number": receipt.block_number,
        "block_hash": receipt.block_hash,
        "confirmations": depth + 1,
        "finality_depth": route.finality_depth,
    }
    if canonical is None or canonical.hash != receipt.block_hash:
        # a reorganisation under way: the receipt's block is not the chain's now
        return _Reading("mined", evidence | {"reorg": True}, receipt.tx_hash, route.block_time_s)
    if depth < route.finality_depth:
        wait = route.block_time_s * (route.finality_depth - depth)
        return _Reading("mined", evidence, receipt.tx_hash, wait)
    if not receipt.succeeded:
        return _Reading("reverted", evidence | {"status": receipt.status}, receipt.tx_hash)
    transfers = [
        t
        for t in decode_transfers(receipt)
        if t.token == route.token_address and t.sender == route.sender
    ]
    expected = [
        t for t in transfers if t.recipient == route.recipient and t.value == route.amount_units
    ]
    if len(transfers) != 1 or len(expected) != 1:
        return _Reading(
            "refused",
            evidence
            | {
                "problem": "the receipt does not show exactly the transfer the intent recorded",
                "expected": {
                    "token": route.token_address,
                    "from": route.sender,
                    "to": route.recipient,
                    "value": str(route.amount_units),
                },
                "transfers": [
                    {"token": t.token, "from": t.sender, "to": t.recipient, "value": str(t.value)}
                    for t in transfers
                ],
            },
            receipt.tx_hash,
        )
    transfer = expected[0]
    return _Reading(
        "final",
        evidence
        | {
            "transfer": {
                "token": transfer.token,
                "from": transfer.sender,
                "to": transfer.recipient,
                "value": str(transfer.value),
                "log_index": transfer.log_index,
            }
        },
        receipt.tx_hash,
    )


async def _unmined(rpc: EvmRpc, route: _Route, transactions: list[Any], nonce: int) -> _Reading:
    """Not mined and the nonce is still free: pending in the pool, or dropped
    (by the pool, or by a reorganisation), then broadcast again from the
    identical recorded bytes of the newest recorded transaction."""
    for t in reversed(transactions):
        if await rpc.transaction(str(t["tx_hash"])) is not None:
            return _Reading(
                "pending",
                {"tx_hash": t["tx_hash"], "nonce": nonce},
                str(t["tx_hash"]),
                route.block_time_s,
            )
    newest = transactions[-1]
    tx_hash, raw = str(newest["tx_hash"]), str(newest["raw_tx"])
    try:
        await rpc.send_raw_transaction(bytes.fromhex(raw[2:]))
    except RpcError as exc:
        if exc.kind in (RpcErrorKind.ALREADY_KNOWN, RpcErrorKind.NONCE_TOO_LOW):
            # it reached the pool, or was mined, meanwhile: read again next time
            return _Reading(
                "pending", {"tx_hash": tx_hash, "nonce": nonce}, tx_hash, route.block_time_s
            )
        return _Reading(
            "foreign" if exc.kind is RpcErrorKind.UNDERPRICED else "refused",
            {
                "problem": "the recorded transaction is not mined and the node refuses it again",
                "tx_hash": tx_hash,
                "nonce": nonce,
                "answer": exc.message,
            },
            tx_hash,
        )
    return _Reading(
        "rebroadcast",
        {"tx_hash": tx_hash, "nonce": nonce, "rebroadcast": True},
        tx_hash,
        route.block_time_s,
    )


@contextlib.asynccontextmanager
async def _chain_errors(route: _Route) -> AsyncIterator[None]:
    """Turn what reading or writing a chain may raise into an ExecutorError: an
    unreachable node or fees above the cap retry later, as does a node's answer
    nothing here resolves; a call that reverts does not."""
    try:
        yield
    except (EvmRpcError, FeeCapExceeded) as exc:
        retryable = not (isinstance(exc, RpcError) and exc.kind is RpcErrorKind.REVERTED)
        raise ExecutorError(
            f"chain {route.chain_key}: {exc}", retryable=retryable, retry_after=RETRY_LATER_S
        ) from None
