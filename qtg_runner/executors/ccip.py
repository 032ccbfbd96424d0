"""The `ccip` executor: a Chainlink CCIP token transfer (Router.ccipSend) from a
treasury account on one chain to a treasury account or an allow-listed
address on another, the fee paid in the native coin.

What it may sign is the registry's word, read again before every signature
(ccip_send_route, in SQL): both chains, the token on each, the source Router,
the lane (ccip_lanes: its CCIP version, the OnRamp on the source and the
OffRamp on the destination, the fee margin and cap), the sender (a treasury
account and its signer's id), a receiver that is a treasury account or
allow-listed on the DESTINATION chain (QT032 otherwise: nothing is signed),
the amount in base units. The message is token-only (no data) with gas limit 0
in its GenericExtraArgsV2: no receiver callback runs on the destination, so no
destination gas is paid for; it pays the Router's quote and the lane's margin
of it (qtg_runner.chains.ccip.fee_with_margin), so a fee risen by up to the
margin between the quote and the send's block does not revert the send; SQL
holds the signed bytes to exactly that (ccip_send_tx_problem). One transaction
per node, at a nonce the engine allocates, like evm_transfer: the Router's
allowance of the sender's token is a standing, bounded approval set up
beforehand (qtg_runner.chains.ccip.approve_router; a treasury's setup step),
not a second transaction of the node: a second transaction would be a second
nonce per node with a crash window between the two. preflight refuses (retry
later) while the allowance is short.

    preflight  the route; the sender holds the amount, the Router's allowance
               covers it, the Router quotes a fee for the destination.
    prepare    the quote (Router.getFee) and the fee paid (the quote and the
               lane's margin, at most the lane's cap), the gas (estimated with
               that fee as the value), EIP-1559 fees under the chain's caps,
               the nonce at the greater of the chain's pending count and the
               engine's next one, signed; the quote and the destination's head
               (where the search for the execution starts) are recorded.
    submit     eth_sendRawTransaction of the recorded bytes ("already known"
               and a mined "nonce too low" are the same transaction).
    observe    the source receipt of a recorded hash, final at the chain's
               depth, with exactly one message of the lane's OnRamp for this
               sender, receiver, destination and amount, read by the lane's
               version (v1.6 CCIPMessageSent, v1.5 CCIPSendRequested): its
               message id. Then the lane's OffRamp's ExecutionStateChanged for
               it (v1.6: source selector, sequence number and id; v1.5:
               sequence number and id): SUCCESS -> COMPLETED with the evidence (message id,
               source and destination transactions, amount); FAILURE -> still
               PENDING, the evidence saying ``ccip_state: FAILURE`` (the money
               is not lost: a manual execution completes it, and the
               ccip_stranded_reaper makes one); nothing yet -> PENDING. A
               source transaction reverted and final -> FAILED (nothing left
               the account); not mined and dropped -> the identical recorded
               bytes again; a nonce taken by a transaction never recorded, or
               a receipt that does not show the promised message -> UNKNOWN.
               The source transaction is read as every EVM executor reads it
               (evm_tx.read_recorded).
    recover    the same reading: COMPLETED on SUCCESS, FAILED on a reverted
               source, IN_FLIGHT while sent and not yet executed (or FAILED
               and waiting for the reaper), NOT_SUBMITTED when nothing was
               ever recorded, STILL_UNKNOWN where observe says UNKNOWN.
               Never a new send.
    health     every registered chain: it answers with the registered chain id
               and its head is fresh; DOWN only when no chain answers, one
               chain down is DEGRADED (as evm_transfer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from qtg_runner.chains.ccip import (
    CCIP_MESSAGE_SENT_TOPIC,
    CCIP_SEND_REQUESTED_TOPIC,
    SUCCESS,
    ExecutionStateChanged,
    SentMessage,
    ccip_send_calldata,
    execution_state_topics,
    fee_with_margin,
    get_fee_calldata,
)
from qtg_runner.chains.evm import Fees, allowance, balance_of
from qtg_runner.chains.evm_rpc import EvmRpc, RpcError, RpcErrorKind
from qtg_runner.db import procs
from qtg_runner.executors import evm_tx
from qtg_runner.executors.base import (
    BIG,
    ExecutorError,
    JsonObject,
    NodeWork,
    Prepared,
    config_schema,
    seconds_from_ms,
)

STRANDED_RETRY_S = 60.0
"""How often a send whose execution FAILED is looked at again (the reaper acts)."""
GAS_HEADROOM = 1.25


@dataclass(frozen=True)
class _Route(evm_tx.EvmRoute):
    """ccip_send_route's word on one node, kept in the intent's payload at
    prepare: observation never depends on a registry changed since. Its leg
    is the source chain and the account the send is signed for."""

    procedure = procs.ccip_send_route

    token_address: str
    source_selector: int = field(metadata=BIG)
    router: str
    onramp: str
    dest_chain_key: str
    dest_chain_id: int
    dest_rpc_url_env: str
    dest_finality_depth: int
    dest_block_time_s: float = field(metadata=seconds_from_ms("dest_block_time_ms"))
    dest_selector: int = field(metadata=BIG)
    dest_offramp: str
    dest_token_address: str
    recipient: str
    amount_units: int = field(metadata=BIG)
    ccip_version: str
    gas_limit: int
    fee_margin_bps: int
    max_fee_wei: int = field(metadata=BIG)

    def fee(self, quote: int) -> int:
        """What the send pays for ``quote``: the quote and the lane's margin of it."""
        return fee_with_margin(quote, self.fee_margin_bps)

    def payload(self, gas: int, fees: Fees, fee: int, dest_from_block: int) -> JsonObject:
        return (
            self.recorded()
            | evm_tx.gas_payload(gas, fees)
            | {"ccip_fee": str(fee), "dest_from_block": dest_from_block}
        )

    def send(self, quote: int) -> evm_tx.Send:
        """Router.ccipSend of the route, paying ``quote`` and the lane's margin."""
        data = ccip_send_calldata(
            self.dest_selector,
            self.recipient,
            self.token_address,
            self.amount_units,
            self.gas_limit,
        )
        return evm_tx.Send(self.router, data, self.fee(quote))


@dataclass(frozen=True)
class _Reading:
    """The send past its final source transaction (before it, evm_tx's TxReading:
    mined, pending, rebroadcast, reverted, foreign, refused)."""

    status: str
    """sent (the message, not executed yet), mined (executed, not final at the
    destination), stranded (its execution FAILED), executed, refused (the receipt
    does not show the message recorded)."""
    evidence: JsonObject
    tx_hash: str | None = None
    wait_s: float | None = None


class CcipExecutor(evm_tx.EvmExecutor):
    key = "ccip"
    landed = "executed"
    sends = "CCIP send"
    description = (
        "Chainlink CCIP token transfer (Router.ccipSend, native fee) from a treasury account "
        "to a treasury account or an allow-listed address on another chain; complete when the "
        "destination OffRamp executed it with SUCCESS"
    )
    node_config_schema = config_schema(
        ("chain", "destination_chain", "from", "to"), optional=("token",)
    )

    # -- the protocol ------------------------------------------------------------

    async def preflight(self, work: NodeWork) -> None:
        route = await _Route.of(self._pool, work)
        rpc = self._evm.leg_rpc(route.leg)
        recent = evm_tx.shared_for(route.leg)
        async with evm_tx.chain_errors(route.leg.chain_key):
            held, allowed = await evm_tx.read_together(
                route.leg,
                rpc,
                balance_of(rpc, route.token_address, route.leg.sender, max_age_s=recent),
                allowance(
                    rpc, route.token_address, route.leg.sender, route.router, max_age_s=recent
                ),
            )
            await self._fee(rpc, route)
        evm_tx.require_tokens(route.leg, held, route.amount_units, None, self.sends)
        if allowed < route.amount_units:
            raise ExecutorError(
                f"the CCIP Router {route.router} on {route.leg.chain_key} may take {allowed} "
                f"base units of {route.leg.sender}'s token, the send needs {route.amount_units}: "
                "the treasury's standing approval of the Router is short (`qtg chains up` sets it "
                "on the local chains)",
                retryable=True,
                retry_after=evm_tx.RETRY_LATER_S,
            )

    async def _fee(self, rpc: EvmRpc, route: _Route) -> int:
        try:
            answer = await rpc.call(
                route.router,
                get_fee_calldata(
                    route.dest_selector,
                    route.recipient,
                    route.token_address,
                    route.amount_units,
                    route.gas_limit,
                ),
                sender=route.leg.sender,
            )
        except RpcError as exc:
            if exc.kind is RpcErrorKind.REVERTED:
                raise ExecutorError(
                    f"the CCIP Router on {route.leg.chain_key} refuses a message to "
                    f"{route.dest_chain_key} (selector {route.dest_selector}): {exc.message}",
                    retryable=False,
                ) from None
            raise
        return int.from_bytes(answer[:32], "big")

    async def prepare(self, work: NodeWork) -> Prepared:
        route = await _Route.of(self._pool, work)
        rpc = self._evm.leg_rpc(route.leg)
        dest = self._evm.rpc(route.dest_chain_key, route.dest_rpc_url_env)
        signer = await self._evm.signer(route.leg)
        async with evm_tx.chain_errors(route.leg.chain_key):
            quote = await self._fee(rpc, route)
            send = route.send(quote)
            if send.value > route.max_fee_wei:
                raise ExecutorError(
                    f"the CCIP fee from {route.leg.chain_key} to {route.dest_chain_key} is {quote} "
                    f"wei, {send.value} with the lane's margin: over the lane's cap of "
                    f"{route.max_fee_wei} wei",
                    retryable=True,
                    retry_after=evm_tx.RETRY_LATER_S,
                )
            chain_next, fees = await evm_tx.pending_nonce_and_fees(rpc, route.leg)
            estimate = await rpc.estimate_gas(route.leg.sender, send.to, send.data, send.value)
            funds = await rpc.balance(route.leg.sender, max_age_s=evm_tx.shared_for(route.leg))
        async with evm_tx.chain_errors(route.dest_chain_key):
            dest_from_block = await dest.block_number()
        gas = math.ceil(estimate * GAS_HEADROOM)
        evm_tx.require_funds(
            route.leg,
            funds,
            gas * fees.max_fee_per_gas + send.value,
            "the gas and the CCIP fee need up to {}",
        )
        payload = route.payload(gas, fees, quote, dest_from_block)
        return await evm_tx.signed(signer, route.leg, send, route.nonce(chain_next), payload)

    def recorded_send(self, prepared: Prepared) -> evm_tx.Send:
        assert prepared.payload is not None
        route = _Route.from_payload(prepared.payload)
        return route.send(int(prepared.payload["ccip_fee"]))

    async def read(self, work: NodeWork) -> evm_tx.Reading:
        """The chains' word on the node's send, from its recorded hashes only: the
        source transaction as every EVM executor reads it (read_recorded), then,
        once final, its message (exactly the one the intent recorded) and the
        destination's execution of it."""
        payload = evm_tx.recorded_payload(work)
        route = _Route.from_payload(payload)
        tx = await evm_tx.read_recorded(self._evm.leg_rpc(route.leg), route.leg, work)
        if tx.status != "final":
            return tx
        assert tx.receipt is not None
        reading, sent = _message(route, tx)
        if sent is None:
            return reading
        dest = self._evm.rpc(route.dest_chain_key, route.dest_rpc_url_env)
        async with evm_tx.chain_errors(route.dest_chain_key):
            return await _destination(dest, route, int(payload["dest_from_block"]), sent, reading)


def _word(address: str) -> bytes:
    return bytes(12) + bytes.fromhex(address.removeprefix("0x"))


def _sent_messages(route: _Route, receipt: Any) -> list[SentMessage]:
    """The messages of the lane's OnRamp in ``receipt``, read by the lane's version."""
    if route.ccip_version == "1.5":
        return [
            SentMessage.from_v1_5_log(
                log.address,
                log.topics,
                log.data,
                log.tx_hash,
                log.block_number,
                log.log_index,
                route.dest_selector,
            )
            for log in receipt.logs
            if log.address == route.onramp
            and log.topics
            and log.topics[0] == CCIP_SEND_REQUESTED_TOPIC
        ]
    return [
        SentMessage.from_log(
            log.address, log.topics, log.data, log.tx_hash, log.block_number, log.log_index
        )
        for log in receipt.logs
        if log.address == route.onramp and log.topics and log.topics[0] == CCIP_MESSAGE_SENT_TOPIC
    ]


def _message(route: _Route, tx: evm_tx.TxReading) -> tuple[_Reading, SentMessage | None]:
    """A final source transaction's message: "sent" with it when the receipt
    shows exactly the CCIP message the intent recorded, "refused" otherwise."""
    receipt = tx.receipt
    assert receipt is not None
    evidence = tx.evidence
    sent = _sent_messages(route, receipt)
    expected = [
        m
        for m in sent
        if m.sender == route.leg.sender
        and m.receiver == route.recipient
        and m.dest_selector == route.dest_selector
        and m.source_selector == route.source_selector
        and m.amount == route.amount_units
        and len(m.tokens) == 1
        and m.tokens[0].dest_token == route.dest_token_address
    ]
    if len(sent) != 1 or len(expected) != 1:
        return (
            _Reading(
                "refused",
                evidence
                | {
                    "problem": "the receipt does not show exactly the CCIP message the intent "
                    "recorded",
                    "messages": [m.evidence() for m in sent],
                },
                receipt.tx_hash,
            ),
            None,
        )
    return _Reading("sent", evidence, receipt.tx_hash), expected[0]


async def _destination(
    rpc: EvmRpc, route: _Route, from_block: int, sent: SentMessage, source: _Reading
) -> _Reading:
    """The lane's OffRamp's ExecutionStateChanged for the message (by the lane's
    version): SUCCESS final at the destination's depth is the end; FAILURE
    waits for a manual execution; none yet waits for the executing network."""
    topics = execution_state_topics(route.ccip_version, sent)
    logs = await rpc.get_logs(
        address=route.dest_offramp, topics=topics, from_block=from_block, to_block="latest"
    )
    changes = [
        ExecutionStateChanged.from_log(
            log.topics, log.data, log.tx_hash, log.block_number, log.log_index
        )
        for log in logs
        if not log.removed
    ]
    evidence = (
        source.evidence
        | sent.evidence()
        | {
            "source_chain": route.leg.chain_key,
            "dest_chain": route.dest_chain_key,
            "executions": [c.evidence() for c in changes],
        }
    )
    success = [c for c in changes if c.state == SUCCESS]
    if success:
        done = success[0]
        head = await rpc.head(evm_tx.HEAD_MAX_AGE_FRACTION * route.dest_block_time_s)
        depth = head - (done.block_number or head)
        if depth < route.dest_finality_depth:
            wait = route.dest_block_time_s * (route.dest_finality_depth - depth)
            return _Reading("mined", evidence | {"ccip_state": "SUCCESS"}, source.tx_hash, wait)
        return _Reading(
            "executed",
            evidence | {"ccip_state": "SUCCESS", "dest_tx": done.tx_hash},
            source.tx_hash,
        )
    if changes:
        return _Reading(
            "stranded",
            evidence | {"ccip_state": "FAILURE", "dest_tx": changes[-1].tx_hash},
            source.tx_hash,
            STRANDED_RETRY_S,
        )
    return _Reading("sent", evidence | {"ccip_state": "SENT"}, source.tx_hash, None)
