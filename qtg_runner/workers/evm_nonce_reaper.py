"""evm_nonce_reaper (sidecar, the seed's name): keeps treasury accounts' nonces
moving on their EVM chains. Two jobs, each round:

1. Close the nonces that will never broadcast (evm_nonce_gaps: held only by
   intents that FAILED or were ABANDONED, or skipped by an allocation). A
   later transaction of the account waits behind such a gap forever, so the
   reaper closes it with a zero-value self-transfer at that nonce (a fill),
   recorded with record_nonce_fill BEFORE it is broadcast. Before signing it
   reads the chain: the account's latest count past the nonce means the nonce
   is consumed already, and then a receipt of a hash the engine recorded there
   (a FAILED intent's transaction mined after all: money moved for a node the
   engine holds failed) is logged as an error and recorded for an operator
   (record_nonce_closed 'found_mined', the audit row nonce_found_mined) -- a
   warning when its receipt shows it reverted (it moved nothing but gas: a
   CCTP mint that reverted past its message's expiration, given up for a
   mint of the message re-attested, leaves one); otherwise it is recorded
   'consumed'. A recorded transaction of that nonce
   still in the node's pool is never replaced by a fill. The gap search reads
   each account from its settled mark up, so the round first moves the marks
   (settle_evm_nonces) over the nonces settled since the last one.
2. Look again at transactions waiting long (evm_stale_transactions: a sent
   intent's newest transaction, or an open fill, recorded more than
   ``blocks`` block times ago, at least ``min_seconds``). Mined, or the nonce
   consumed: an intent is the observer's to settle; a fill is reported closed.
   Not mined and the nonce free: dropped bytes are broadcast again as they
   were recorded; otherwise a replacement at the same nonce (the same
   recipient, value, data and gas, fees by evm.bump under the chain's caps:
   above them it is logged and left) is recorded first
   (record_evm_replacement, or record_nonce_fill naming the fill it replaces)
   and then broadcast. Recorded bytes that another key signed (SQL holds
   what recorded bytes do, not who signed them) never take the account's
   nonce: they are never broadcast, and the account's own transaction at
   the nonce replaces them at the fresh fees raised by the bump: a fill's
   self-transfer, or the intent's call (the one its route makes, which SQL
   checked) with the gas the chain estimates for it now, logged as
   ``nonce_reaper_foreign_bytes``. A forged fill or replacement so holds
   no account still; but a call that pays ether (a CCIP or Stargate fee,
   which is the runner's quote, not the route's) is not signed from
   another key's bytes: it is logged (``nonce_reaper_foreign_bytes_left``)
   and left to recovery and an operator.

Every decision is the chain's word read now and the database's record; the
reaper never moves a node. Where the RPC URLs and keys come from: the
environment variables the registry names, as for the evm_transfer executor.
A chain that cannot be read is logged and left for the next round.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import psycopg

from qtg_runner.chains.evm import (
    EvmRpc,
    EvmRpcError,
    FeeCapExceeded,
    Fees,
    RpcError,
    RpcErrorKind,
    bump,
    decode_raw,
    estimate_gas,
    normalize_address,
    self_transfer,
    suggest_fees,
)
from qtg_runner.db import procs
from qtg_runner.log import event
from qtg_runner.loop import BatchFunction, WorkerContext
from qtg_runner.signers import Signer, SignerError, load_async

WORKER = "evm_nonce_reaper"
BATCH_SIZE = 50
# nonces a settle call reads per account, and calls a round makes while behind
SETTLE_BATCH = 10_000
SETTLE_CALLS = 10
BUMP_AFTER_BLOCKS = 20
"""A sent transaction not mined after this many block times is bumped..."""
BUMP_MIN_SECONDS = 60
"""...but never before this many seconds."""
REFUSALS = frozenset({"QT002", "QT005", "QT011", "QT014", "QT021", "QT031", "QT033"})
"""What the reaper's procedures refuse with: the row is left, the round goes on."""


class _Round:
    """One round's RPC clients and signers, by URL and signer id."""

    def __init__(self, ctx: WorkerContext, env: Mapping[str, str]) -> None:
        self.ctx = ctx
        self.env = env
        self.rpcs: dict[str, EvmRpc] = {}
        self.signers: dict[str, Signer] = {}

    def rpc(self, chain_key: str, rpc_url_env: str) -> EvmRpc | None:
        url = self.env.get(rpc_url_env)
        if not url:
            event(
                logging.WARNING,
                "nonce_reaper_no_rpc",
                network=self.ctx.network,
                chain=chain_key,
                variable=rpc_url_env,
            )
            return None
        rpc = self.rpcs.get(url)
        if rpc is None:
            rpc = self.rpcs[url] = EvmRpc(url)
        return rpc

    async def signer(self, signer_id: str, address: str) -> Signer:
        signer = self.signers.get(signer_id)
        if signer is None:
            signer = self.signers[signer_id] = await load_async(signer_id, self.env)
        if signer.address != address:
            raise SignerError(f"signer {signer_id} does not hold the key of {address}")
        return signer

    async def aclose(self) -> None:
        for rpc in self.rpcs.values():
            await rpc.aclose()

    def log(
        self, level: int, name: str, chain_key: str, sender: str, nonce: int, /, **fields: Any
    ) -> None:
        """An event about one nonce of an account: the network, the chain, the
        sender and the nonce, then ``fields``."""
        event(
            level,
            name,
            network=self.ctx.network,
            chain=chain_key,
            sender=sender,
            nonce=nonce,
            **fields,
        )


async def run_round(
    ctx: WorkerContext,
    worker_id: str,
    *,
    env: Mapping[str, str] | None = None,
    blocks: int = BUMP_AFTER_BLOCKS,
    min_seconds: int = BUMP_MIN_SECONDS,
) -> int:
    """One round of both jobs; returns how many nonces or transactions it acted on."""
    async with ctx.pool.connection() as conn:
        for _ in range(SETTLE_CALLS):
            marks = await procs.settle_evm_nonces(SETTLE_BATCH).aall(conn)
            if not any(mark.behind for mark in marks):
                break
        gaps = await procs.evm_nonce_gaps(BATCH_SIZE).aall(conn)
        stale = await procs.evm_stale_transactions(blocks, min_seconds, BATCH_SIZE).aall(conn)
    state = _Round(ctx, os.environ if env is None else env)
    done = 0
    try:
        for gap in gaps:
            done += await _guarded(
                state, gap.chain_key, gap.sender, gap.nonce, _close_gap(state, gap)
            )
        for row in stale:
            done += await _guarded(
                state, row.chain_key, row.sender, row.nonce, _look_again(state, row)
            )
    finally:
        await state.aclose()
    return done


batch: BatchFunction = run_round
"""The registry's batch: one round with its defaults."""


async def _guarded(state: _Round, chain_key: str, sender: str, nonce: int, work: Any) -> int:
    """One nonce's work; what the chain, a signer or a refusal says stops only it."""
    try:
        return int(await work)
    except (EvmRpcError, SignerError, FeeCapExceeded, ValueError) as exc:
        problem = str(exc)
    except psycopg.Error as exc:
        if exc.sqlstate not in REFUSALS:
            raise
        problem = f"{exc.sqlstate}: {exc.diag.message_primary or exc}"
    state.log(logging.WARNING, "nonce_reaper_skipped", chain_key, sender, nonce, problem=problem)
    return 0


async def _close_gap(state: _Round, gap: procs.NonceGap) -> int:
    rpc = state.rpc(gap.chain_key, gap.rpc_url_env)
    if rpc is None:
        return 0
    latest = await rpc.transaction_count(gap.sender, "latest")
    if latest > gap.nonce:
        await _report_consumed(
            state, rpc, gap.chain_key, gap.sender, gap.nonce, gap.tx_hashes, latest
        )
        return 1
    for tx_hash in gap.tx_hashes:
        known = await rpc.transaction(tx_hash)
        if known is not None and normalize_address(known.sender) == normalize_address(gap.sender):
            # a failed intent's bytes are out there after all: never replaced by a
            # fill (bytes recorded at the nonce but sent from another account, a
            # replacement signed by another key, never take it)
            state.log(
                logging.WARNING,
                "nonce_gap_occupied",
                gap.chain_key,
                gap.sender,
                gap.nonce,
                tx_hash=tx_hash,
            )
            return 0
    signer = await state.signer(gap.signer_id, gap.sender)
    fees = await suggest_fees(
        rpc,
        max_fee_cap=int(gap.max_fee_per_gas),
        priority_fee_cap=int(gap.max_priority_fee_per_gas),
    )
    signed = await signer.sign_transaction(self_transfer(gap.chain_id, gap.sender, gap.nonce, fees))
    async with state.ctx.pool.connection() as conn:
        await procs.record_nonce_fill(
            gap.chain_key, gap.sender, gap.nonce, signed.tx_hash, signed.raw_hex
        ).aone(conn)
    answer = await _broadcast(rpc, signed.raw)
    state.log(
        logging.INFO,
        "nonce_filled",
        gap.chain_key,
        gap.sender,
        gap.nonce,
        tx_hash=signed.tx_hash,
        answer=answer,
    )
    return 1


async def _report_consumed(
    state: _Round,
    rpc: EvmRpc,
    chain_key: str,
    sender: str,
    nonce: int,
    tx_hashes: list[str],
    latest: int,
    fills: frozenset[str] = frozenset(),
) -> None:
    """The account's count is past ``nonce``: which recorded hash took it, if any
    (a fill of ours, or a failed or abandoned intent's own transaction: money
    moved for a node the engine holds failed), or none (a transaction the
    engine never recorded); reported once, by record_nonce_closed."""
    how, level, name = "consumed", logging.WARNING, "nonce_consumed"
    evidence: dict[str, object] = {"latest_count": latest, "recorded_hashes": tx_hashes}
    detail: dict[str, object] = {"latest_count": latest}
    for tx_hash in tx_hashes:
        receipt = await rpc.receipt(tx_hash)
        if receipt is None or normalize_address(receipt.sender) != normalize_address(sender):
            continue  # not mined, or mined from another account: not what took the nonce
        evidence = {
            "tx_hash": tx_hash,
            "block_number": receipt.block_number,
            "block_hash": receipt.block_hash,
            "status": receipt.status,
            "latest_count": latest,
        }
        detail = {"tx_hash": tx_hash}
        if tx_hash in fills:
            how, level, name = "fill_mined", logging.INFO, "nonce_fill_mined"
        elif not receipt.succeeded:
            how, level, name = "found_mined", logging.WARNING, "nonce_found_mined"
            detail |= {
                "block_number": receipt.block_number,
                "problem": "a transaction of a failed or abandoned intent is mined, reverted: "
                "it moved nothing but its gas",
            }
        else:
            how, level, name = "found_mined", logging.ERROR, "nonce_found_mined"
            detail |= {
                "block_number": receipt.block_number,
                "problem": "a transaction of a failed or abandoned intent is mined: money moved "
                "for a node the engine holds failed",
            }
        break
    async with state.ctx.pool.connection() as conn:
        await procs.record_nonce_closed(chain_key, sender, nonce, how, evidence).aone(conn)
    state.log(level, name, chain_key, sender, nonce, **detail)


async def _look_again(state: _Round, row: procs.StaleTransaction) -> int:
    rpc = state.rpc(row.chain_key, row.rpc_url_env)
    if rpc is None:
        return 0
    is_fill = row.kind == "fill"
    latest = await rpc.transaction_count(row.sender, "latest")
    if latest > row.nonce:
        if not is_fill:
            return 0  # mined or taken: the observer settles the node
        fills = frozenset(
            h
            for h, purpose in zip(row.tx_hashes, row.tx_purposes, strict=True)
            if purpose == "fill"
        )
        await _report_consumed(
            state, rpc, row.chain_key, row.sender, row.nonce, row.tx_hashes, latest, fills
        )
        return 1
    raw = bytes.fromhex(row.raw_tx[2:])
    decoded = decode_raw(raw)
    own = normalize_address(decoded.sender) == normalize_address(row.sender)
    if (decoded.chain_id, decoded.nonce) != (row.chain_id, row.nonce):
        raise ValueError(
            f"the recorded bytes {row.tx_hash} are for chain id {decoded.chain_id}, "
            f"nonce {decoded.nonce}: not this account's nonce"
        )
    if not own:
        # SQL fixes a call's recipient and data but not all it pays (a CCIP or
        # Stargate fee is the runner's quote): one that pays ether is never the
        # account's to sign from another key's bytes
        pays = not is_fill and decoded.value != 0
        state.log(
            logging.WARNING,
            "nonce_reaper_foreign_bytes_left" if pays else "nonce_reaper_foreign_bytes",
            row.chain_key,
            row.sender,
            row.nonce,
            tx_hash=row.tx_hash,
            signed_by=decoded.sender,
            kind=row.kind,
            value=decoded.value,
        )
        if pays:
            return 0
    if own and await rpc.transaction(row.tx_hash) is None:
        # dropped: the recorded bytes again, as they were signed
        try:
            await rpc.send_raw_transaction(raw)
        except RpcError as exc:
            if exc.kind is not RpcErrorKind.UNDERPRICED:
                raise
        else:
            state.log(
                logging.INFO,
                "nonce_reaper_rebroadcast",
                row.chain_key,
                row.sender,
                row.nonce,
                tx_hash=row.tx_hash,
                kind=row.kind,
            )
            return 1
    caps = {
        "max_fee_cap": int(row.max_fee_per_gas),
        "priority_fee_cap": int(row.max_priority_fee_per_gas),
    }
    fresh: Fees | None
    try:
        fresh = await suggest_fees(rpc, **caps)
    except FeeCapExceeded:
        fresh = None
    # bytes another key signed (SQL checks what recorded bytes do, not who
    # signed them) never take the account's nonce: the account's own
    # transaction there, pending or not, is replaced from the fresh fees
    base = decoded.fees if own else fresh
    try:
        if base is None:
            raise FeeCapExceeded("the base fee is above the chain's max fee cap")
        fees = bump(base, at_least=fresh, **caps)
    except FeeCapExceeded as exc:
        state.log(
            logging.WARNING,
            "nonce_reaper_bump_over_cap",
            row.chain_key,
            row.sender,
            row.nonce,
            tx_hash=row.tx_hash,
            problem=str(exc),
        )
        return 0
    if is_fill:
        tx = self_transfer(row.chain_id, row.sender, row.nonce, fees)
    elif own:
        tx = decoded.to_tx(fees=fees)
    else:
        # the intent's call, which SQL holds to its route, signed by the account
        # with the gas the chain estimates for it now: a forger's gas is not taken
        assert decoded.to is not None
        gas = await estimate_gas(rpc, row.sender, decoded.to, decoded.data, value=decoded.value)
        tx = decoded.to_tx(fees=fees, gas=gas)
    signer = await state.signer(row.signer_id, row.sender)
    signed = await signer.sign_transaction(tx)
    async with state.ctx.pool.connection() as conn:
        if is_fill:
            await procs.record_nonce_fill(
                row.chain_key,
                row.sender,
                row.nonce,
                signed.tx_hash,
                signed.raw_hex,
                replaces=row.tx_hash,
            ).aone(conn)
        else:
            assert row.intent_id is not None
            await procs.record_evm_replacement(row.intent_id, signed.tx_hash, signed.raw_hex).aone(
                conn
            )
    answer = await _broadcast(rpc, signed.raw)
    state.log(
        logging.INFO,
        "nonce_reaper_bumped",
        row.chain_key,
        row.sender,
        row.nonce,
        kind=row.kind,
        replaced=row.tx_hash,
        tx_hash=signed.tx_hash,
        max_fee_per_gas=fees.max_fee_per_gas,
        answer=answer,
    )
    return 1


async def _broadcast(rpc: EvmRpc, raw: bytes) -> str:
    """Send recorded bytes; "already known" and "nonce too low" are answers, not
    errors (the next round reads the chain again)."""
    try:
        await rpc.send_raw_transaction(raw)
    except RpcError as exc:
        if exc.kind in (RpcErrorKind.ALREADY_KNOWN, RpcErrorKind.NONCE_TOO_LOW):
            return str(exc.kind.value)
        raise
    return "sent"
