"""The `cctp_mint` executor: the second half of a CCTP v2 transfer,
``MessageTransmitterV2.receiveMessage(message, attestation)`` on the
destination chain with the message its `cctp_burn` parent had attested.

The burn's evidence comes from ``work.inputs`` (the parent whose executor is
cctp_burn) and is checked against the mint's own route before anything is
signed (cctp_mint_route, in SQL): the message's source and destination domains,
its sender and recipient (the two chains' TokenMessengerV2), the burn token
(the source chain's USDC), the mint recipient (the one the movement asked, a
treasury account or allow-listed on this chain), the amount (the movement's)
and the fee executed (at most the route's basis-point cap). A mismatch fails
the node with nothing signed. The attestation itself is checked by the
transmitter (gas estimation runs it before signing). The engine records a
mint's bytes only when the message is its burn's, at the nonce the burn's
evidence shows (bridge_call_problem), so every mint a node signs is of that
one message.

Minting is idempotent and open to anyone (destinationCaller 0): the message's
nonce is spent once (``usedNonces``). So a mint that reverts "Nonce already
used", or finds the nonce used with a ``MessageReceived`` by another
transaction, is COMPLETED with that transaction as evidence.

A fast attestation expires: its burn body names an ``expirationBlock`` of this
chain, and a mint mined at or past it reverts "Message expired and must be
re-signed", the nonce unused. Circle re-attests such a message as finalized
(``POST /v2/reattest/{nonce}``; expirationBlock 0, never expires), and so does
this executor, before it signs a message that is expired or within
EXPIRY_MARGIN_BLOCKS of it: it reads the messages of the burn's transaction
from Iris (``QTG_IRIS_URL``), asks for the re-attestation, and signs the
message re-attested once Iris has it, after checking it is the burn's message
(the same nonce, domains, parties, token, amount and max fee; the fee executed
within the cap); until then the node waits (retryable, nothing signed). A
mint sent in time but mined past the expiration reverted without minting: its
reading is ``expired``, which observe hands to recovery (UNKNOWN) and recovery
reports NOT_SUBMITTED with the receipt as evidence, which the engine accepts
for a cctp_mint alone and only on that evidence (cctp_mint_expiry_problem);
the node is READY, and its next prepare re-attests. Never a second mint: the
same nonce, which the transmitter receives once; never FAILED for an expiry.

    preflight  the route and the burn's evidence, checked.
    prepare    the same, then fees, the nonce's state (used: the mint goes
               out with the burn's message as it is, to revert "Nonce already
               used" for evidence), the message re-attested when it expires
               within the margin, gas (the transmitter's estimate; a fixed
               limit when the nonce is already used), the nonce at the greater
               of the chain's pending count and the engine's next one, signed.
               The payload keeps the message's nonce, fee executed and
               expiration block: observe and recover have no inputs.
    resign     the recorded call at another nonce (its message checked again).
    submit     the recorded bytes broadcast (evm_tx.broadcast).
    observe    final with the MessageReceived of the nonce and the amount less
               the fee executed minted to the recipient -> COMPLETED (the
               mint transaction, the nonce, the USDC minted); another amount
               -> UNKNOWN with the evidence; final and reverted, or the nonce taken by an
               unrecorded transaction, with usedNonces(nonce) = 1 and a
               MessageReceived for it -> COMPLETED with that transaction;
               reverted at or past the message's expirationBlock with the
               nonce unused -> UNKNOWN (``expired``, for recovery); reverted
               otherwise with the nonce unused -> FAILED; not mined: the
               recorded bytes rebroadcast. The MessageReceived of another
               transaction is searched for newest blocks first, at most
               ``QTG_LOG_BLOCK_RANGE`` blocks (2,000) an eth_getLogs, as
               providers cap a request's range.
    recover    the same reading, from usedNonces and MessageReceived;
               ``expired`` -> NOT_SUBMITTED.
    health     the chains (as evm_transfer's). Not Iris: the attested message
               is in hand, and a DOWN report would stop mints that can be
               done (one that must be re-attested waits for Iris in prepare).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from qtg_runner.chains.cctp import address_to_bytes32
from qtg_runner.chains.cctp_client import (
    MESSAGE_RECEIVED_TOPIC,
    IrisClient,
    IrisStatus,
    decode_message_received,
    decode_receive_message,
    logs_newest_first,
    parse_message,
    receive_message_calldata,
    used_nonce,
)
from qtg_runner.chains.evm import (
    decode_raw,
    decode_transfers,
    estimate_gas,
)
from qtg_runner.chains.evm_rpc import EvmRpc, Receipt, RpcError, RpcErrorKind
from qtg_runner.db import procs
from qtg_runner.executors import evm_tx
from qtg_runner.executors.base import (
    ExecutorError,
    JsonObject,
    NodeWork,
    ObserveResult,
    ObserveStatus,
    Prepared,
    RecoveryOutcome,
    RecoveryResult,
    config_schema,
)
from qtg_runner.executors.cctp_burn import (
    CctpBurnExecutor,
    CctpRoute,
    IrisExecutor,
    attested_problems,
)

USED_NONCE_GAS = 200_000
"""The gas limit of a mint whose nonce is already used (the estimate reverts):
enough for the transmitter to check the attestation and revert."""
LOG_LOOKBACK_BLOCKS = 50_000
"""How far before the mint's prepare MessageReceived is looked for (another
minter's transaction comes after the attestation, which comes before it)."""
LOG_BLOCK_RANGE_ENV = "QTG_LOG_BLOCK_RANGE"
DEFAULT_LOG_BLOCK_RANGE = 2_000
"""Blocks an eth_getLogs of the search asks for at most (QTG_LOG_BLOCK_RANGE):
providers refuse wider ranges (Alchemy, Infura and most others cap them
between 2,000 and 10,000 blocks, some by the size of the answer)."""
EXPIRY_MARGIN_BLOCKS = 10
"""A fast message that expires within this many blocks of the destination's
head is re-attested before it is signed: the mint must be mined before its
expirationBlock, and a message re-attested as finalized never expires."""
ZERO_ADDRESS = "0x" + "00" * 20


@dataclass(frozen=True)
class _Route(CctpRoute):
    """cctp_mint_route's word on one node, as recorded in the prepared payload
    (with the message's nonce and what it mints)."""

    procedure = procs.cctp_mint_route

    source_chain: str
    source_token_messenger: str
    source_token: str

    def payload(self) -> JsonObject:
        return self.recorded()


@dataclass(frozen=True)
class _Burn:
    """The burn's attested message, checked against the mint's route."""

    message: bytes
    attestation: bytes
    nonce: str
    fee_executed: int
    source_tx_hash: str | None
    expiration_block: int = 0
    """The destination block at which the attestation expires (0: never)."""
    reattested: bool = False

    def send(self, route: _Route) -> evm_tx.Send:
        """MessageTransmitterV2.receiveMessage of the message and attestation."""
        return evm_tx.Send(
            route.message_transmitter, receive_message_calldata(self.message, self.attestation)
        )

    def expires_by(self, block: int) -> bool:
        """Whether a mint mined at ``block`` would find the message expired."""
        return self.expiration_block != 0 and block >= self.expiration_block


def burn_evidence(work: NodeWork) -> JsonObject:
    """The evidence of the node's one cctp_burn parent (from ``work.inputs``)."""
    burns = [
        parent
        for parent in (work.inputs or {}).values()
        if isinstance(parent, dict) and parent.get("executor_key") == CctpBurnExecutor.key
    ]
    if len(burns) != 1 or not isinstance(burns[0].get("evidence"), dict):
        raise ExecutorError(
            f"node {work.node_id}: a cctp_mint step follows exactly one cctp_burn step, whose "
            f"evidence it mints; it has {len(burns)}",
            retryable=False,
        )
    evidence: JsonObject = burns[0]["evidence"]
    return evidence


def checked_burn(route: _Route, evidence: JsonObject) -> _Burn:
    """The burn's message and attestation when they are what the mint's route
    asks, else a non-retryable ExecutorError naming every field that is not:
    nothing is signed for it."""
    try:
        message, body, raw = parse_message(evidence.get("message"))
        attestation_hex = evidence.get("attestation")
        if not isinstance(attestation_hex, str) or not attestation_hex.startswith("0x"):
            raise ValueError("the attestation is not 0x-prefixed hex")
        attestation = bytes.fromhex(attestation_hex[2:])
    except ValueError as exc:
        raise ExecutorError(
            f"the burn's evidence holds no CCTP v2 burn message: {exc}", retryable=False
        ) from None
    expected = {
        "source domain": (message.source_domain, route.source_domain),
        "destination domain": (message.destination_domain, route.destination_domain),
        "sender (the source TokenMessengerV2)": (
            message.sender,
            address_to_bytes32(route.source_token_messenger),
        ),
        "recipient (this chain's TokenMessengerV2)": (
            message.recipient,
            address_to_bytes32(route.token_messenger),
        ),
        "burn token (the source chain's USDC)": (
            body.burn_token,
            address_to_bytes32(route.source_token),
        ),
        "mint recipient": (body.mint_recipient, address_to_bytes32(route.mint_recipient)),
        "amount": (body.amount, route.amount_units),
    }
    also = []
    if message.destination_caller not in (bytes(32), address_to_bytes32(route.leg.sender)):
        also.append("destination caller (neither anyone nor this sender)")
    if body.fee_executed > min(body.max_fee, route.max_fee_units):
        also.append(f"fee executed {body.fee_executed} over the cap {route.max_fee_units}")
    wrong = attested_problems(
        expected,
        also,
        message,
        attestation,
        "nonce not filled (the source log's message, not the attested one)",
    )
    if wrong:
        raise ExecutorError(
            "the burn's attested message does not match the mint's route: " + "; ".join(wrong),
            retryable=False,
        )
    source_tx = evidence.get("source_tx_hash")
    return _Burn(
        raw,
        attestation,
        "0x" + message.nonce.hex(),
        body.fee_executed,
        str(source_tx) if source_tx else None,
        body.expiration_block,
    )


def checked_reattested(route: _Route, burn: _Burn, entry: Mapping[str, Any]) -> _Burn:
    """An Iris entry's message when it is ``burn``'s message re-attested (the
    route's checks again, and the same nonce, domains, parties, token,
    recipient, amount, sender, max fee and hook data; the finality executed,
    the fee executed within the cap, and the expiration may differ), else a
    non-retryable ExecutorError: nothing is signed for it."""
    again = checked_burn(
        route,
        {
            "message": entry.get("message"),
            "attestation": entry.get("attestation"),
            "source_tx_hash": burn.source_tx_hash,
        },
    )
    old_message, old_body, _ = parse_message("0x" + burn.message.hex())
    new_message, new_body, _ = parse_message("0x" + again.message.hex())
    same_header = replace(
        new_message,
        finality_threshold_executed=old_message.finality_threshold_executed,
        body=old_message.body,
    )
    same_body = replace(
        new_body, fee_executed=old_body.fee_executed, expiration_block=old_body.expiration_block
    )
    if same_header != old_message or same_body != old_body:
        raise ExecutorError(
            f"Iris re-attested nonce {burn.nonce} as a message that is not the burn's",
            retryable=False,
        )
    return replace(again, reattested=True)


@dataclass(frozen=True)
class _Reading:
    """The mint now: ``minted`` (the nonce spent, evidence of the minting
    transaction), ``reverted`` with the nonce unused, or evm_tx's status."""

    status: str
    evidence: JsonObject
    tx_hash: str | None = None
    wait_s: float | None = None


class CctpMintExecutor(IrisExecutor):
    """Its Iris client is made on first use (a re-attestation)."""

    key = "cctp_mint"
    landed = "minted"
    sends = "mint"
    description = (
        "CCTP v2 receiveMessage on the destination chain with its cctp_burn parent's attested "
        "message, checked against the movement first; idempotent (usedNonces, MessageReceived)"
    )
    node_config_schema = config_schema(
        ("chain", "source_chain", "from", "to"), optional=("max_fee_bps",)
    )

    def _log_block_range(self) -> int:
        raw = self._env.get(LOG_BLOCK_RANGE_ENV, "").strip()
        if not raw:
            return DEFAULT_LOG_BLOCK_RANGE
        if not raw.isdigit() or not 1 <= int(raw) <= 1_000_000:
            raise ExecutorError(
                f"{LOG_BLOCK_RANGE_ENV}={raw[:20]!r} is not a number of blocks from 1 to "
                f"1000000 (the widest eth_getLogs range the RPC providers accept; default "
                f"{DEFAULT_LOG_BLOCK_RANGE})",
                retryable=True,
                retry_after=evm_tx.RETRY_LATER_S,
            )
        return int(raw)

    # -- the protocol ------------------------------------------------------------

    async def preflight(self, work: NodeWork) -> None:
        checked_burn(await _Route.of(self._pool, work), burn_evidence(work))

    async def prepare(self, work: NodeWork) -> Prepared:
        route = await _Route.of(self._pool, work)
        burn = checked_burn(route, burn_evidence(work))
        rpc = self._evm.leg_rpc(route.leg)
        signer = await self._evm.signer(route.leg)
        async with evm_tx.chain_errors(route.leg.chain_key):
            chain_next, fees = await evm_tx.pending_nonce_and_fees(rpc, route.leg)
            head = await rpc.block_number()
            minted = await used_nonce(rpc, route.message_transmitter, bytes.fromhex(burn.nonce[2:]))
        if not minted and burn.expires_by(head + EXPIRY_MARGIN_BLOCKS):
            burn = await self._reattested(route, burn, head)
        send = burn.send(route)
        async with evm_tx.chain_errors(route.leg.chain_key):
            try:
                gas = await estimate_gas(rpc, route.leg.sender, send.to, send.data)
            except RpcError as exc:
                reason = str(exc).lower()
                if exc.kind is not RpcErrorKind.REVERTED:
                    raise
                if "expired" in reason:
                    # it expired since the head was read: re-attested on the next try
                    raise ExecutorError(
                        f"the attestation of nonce {burn.nonce} expired at block "
                        f"{burn.expiration_block} of {route.leg.chain_key}: it is re-attested "
                        "before the next try",
                        retryable=True,
                        retry_after=route.leg.block_time_s,
                    ) from None
                if "nonce already used" not in reason:
                    raise
                # minted already (anyone may): the mint still goes out, and its
                # revert with the nonce used is the evidence observe reads
                gas = USED_NONCE_GAS
            funds = await rpc.balance(route.leg.sender)
        evm_tx.require_funds(route.leg, funds, gas * fees.max_fee_per_gas)
        payload = (
            route.payload()
            | {
                "message_nonce": burn.nonce,
                "fee_executed": str(burn.fee_executed),
                "expiration_block": str(burn.expiration_block),
                "reattested": burn.reattested,
                "source_tx_hash": burn.source_tx_hash,
                "search_from_block": max(0, head - LOG_LOOKBACK_BLOCKS),
            }
            | evm_tx.gas_payload(gas, fees)
        )
        return await evm_tx.signed(signer, route.leg, send, route.nonce(chain_next), payload)

    async def _reattested(self, route: _Route, burn: _Burn, head: int) -> _Burn:
        """``burn``'s message as Iris re-attests it (expirationBlock 0, or past
        the margin), asking Iris for it when it does not have it yet. Raises a
        retryable ExecutorError while it is not signed yet (nothing is signed
        here meanwhile), a non-retryable one when Iris answers another message."""
        if burn.source_tx_hash is None:
            raise ExecutorError(
                f"the attestation of nonce {burn.nonce} expires at block "
                f"{burn.expiration_block} and the burn's evidence names no source "
                "transaction to ask Iris for it again",
                retryable=False,
            )
        iris = self._iris_client()
        what = (
            f"the attestation of nonce {burn.nonce} expires at block {burn.expiration_block} "
            f"of {route.leg.chain_key} (head {head})"
        )
        entry, waited = await self._iris_entry(iris, route, burn, head)
        if entry is None and waited is None:
            asked = await iris.reattest(burn.nonce)
            if asked.status is IrisStatus.RATE_LIMITED:
                waited = asked.retry_after
            elif asked.status is not IrisStatus.COMPLETE:
                raise ExecutorError(
                    f"{what}; Iris did not take its re-attestation: {asked.status.value} "
                    f"{asked.detail}",
                    retryable=True,
                    retry_after=evm_tx.RETRY_LATER_S,
                    throttled=True,
                )
            else:
                entry, waited = await self._iris_entry(iris, route, burn, head)
        if entry is None:
            # Iris signs it once the burn is final on its chain (13 to 19 minutes
            # from Ethereum and its L2s): Iris's wait, not the node's failure, so
            # the node waits in READY, asking every RETRY_LATER_S (or after
            # Iris's own hint), without spending its attempts
            raise ExecutorError(
                f"{what}: waiting for Iris's re-attestation",
                retryable=True,
                retry_after=waited if waited is not None else evm_tx.RETRY_LATER_S,
                throttled=True,
            )
        return checked_reattested(route, burn, entry)

    async def _iris_entry(
        self, iris: IrisClient, route: _Route, burn: _Burn, head: int
    ) -> tuple[Mapping[str, Any] | None, float | None]:
        """Iris's entry of ``burn``'s nonce when it is attested to expire no
        sooner than the margin (re-attested), with None; else None with how
        long to wait when Iris asks for a wait (429) or cannot be read."""
        assert burn.source_tx_hash is not None
        answer = await iris.messages(route.source_domain, burn.source_tx_hash)
        if answer.status is IrisStatus.RATE_LIMITED:
            return None, answer.retry_after
        if answer.status is IrisStatus.UNAVAILABLE:
            return None, evm_tx.RETRY_LATER_S
        for entry in answer.messages:
            if (
                str(entry.get("eventNonce", "")).lower() != burn.nonce
                or entry.get("status") != "complete"
            ):
                continue
            try:
                _, body, _ = parse_message(entry.get("message"))
            except ValueError:
                continue
            if body.expiration_block == 0 or body.expiration_block > head + EXPIRY_MARGIN_BLOCKS:
                return entry, None
        return None, None

    def recorded_send(self, prepared: Prepared) -> evm_tx.Send:
        """The recorded mint, its message checked again against the route."""
        assert prepared.payload is not None and prepared.raw_tx is not None
        route = _Route.from_payload(prepared.payload)
        try:
            message, attestation = decode_receive_message(
                decode_raw(bytes.fromhex(prepared.raw_tx[2:])).data
            )
        except ValueError as exc:
            raise ExecutorError(f"the prepared mint: {exc}", retryable=False) from None
        burn = checked_burn(
            route,
            {
                "message": "0x" + message.hex(),
                "attestation": "0x" + attestation.hex(),
                "source_tx_hash": prepared.payload.get("source_tx_hash"),
            },
        )
        if burn.nonce != str(prepared.payload["message_nonce"]):
            raise ExecutorError("the prepared mint is of another nonce", retryable=False)
        return burn.send(route)

    async def observe(self, work: NodeWork) -> ObserveResult:
        reading = await self.read(work)
        if reading.status == "expired":
            # nothing minted and nothing will be: recovery reports it, and the
            # node mints the message re-attested
            return ObserveResult(ObserveStatus.UNKNOWN, reading.evidence)
        return evm_tx.observed(reading, self.landed)

    async def recover(self, work: NodeWork) -> RecoveryResult:
        if not (work.intent or {}).get("transactions"):
            return await evm_tx.recovered(work, self.landed, self.read)
        reading = await self.read(work)
        if reading.status == "expired":
            return RecoveryResult(RecoveryOutcome.NOT_SUBMITTED, reading.evidence, reading.tx_hash)

        async def read_once(_: NodeWork) -> _Reading:
            return reading

        return await evm_tx.recovered(work, self.landed, read_once)

    async def read(self, work: NodeWork) -> _Reading:
        payload = evm_tx.recorded_payload(work)
        route = _Route.from_payload(payload)
        nonce = str(payload["message_nonce"])
        expected = route.amount_units - int(payload["fee_executed"])
        rpc = self._evm.leg_rpc(route.leg)
        tx = await evm_tx.read_recorded(rpc, route.leg, work)
        async with evm_tx.chain_errors(route.leg.chain_key):
            if tx.status == "final" and tx.receipt is not None:
                minted = _minted(route, nonce, tx.receipt, expected)
                if minted is not None:
                    return _Reading(_verdict(minted), tx.evidence | minted, tx.tx_hash)
            if tx.status in ("final", "reverted", "foreign", "refused"):
                # not minted by our transaction: by another one?
                elsewhere = await _minted_elsewhere(
                    rpc,
                    route,
                    nonce,
                    int(payload.get("search_from_block", 0)),
                    expected,
                    self._log_block_range(),
                )
                if elsewhere is not None:
                    return _Reading(
                        _verdict(elsewhere),
                        elsewhere | {"our_transaction": tx.evidence},
                        tx.tx_hash,
                    )
                expiration = int(payload.get("expiration_block") or 0)
                mined_at = tx.evidence.get("block_number")
                if (
                    tx.status == "reverted"
                    and expiration != 0
                    and isinstance(mined_at, int)
                    and mined_at >= expiration
                ):
                    # mined at or past the message's expirationBlock, the nonce
                    # unused: "Message expired and must be re-signed"
                    return _Reading(
                        "expired",
                        tx.evidence
                        | {
                            "expired": True,
                            "used_nonce": False,
                            "message_nonce": nonce,
                            "expiration_block": expiration,
                        },
                        tx.tx_hash,
                    )
                if tx.status == "final":
                    return _Reading(
                        "refused",
                        tx.evidence
                        | {"problem": "the mint succeeded without a MessageReceived for its nonce"},
                        tx.tx_hash,
                    )
        return _Reading(tx.status, tx.evidence, tx.tx_hash, tx.wait_s)


def _verdict(minted: JsonObject) -> str:
    """``minted``, or ``refused`` (UNKNOWN, for an operator) when the evidence
    names a problem."""
    return "refused" if "problem" in minted else "minted"


def _minted(route: _Route, nonce: str, receipt: Receipt, expected: int) -> JsonObject | None:
    """The mint's evidence from a receipt with the MessageReceived of ``nonce``
    (None without one): the transaction, the nonce, the USDC minted to the
    recipient (Transfer logs from the zero address), with a problem when that
    is not the amount less the fee executed (``expected``)."""
    received = [
        event
        for log in receipt.logs
        if log.address == route.message_transmitter
        and (event := decode_message_received(log)) is not None
        and event.nonce == nonce
    ]
    if len(received) != 1:
        return None
    minted = sum(
        t.value
        for t in decode_transfers(receipt)
        if t.token == route.token_address
        and t.sender == ZERO_ADDRESS
        and t.recipient == route.mint_recipient
    )
    evidence: JsonObject = {
        "mint_tx_hash": receipt.tx_hash,
        "minted_by": receipt.sender,
        "nonce": nonce,
        "source_domain": received[0].source_domain,
        "mint_recipient": route.mint_recipient,
        "amount_minted": str(minted),
        "finality_threshold_executed": received[0].finality_threshold_executed,
    }
    if minted != expected:
        evidence["problem"] = f"{minted} base units minted to the recipient, not {expected}"
    return evidence


async def _minted_elsewhere(
    rpc: EvmRpc, route: _Route, nonce: str, from_block: int, expected: int, block_range: int
) -> JsonObject | None:
    """usedNonces(nonce) = 1 with a MessageReceived for it: the evidence of the
    transaction that minted it (None when the nonce is unused). The logs are
    read from the head back to ``from_block``, ``block_range`` blocks a
    request, until the MessageReceived (there is one at most: the nonce is
    spent once)."""
    if not await used_nonce(rpc, route.message_transmitter, bytes.fromhex(nonce[2:])):
        return None
    ranges = logs_newest_first(
        rpc,
        address=route.message_transmitter,
        topics=[MESSAGE_RECEIVED_TOPIC, None, nonce],
        from_block=from_block,
        to_block=await rpc.block_number(),
        block_range=block_range,
    )
    async for logs in ranges:
        for log in logs:
            receipt = await rpc.receipt(log.tx_hash)
            if receipt is not None and receipt.succeeded:
                minted = _minted(route, nonce, receipt, expected)
                if minted is not None:
                    return minted | {"minted_elsewhere": True}
    return {
        "nonce": nonce,
        "used_nonce": True,
        "minted_elsewhere": True,
        "problem": f"usedNonces is 1 but no MessageReceived since block {from_block}",
    }
