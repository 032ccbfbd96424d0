"""ccip_stranded_reaper (sidecar, the seed's name): finishes CCIP sends whose
destination execution FAILED. The `ccip` executor leaves such a node
OBSERVING with the evidence ``ccip_state: FAILURE`` (the tokens are not lost:
the OffRamp lets anyone execute a failed message again); each round this
worker takes them (ccip_stranded_sends: sends on v1.6 lanes) and, for each:

1. reads the message again from the source transaction's receipt (the lane's
   OnRamp's CCIPMessageSent with that id) and asks the lane's OffRamp
   (getExecutionState(sourceChainSelector, sequenceNumber)): SUCCESS already
   -> nothing to do, the observer completes the node; not FAILURE -> left.
2. looks at the manual executions recorded for the message that its keeper
   signed (SQL checks what recorded bytes do, not who signed them: another
   key's are logged as ccip_reaper_foreign_attempts and never sent, waited
   for or counted): the newest one pending in the node's pool -> wait; not
   known to the node and the keeper's nonce still free (a reaper died
   between its record and its broadcast, or the bytes were dropped) -> the
   RECORDED bytes broadcast again, nothing new signed; mined (executed and
   FAILED again) or its nonce taken -> a new attempt, at most MAX_ATTEMPTS
   per message (then an error for an operator).
3. a new attempt: OffRamp 1.6's manuallyExecute(ExecutionReport[],
   GasLimitOverride[][]) of a one-message report: the message as the OffRamp
   executes it (Any2EVMRampMessage), its merkle proof (the DON committed it
   as a one-leaf tree: no proofs, proofFlagBits 0), no gas overrides, and per
   token the pool's offchain data: on a lane whose token_data is 'cctp' the
   burn's CCTP message and attestation from the attestation service
   (``QTG_IRIS_URL``, as the CCTP executors read it; not attested yet -> left
   for the next round), else empty. Signed by the keeper account
   (``QTG_CCIP_KEEPER_SIGNER``, default ``keystore:ccip-keeper``: never a
   treasury account), recorded with record_ccip_manual_execution FIRST, then
   broadcast (the failpoint ``ccip_after_manual_record`` kills the runner in
   between).

A crash anywhere leaves at most a recorded attempt that the next round sends
as it was recorded; and the OffRamp lets a message succeed once whatever
happens (a later execution of a SUCCESS is skipped: SkippedAlreadyExecutedMessage).
The node is never moved here: the observer completes it on the SUCCESS.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import psycopg

from qtg_runner.chains.ccip import (
    CCIP_MESSAGE_SENT_TOPIC,
    FAILURE,
    KEEPER_KEY,
    KEEPER_SIGNER_ENV,
    SUCCESS,
    SentMessage,
    attested_token_data,
    ccip_transaction,
    execution_state_calldata,
    manually_execute_calldata,
)
from qtg_runner.chains.cctp_client import IrisClient
from qtg_runner.chains.evm import (
    EvmRpc,
    EvmRpcError,
    FeeCapExceeded,
    RpcError,
    RpcErrorKind,
    decode_raw,
    normalize_address,
    sign,
    suggest_fees,
)
from qtg_runner.db import procs
from qtg_runner.executors.cctp_burn import IRIS_URL_ENV
from qtg_runner.failpoints import failpoint
from qtg_runner.log import event
from qtg_runner.loop import BatchFunction, WorkerContext
from qtg_runner.signers import Signer, SignerError, load_async
from qtg_runner.signers.local import KEYSTORE_PREFIX

WORKER = "ccip_stranded_reaper"
BATCH_SIZE = 50
MAX_ATTEMPTS = 3
"""Manual executions per message before the reaper leaves it to an operator."""
GAS_HEADROOM = 1.25
RECORD_TRIES = 3
"""Records of one attempt a round, while only another key's were recorded since."""
REFUSALS = frozenset({"QT002", "QT005", "QT011", "QT014", "QT021"})
DEFAULT_KEEPER = KEYSTORE_PREFIX + KEEPER_KEY


async def run_round(
    ctx: WorkerContext,
    worker_id: str,
    *,
    env: Mapping[str, str] | None = None,
    before_broadcast: Callable[[], None] | None = None,
) -> int:
    """One round; returns how many manual executions it broadcast (new or
    recorded ones again). ``before_broadcast`` runs between the record and the
    broadcast (a test's crash)."""
    environ = os.environ if env is None else env
    rows = await ctx.all(procs.ccip_stranded_sends(BATCH_SIZE))
    if not rows:
        return 0
    rpcs: dict[str, EvmRpc] = {}
    keeper: list[Signer] = []
    iris: list[IrisClient] = []
    acted = 0
    try:
        for row in rows:
            reaping = _reap(ctx, row, environ, rpcs, keeper, iris, before_broadcast)
            acted += await _guarded(ctx, worker_id, row, reaping)
    finally:
        for rpc in rpcs.values():
            await rpc.aclose()
        for client in iris:
            await client.aclose()
    return acted


batch: BatchFunction = run_round
"""The registry's batch: one round with its defaults."""


async def _guarded(
    ctx: WorkerContext, worker_id: str, row: procs.StrandedCcipSend, reaping: Awaitable[int]
) -> int:
    """One message's reaping; what the chain, a signer, the fee cap or a refusal
    says stops only it, logged as ccip_reaper_left or ccip_reaper_refused."""
    try:
        return await reaping
    except (EvmRpcError, FeeCapExceeded, SignerError, ValueError) as exc:
        name = "ccip_reaper_left"
        why = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    except psycopg.Error as exc:
        if exc.sqlstate not in REFUSALS:
            raise
        name = "ccip_reaper_refused"
        why = {"sqlstate": exc.sqlstate, "error": (exc.diag.message_primary or str(exc))[:300]}
    ctx.log(logging.WARNING, name, worker_id, node=row.node_id, message_id=row.message_id, **why)
    return 0


def _log(
    ctx: WorkerContext, level: int, name: str, row: procs.StrandedCcipSend, /, **fields: Any
) -> None:
    """An event about one stranded message: the network, its node and its id,
    then ``fields``."""
    event(level, name, network=ctx.network, node=row.node_id, message_id=row.message_id, **fields)


def _rpc(rpcs: dict[str, EvmRpc], env: Mapping[str, str], chain_key: str, variable: str) -> EvmRpc:
    url = env.get(variable)
    if not url:
        raise ValueError(f"chain {chain_key}: {variable} (its RPC URL) is not set in this runner")
    if url not in rpcs:
        rpcs[url] = EvmRpc(url)
    return rpcs[url]


async def _reap(
    ctx: WorkerContext,
    row: procs.StrandedCcipSend,
    env: Mapping[str, str],
    rpcs: dict[str, EvmRpc],
    keeper: list[Signer],
    iris: list[IrisClient],
    before_broadcast: Callable[[], None] | None,
) -> int:
    dest = _rpc(rpcs, env, row.dest_chain_key, row.dest_rpc_url_env)
    sent = await _message(rpcs, env, row)
    answer = await dest.call(row.dest_offramp, execution_state_calldata(sent))
    state = int.from_bytes(answer[-32:], "big") if answer else 0
    if state == SUCCESS:
        return 0  # executed since: the observer completes the node
    if state != FAILURE:
        _log(ctx, logging.WARNING, "ccip_reaper_not_failed", row, state=state)
        return 0
    signer = await _keeper(keeper, env)
    recorded: list[dict[str, Any]] = list(row.attempts)
    # SQL checks what recorded bytes do, not who signed them: an attempt another
    # key signed is never sent, waited for or counted
    attempts = [a for a in recorded if _signed_by(a, signer.address)]
    foreign = [str(a["tx_hash"]) for a in recorded if a not in attempts]
    if foreign:
        _log(ctx, logging.WARNING, "ccip_reaper_foreign_attempts", row, foreign=foreign)
    replaces = str(recorded[-1]["tx_hash"]) if recorded else None  # the newest recorded
    if attempts:
        newest = attempts[-1]
        mine = str(newest["tx_hash"])
        receipt = await dest.receipt(mine)
        if receipt is None:
            if await dest.transaction(mine) is not None:
                return 0  # in the pool: wait for it
            next_nonce = await dest.transaction_count(signer.address, "latest")
            if next_nonce <= int(newest["nonce"]):
                # recorded and never sent (or dropped): the same bytes again
                try:
                    await dest.send_raw_transaction(bytes.fromhex(str(newest["raw_tx"])[2:]))
                except RpcError as exc:
                    if exc.kind not in (RpcErrorKind.ALREADY_KNOWN, RpcErrorKind.NONCE_TOO_LOW):
                        raise
                _log(ctx, logging.INFO, "ccip_manual_execution_rebroadcast", row, tx=mine)
                return 1
        if len(attempts) >= MAX_ATTEMPTS:
            _log(ctx, logging.ERROR, "ccip_reaper_gave_up", row, attempts=len(attempts))
            return 0

    token_data = await _token_data(row, sent, env, iris)
    if token_data is None:
        _log(ctx, logging.INFO, "ccip_reaper_waiting_attestation", row)
        return 0
    data = manually_execute_calldata(sent, token_data)
    nonce = await dest.transaction_count(signer.address, "pending")
    fees = await suggest_fees(
        dest,
        max_fee_cap=int(row.max_fee_per_gas),
        priority_fee_cap=int(row.max_priority_fee_per_gas),
    )
    gas = math.ceil(await dest.estimate_gas(signer.address, row.dest_offramp, data) * GAS_HEADROOM)
    tx = ccip_transaction(row.dest_chain_id, row.dest_offramp, data, 0, nonce, fees, gas)
    signed = await sign(signer, tx)
    await _record(ctx, row, signer.address, nonce, signed.tx_hash, signed.raw_hex, replaces)
    failpoint("ccip_after_manual_record")
    if before_broadcast is not None:
        before_broadcast()
    await dest.send_raw_transaction(signed.raw)
    _log(ctx, logging.INFO, "ccip_manual_execution_sent", row, tx=signed.tx_hash, nonce=nonce)
    return 1


async def _record(
    ctx: WorkerContext,
    row: procs.StrandedCcipSend,
    keeper: str,
    nonce: int,
    tx_hash: str,
    raw_hex: str,
    replaces: str | None,
) -> None:
    """record_ccip_manual_execution of the keeper's attempt, naming the newest
    recorded one as replaced. Refused because attempts were recorded since the
    round read them (QT021), it names the newest again while every one of them
    is another key's (a forger racing the keeper), at most RECORD_TRIES times;
    one the keeper signed (another reaper's) stands, and the refusal is raised."""
    for _ in range(RECORD_TRIES):
        try:
            async with ctx.pool.connection() as conn:
                await procs.record_ccip_manual_execution(
                    row.node_id, row.message_id, keeper, nonce, tx_hash, raw_hex, replaces
                ).aone(conn)
            return
        except psycopg.Error as exc:
            if exc.sqlstate != "QT021":
                raise
            refused = exc
        now = [
            r
            for r in await ctx.all(procs.ccip_stranded_sends(BATCH_SIZE))
            if r.node_id == row.node_id
        ]
        newer: list[Any] = list(now[0].attempts) if now else []
        hashes = [str(a["tx_hash"]) for a in newer]
        if replaces is not None:
            if replaces not in hashes:
                raise refused
            newer = newer[hashes.index(replaces) + 1 :]
        if not newer or any(_signed_by(a, keeper) for a in newer):
            raise refused
        replaces = str(newer[-1]["tx_hash"])
    raise refused


async def _keeper(keeper: list[Signer], env: Mapping[str, str]) -> Signer:
    """The keeper account's signer, loaded once a round."""
    if not keeper:
        keeper.append(await load_async(env.get(KEEPER_SIGNER_ENV) or DEFAULT_KEEPER, env))
    return keeper[0]


def _signed_by(attempt: Mapping[str, Any], address: str) -> bool:
    """Whether ``address`` signed the attempt's recorded bytes."""
    try:
        signer = decode_raw(bytes.fromhex(str(attempt["raw_tx"])[2:])).sender
    except ValueError:
        return False
    return normalize_address(signer) == normalize_address(address)


async def _message(
    rpcs: dict[str, EvmRpc], env: Mapping[str, str], row: procs.StrandedCcipSend
) -> SentMessage:
    """The message as the source OnRamp emitted it, from the source receipt."""
    source = _rpc(rpcs, env, row.source_chain_key, row.source_rpc_url_env)
    receipt = await source.receipt(row.source_tx)
    if receipt is None:
        raise ValueError(f"the source transaction {row.source_tx} has no receipt")
    if normalize_address(receipt.sender) != normalize_address(row.sender):
        # recorded bytes are checked for what they do, not for who signed them
        raise ValueError(
            f"the source transaction {row.source_tx} is {receipt.sender}'s, not the node's "
            f"sender {row.sender}: nothing is executed for it"
        )
    for log in receipt.logs:
        if log.address == row.source_onramp and log.topics[:1] == (CCIP_MESSAGE_SENT_TOPIC,):
            sent = SentMessage.from_log(
                log.address, log.topics, log.data, log.tx_hash, log.block_number, log.log_index
            )
            if sent.message_id_hex == row.message_id:
                return sent
    raise ValueError(f"{row.source_tx} emitted no CCIPMessageSent {row.message_id}")


async def _token_data(
    row: procs.StrandedCcipSend,
    sent: SentMessage,
    env: Mapping[str, str],
    iris: list[IrisClient],
) -> list[bytes] | None:
    """Each token's offchain data for the destination's pool: on a 'cctp'
    lane a USDC transfer's burn message and attestation, as the attestation
    service answers for the source transaction (None while it has not
    attested); empty otherwise."""
    if row.token_data != "cctp":
        return [b""] * len(sent.tokens)
    if all(payload is None for payload in sent.usdc_payloads()):
        return [b""] * len(sent.tokens)
    if not iris:
        url = env.get(IRIS_URL_ENV)
        if not url:
            raise ValueError(
                f"{IRIS_URL_ENV} (the attestation service's URL) is not set in this runner: "
                "a USDC message cannot be executed without its attestation"
            )
        iris.append(IrisClient(url))
    return await attested_token_data(iris[0], sent)
