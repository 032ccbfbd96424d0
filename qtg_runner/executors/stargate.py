"""The `stargate` executor: USDC from a treasury account on one EVM chain to a
treasury account or an allow-listed address on another, through a Stargate v2
pool (taxi: a message at once; bus: a ticket, batched with others until the
bus is driven).

What it may sign is the registry's word, read again before every signature
(stargate_send_route, in SQL): both chains and their Stargate rows (endpoint
id, pool; the source's TokenMessaging), the token on both, the sender (a
treasury account of the source), a recipient that is a treasury account or
allow-listed on the DESTINATION, the amount and the least the recipient must
receive, in base units.

The pool pulls the amount from the sender: the allowance is given once, up
front, by the admin's deploy step (qtg_world.chains.stargate.approve_pool on
the local chains), not by the executor. One node is one recorded transaction
at one engine-allocated nonce; an approval per send would be a second signed
transaction the node's intent cannot hold. Preflight refuses (retryable) while
the allowance is short, so nothing is signed that would revert.

    preflight  the route; the sender holds the amount and has allowed the
               pool at least as much; the pool's quote (quoteOFT) is within
               its limit and gives at least the minimum.
    prepare    quoteOFT and quoteSend (the native fee); ``send(SendParam,
               MessagingFee, refundAddress)`` with the fee as value, oftCmd
               empty (taxi) or one zero byte (bus), minAmountLD the route's
               minimum; EIP-1559 fees under the source's caps; signed at the
               greater of the chain's pending count and the engine's next
               nonce. The payload keeps the quote and the destination's head
               block (where its logs are read from).
    submit     evm_tx.broadcast: the recorded bytes, "already known"
               and a mined "nonce too low" are the same transaction.
    observe    the source receipt, final, with exactly one OFTSent from the
               sender for the amount (the pool emits it); the guid from it
               (taxi) or from the BusDriven covering the receipt's BusRode
               ticket (bus: the OFTSent's guid is empty; TokenMessaging, the
               registry's other Stargate contract, emits BusRode in the send
               and BusDriven when the bus is driven); then the destination pool's
               OFTReceived for that guid, recipient and amount, final:
               COMPLETED with the evidence. UnreceivedTokenCached for it: the
               payout is cached, PENDING (retryReceiveToken is permissionless:
               the world's relayer retries it; the node completes on the
               OFTReceived that follows). Source reverted and final: FAILED.
               Not mined: evm_tx.read_recorded (rebroadcast of the identical bytes,
               or UNKNOWN when a foreign transaction took the nonce).
    recover    the same reading from the recorded hashes and the guid
               evidence on both chains: delivered -> COMPLETED, reverted ->
               FAILED, sent or in flight -> IN_FLIGHT, never prepared ->
               NOT_SUBMITTED, a foreign nonce -> STILL_UNKNOWN.
    health     evm_tx.EvmAccess.chains_health, per registered chain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from eth_abi.abi import decode, encode
from eth_utils.crypto import keccak

from qtg_runner.chains.evm import allowance, balance_of, normalize_address
from qtg_runner.chains.evm_rpc import EvmRpc, Log, Receipt
from qtg_runner.db import procs
from qtg_runner.executors import evm_tx
from qtg_runner.executors.base import (
    ExecutorError,
    JsonObject,
    NodeWork,
    Prepared,
    config_schema,
    route_row,
)


def _selector(signature: str) -> bytes:
    return keccak(text=signature)[:4]


def _topic(signature: str) -> str:
    return "0x" + keccak(text=signature).hex()


SEND_PARAM = "(uint32,bytes32,uint256,uint256,bytes,bytes,bytes)"
SEND = _selector(f"send({SEND_PARAM},(uint256,uint256),address)")
QUOTE_OFT = _selector(f"quoteOFT({SEND_PARAM})")
QUOTE_SEND = _selector(f"quoteSend({SEND_PARAM},bool)")

OFT_SENT_TOPIC = _topic("OFTSent(bytes32,uint32,address,uint256,uint256)")
OFT_RECEIVED_TOPIC = _topic("OFTReceived(bytes32,uint32,address,uint256)")
BUS_RODE_TOPIC = _topic("BusRode(uint32,uint72,uint80,bytes)")
BUS_DRIVEN_TOPIC = _topic("BusDriven(uint32,uint72,uint8,bytes32)")
UNRECEIVED_TOPIC = _topic("UnreceivedTokenCached(bytes32,uint8,uint32,address,uint256,bytes)")

GAS_HEADROOM = 1.25
CACHED_RETRY_S = 30.0
"""How often a node whose payout is cached looks again."""


def _word(address: str) -> str:
    """An address as a 32-byte topic."""
    return "0x" + "00" * 12 + normalize_address(address)[2:]


def _send_param(route: procs.StargateRoute) -> tuple[Any, ...]:
    """SendParam: to the recipient as bytes32, no options or compose message;
    oftCmd empty (taxi) or one zero byte (bus)."""
    return (
        int(route.dst_eid),
        bytes(12) + bytes.fromhex(route.recipient[2:]),
        int(route.amount_units),
        int(route.min_amount_units),
        b"",
        b"",
        b"\x00" if route.mode == "bus" else b"",
    )


@dataclass(frozen=True)
class _Quote:
    max_amount: int
    amount_received: int
    native_fee: int


class StargateExecutor(evm_tx.EvmExecutor):
    key = "stargate"
    landed = "delivered"
    sends = "Stargate send"
    description = (
        "USDC across chains through a Stargate v2 pool (taxi or bus) from a treasury account to "
        "a treasury account or an allow-listed address on the destination; complete on the "
        "destination's OFTReceived"
    )
    node_config_schema = config_schema(
        ("source", "destination", "from", "to"),
        optional=("token",),
        own={
            "mode": {"enum": ["taxi", "bus"]},
            "min_amount": {"type": "string", "pattern": "^[0-9]{1,30}(\\.[0-9]{1,30})?$"},
            "max_slippage_bps": {"type": "integer", "minimum": 0, "maximum": 10000},
        },
    )

    # -- the registry's word ----------------------------------------------------------

    async def _sg_route(self, work: NodeWork) -> procs.StargateRoute:
        return await route_row(self._pool, procs.stargate_send_route(work.node_id))

    async def _quote(self, rpc: EvmRpc, row: procs.StargateRoute) -> _Quote:
        param = _send_param(row)
        raw = await rpc.call(row.src_pool, QUOTE_OFT + encode([SEND_PARAM], [param]))
        limit, _details, receipt = decode(
            ["(uint256,uint256)", "(int256,string)[]", "(uint256,uint256)"], raw
        )
        raw = await rpc.call(
            row.src_pool, QUOTE_SEND + encode([SEND_PARAM, "bool"], [param, False])
        )
        native_fee, _lz = decode(["uint256", "uint256"], raw)
        quote = _Quote(int(limit[1]), int(receipt[1]), int(native_fee))
        if quote.max_amount < int(row.amount_units):
            raise ExecutorError(
                f"the pool on {row.chain_key} may send at most {quote.max_amount} base units to "
                f"{row.dst_chain_key} now, the send is {row.amount_units}",
                retryable=True,
                retry_after=evm_tx.RETRY_LATER_S,
            )
        if quote.amount_received < int(row.min_amount_units):
            raise ExecutorError(
                f"the pool quotes {quote.amount_received} base units received for "
                f"{row.amount_units} sent, below the node's minimum {row.min_amount_units}",
                retryable=False,
            )
        return quote

    # -- the protocol ---------------------------------------------------------------

    async def preflight(self, work: NodeWork) -> None:
        row = await self._sg_route(work)
        source = evm_tx.ChainLeg.from_row(row)
        rpc = self._evm.rpc(row.chain_key, row.rpc_url_env)
        recent = evm_tx.shared_for(source)
        async with evm_tx.chain_errors(source.chain_key):
            held, allowed = await evm_tx.read_together(
                source,
                rpc,
                balance_of(rpc, row.token_address, row.sender, max_age_s=recent),
                allowance(rpc, row.token_address, row.sender, row.src_pool, max_age_s=recent),
            )
            evm_tx.require_tokens(source, held, int(row.amount_units), row.token, "send")
            if allowed < int(row.amount_units):
                raise ExecutorError(
                    f"{row.sender} allows the Stargate pool {row.src_pool} on {row.chain_key} "
                    f"{allowed} base units of {row.token}, the send needs {row.amount_units}: "
                    "the admin approves the pool for the treasury account",
                    retryable=True,
                    retry_after=evm_tx.RETRY_LATER_S,
                )
            await self._quote(rpc, row)

    async def prepare(self, work: NodeWork) -> Prepared:
        row = await self._sg_route(work)
        source = evm_tx.ChainLeg.from_row(row)
        rpc = self._evm.rpc(row.chain_key, row.rpc_url_env)
        dst_rpc = self._evm.rpc(row.dst_chain_key, row.dst_rpc_url_env)
        signer = await self._evm.signer(source)
        async with evm_tx.chain_errors(source.chain_key):
            quote = await self._quote(rpc, row)
            data = SEND + encode(
                [SEND_PARAM, "(uint256,uint256)", "address"],
                [_send_param(row), (quote.native_fee, 0), row.sender],
            )
            chain_next, fees = await evm_tx.pending_nonce_and_fees(rpc, source)
            estimate = await rpc.estimate_gas(row.sender, row.src_pool, data, quote.native_fee)
            gas = math.ceil(estimate * GAS_HEADROOM)
            funds = await rpc.balance(row.sender, max_age_s=evm_tx.shared_for(source))
            dst_head = await dst_rpc.block_number()
        evm_tx.require_funds(
            source,
            funds,
            gas * fees.max_fee_per_gas + quote.native_fee,
            "the send needs up to {} (gas and the Stargate fee)",
        )
        payload = source.payload() | {
            "protocol": "stargate",
            "token": row.token,
            "token_address": row.token_address,
            "recipient": row.recipient,
            # strings: a uint256 is beyond what a JSON number holds exactly
            "amount_units": str(row.amount_units),
            **evm_tx.gas_payload(gas, fees),
            "mode": row.mode,
            "pool": row.src_pool,
            "token_messaging": row.src_token_messaging,
            "src_eid": row.src_eid,
            "min_amount_units": str(row.min_amount_units),
            "quoted_received_units": str(quote.amount_received),
            "native_fee": str(quote.native_fee),
            "calldata": "0x" + data.hex(),
            "dst_chain_key": row.dst_chain_key,
            "dst_rpc_url_env": row.dst_rpc_url_env,
            "dst_finality_depth": row.dst_finality_depth,
            "dst_block_time_s": row.dst_block_time_ms / 1000,
            "dst_eid": row.dst_eid,
            "dst_pool": row.dst_pool,
            "dst_from_block": dst_head,
        }
        nonce = max(chain_next, row.next_nonce or 0)
        return await evm_tx.signed(signer, source, _recorded_send(payload), nonce, payload)

    def recorded_send(self, prepared: Prepared) -> evm_tx.Send:
        assert prepared.payload is not None
        return _recorded_send(prepared.payload)

    # -- reading both chains ----------------------------------------------------------

    async def read(self, work: NodeWork) -> evm_tx.TxReading:
        """The chains' word on the node's send: the source transaction from its
        recorded hashes, then the message on the destination by its guid."""
        payload = evm_tx.recorded_payload(work)
        source = evm_tx.ChainLeg.from_payload(payload)
        rpc = self._evm.leg_rpc(source)
        reading = await evm_tx.read_recorded(rpc, source, work)
        if reading.status != "final":
            return reading
        assert reading.receipt is not None
        async with evm_tx.chain_errors(source.chain_key):
            return await self._sent(rpc, source, payload, reading, reading.receipt)

    async def _sent(
        self,
        rpc: EvmRpc,
        source: evm_tx.ChainLeg,
        payload: JsonObject,
        reading: evm_tx.TxReading,
        receipt: Receipt,
    ) -> evm_tx.TxReading:
        evidence: JsonObject = reading.evidence | {"mode": payload["mode"]}
        amount_units = int(payload["amount_units"])
        pool = normalize_address(str(payload["pool"]))
        sent = [
            log
            for log in receipt.logs
            if log.address == pool
            and log.topics[:1] == (OFT_SENT_TOPIC,)
            and len(log.topics) == 3
            and log.topics[2] == _word(source.sender)
        ]
        amounts = [decode(["uint32", "uint256", "uint256"], log.data) for log in sent]
        if len(sent) != 1 or int(amounts[0][1]) != amount_units:
            return evm_tx.TxReading(
                "refused",
                evidence
                | {
                    "problem": "the receipt does not show exactly the OFTSent the intent recorded",
                    "oft_sent": [
                        {"guid": log.topics[1], "amount_sent": str(a[1])}
                        for log, a in zip(sent, amounts, strict=True)
                    ],
                },
                receipt.tx_hash,
            )
        received = int(amounts[0][2])
        evidence |= {"amount_sent": str(amounts[0][1]), "amount_received": str(received)}
        guid = sent[0].topics[1]
        if payload["mode"] == "bus":
            messaging = normalize_address(str(payload["token_messaging"]))
            ticket = _ticket(receipt, messaging)
            if ticket is None:
                return evm_tx.TxReading(
                    "refused",
                    evidence | {"problem": "a bus send without a BusRode ticket"},
                    receipt.tx_hash,
                )
            evidence["ticket_id"] = ticket
            driven = await _bus_driven(rpc, messaging, int(payload["dst_eid"]), ticket, receipt)
            if driven is None:
                wait = max(source.block_time_s * 5, 5.0)
                return evm_tx.TxReading(
                    "sent", evidence | {"waiting_for": "the bus"}, receipt.tx_hash, wait
                )
            guid, evidence["bus"] = driven
        evidence["guid"] = guid
        return await self._destination(payload, evidence, guid, received, receipt.tx_hash)

    async def _destination(
        self, payload: JsonObject, evidence: JsonObject, guid: str, amount: int, tx_hash: str
    ) -> evm_tx.TxReading:
        dst_key = str(payload["dst_chain_key"])
        rpc = self._evm.rpc(dst_key, str(payload["dst_rpc_url_env"]))
        pool = normalize_address(str(payload["dst_pool"]))
        recipient = str(payload["recipient"])
        wait = float(payload["dst_block_time_s"]) * 2
        from_block = int(payload["dst_from_block"])
        # one read for both answers: the pool's payouts (OFTReceived, this
        # guid's to the recipient among them) and its cached ones (whose guid
        # and receiver are not indexed)
        logs = await rpc.get_logs(
            address=pool, topics=[[OFT_RECEIVED_TOPIC, UNRECEIVED_TOPIC]], from_block=from_block
        )
        paid = (OFT_RECEIVED_TOPIC, guid.lower(), _word(recipient))
        for log in logs:
            if log.topics[:3] != paid:
                continue
            _src_eid, value = decode(["uint32", "uint256"], log.data)
            if int(value) != amount or log.block_number is None:
                continue
            head = await rpc.head(evm_tx.HEAD_MAX_AGE_FRACTION * float(payload["dst_block_time_s"]))
            depth = head - log.block_number
            received: JsonObject = {
                "chain_key": dst_key,
                "tx_hash": log.tx_hash,
                "block_number": log.block_number,
                "log_index": log.log_index,
                "to": recipient,
                "amount": str(value),
                "confirmations": depth + 1,
            }
            if depth < int(payload["dst_finality_depth"]):
                return evm_tx.TxReading(
                    "sent", evidence | {"oft_received": received}, tx_hash, wait
                )
            return evm_tx.TxReading("delivered", evidence | {"oft_received": received}, tx_hash)
        cached = [_unreceived(log) for log in logs if log.topics[:1] == (UNRECEIVED_TOPIC,)]
        mine = [c for c in cached if c["guid"] == guid and c["receiver"] == recipient]
        if mine:
            return evm_tx.TxReading(
                "cached",
                evidence | {"payout_cached": mine[0]},
                tx_hash,
                max(CACHED_RETRY_S, wait),
            )
        return evm_tx.TxReading("sent", evidence | {"waiting_for": "delivery"}, tx_hash, wait)


def _recorded_send(payload: JsonObject) -> evm_tx.Send:
    """The pool's send as the payload records it, its calldata and fee."""
    return evm_tx.Send(
        str(payload["pool"]),
        bytes.fromhex(str(payload["calldata"])[2:]),
        int(payload["native_fee"]),
    )


def _ticket(receipt: Receipt, messaging: str) -> int | None:
    """The ticket of the receipt's bus ride (TokenMessaging's BusRode)."""
    for log in receipt.logs:
        if log.address == messaging and log.topics[:1] == (BUS_RODE_TOPIC,):
            _dst, ticket, _fare, _passenger = decode(
                ["uint32", "uint72", "uint80", "bytes"], log.data
            )
            return int(ticket)
    return None


async def _bus_driven(
    rpc: EvmRpc, messaging: str, dst_eid: int, ticket: int, receipt: Receipt
) -> tuple[str, JsonObject] | None:
    """The guid of the bus that carried ``ticket``, and what BusDriven (on
    TokenMessaging) said."""
    logs = await rpc.get_logs(
        address=messaging, topics=[BUS_DRIVEN_TOPIC], from_block=receipt.block_number
    )
    for log in logs:
        dst, start, count, guid = decode(["uint32", "uint72", "uint8", "bytes32"], log.data)
        if int(dst) == dst_eid and int(start) <= ticket < int(start) + int(count):
            return "0x" + bytes(guid).hex(), {
                "tx_hash": log.tx_hash,
                "block_number": log.block_number,
                "start_ticket_id": int(start),
                "passengers": int(count),
            }
    return None


def _unreceived(log: Log) -> JsonObject:
    guid, index, src_eid, receiver, amount, _compose = decode(
        ["bytes32", "uint8", "uint32", "address", "uint256", "bytes"], log.data
    )
    return {
        "guid": "0x" + bytes(guid).hex(),
        "index": int(index),
        "src_eid": int(src_eid),
        "receiver": normalize_address(str(receiver)),
        "amount": str(amount),
        "tx_hash": log.tx_hash,
        "block_number": log.block_number,
    }
