"""Chainlink CCIP on real chains and the local ones: the ABI codec the `ccip`
executor, the `ccip_stranded_reaper` and the local executing network
(qtg_world.ccip) share. The deployment of the local double (contracts/:
CcipRouter, CcipOnRamp and CcipOffRamp for v1.6, a v1.5 lane), its keys and
the Router's allowance are the world's (qtg_world.chains.ccip).

The codec speaks the real interfaces (@chainlink/contracts-ccip 1.6.2 and
v1.5's EVM2EVM ramps): Router ``ccipSend`` / ``getFee`` with a token-only
message (GenericExtraArgsV2, gas limit 0, out of order); the v1.6 OnRamp's
``CCIPMessageSent`` and OffRamp's ``ExecutionStateChanged``,
``getExecutionState(sourceChainSelector, sequenceNumber)``, ``commit`` and
``execute`` (the DON's) and ``manuallyExecute(ExecutionReport[],
GasLimitOverride[][])`` (selector 0x5e7bb008) of a one-message report: its
leaf hashed as Internal._hash(Any2EVMRampMessage, metadataHash) with the
lane's metadata (Any2EVMMessageHashV1, both selectors, keccak256 of the
abi-encoded OnRamp), a one-leaf merkle tree (no proofs, proofFlagBits 0), and
per token the pool's offchain data: for USDC over CCTP (Chainlink's
USDCTokenPool) abi.encode(MessageAndAttestation{message, attestation}) of the
burn's CCTP message as the attestation service returns it. v1.5 lanes:
``CCIPSendRequested(EVM2EVMMessage)`` of the lane's EVM2EVMOnRamp and
``ExecutionStateChanged(sequenceNumber, messageId, state, returnData)`` of its
EVM2EVMOffRamp, read by the observer (no manual execution of v1.5 here).

The ccip_stranded_reaper's keeper account (KEEPER_KEY) is a key of the
treasury's keystore: on the local chains, ``keystore/ccip-keeper.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eth_abi.abi import decode, encode
from eth_utils.crypto import keccak

from qtg_runner.chains.evm import eip1559_transaction, normalize_address

if TYPE_CHECKING:
    from qtg_runner.chains.cctp_client import IrisClient

__all__ = [
    "CCIP_MESSAGE_SENT_TOPIC",
    "CCIP_SEND_REQUESTED_TOPIC",
    "EXECUTION_STATE_CHANGED_TOPIC",
    "EXECUTION_STATE_CHANGED_V1_5_TOPIC",
    "EXTRA_ARGS_V2_TAG",
    "FAILURE",
    "GENERIC_EXTRA_ARGS_V2_TAG",
    "KEEPER_KEY",
    "KEEPER_SIGNER_ENV",
    "MANUALLY_EXECUTE_SELECTOR",
    "SUCCESS",
    "TOKEN_ONLY_GAS_LIMIT",
    "UNTOUCHED",
    "VERSIONS",
    "ExecutionStateChanged",
    "SentMessage",
    "UsdcPayload",
    "abi_address",
    "ccip_send_calldata",
    "ccip_transaction",
    "commit_calldata",
    "execute_calldata",
    "execution_state_calldata",
    "extra_args",
    "fee_with_margin",
    "get_fee_calldata",
    "manually_execute_calldata",
    "match_attested",
    "merkle_root_calldata",
    "next_sequence_calldata",
    "usdc_token_data",
]

VERSIONS = ("1.5", "1.6")
"""The CCIP versions whose events the engine reads (a lane's ``version``)."""

KEEPER_KEY = "ccip-keeper"
"""The keystore name of the ccip_stranded_reaper's account on the local chains:
it signs manual executions (gas only, it holds no tokens), never a treasury
account, so the engine's nonces of treasury accounts are not touched."""

KEEPER_SIGNER_ENV = "QTG_CCIP_KEEPER_SIGNER"
"""The signer id of the reaper's keeper account (default ``keystore:ccip-keeper``)."""

EXTRA_ARGS_V2_TAG = bytes.fromhex("181dcf10")
GENERIC_EXTRA_ARGS_V2_TAG = EXTRA_ARGS_V2_TAG
"""Client.GENERIC_EXTRA_ARGS_V2_TAG (the same bytes as EVM_EXTRA_ARGS_V2_TAG)."""
EVM_EXTRA_ARGS_V1_TAG = bytes.fromhex("97a657c9")
TOKEN_ONLY_GAS_LIMIT = 0
"""The gas limit of a token-only message: no receiver callback runs on the
destination (the OffRamp skips it when data is empty and the gas limit 0),
so nothing is paid for destination gas that no call uses."""
DEFAULT_GAS_LIMIT = 200_000
"""The gas limit of a message with empty extraArgs (the OnRamp's default)."""

UNTOUCHED, IN_PROGRESS, SUCCESS, FAILURE = 0, 1, 2, 3
STATE_NAMES = {0: "UNTOUCHED", 1: "IN_PROGRESS", 2: "SUCCESS", 3: "FAILURE"}

# -- the ABI types (the public v1.6 Internal.sol / Client.sol / OffRamp.sol) -------------

_EVM2ANY = "(bytes,bytes,(address,uint256)[],address,bytes)"
_HEADER = "(bytes32,uint64,uint64,uint64,uint64)"
_SENT_TOKEN = "(address,bytes,bytes,uint256,bytes)"
_RAMP_SENT = f"({_HEADER},address,bytes,bytes,bytes,address,uint256,uint256,{_SENT_TOKEN}[])"
_ANY2EVM_TOKEN = "(bytes,address,uint32,bytes,uint256)"
_ANY2EVM = f"({_HEADER},bytes,bytes,address,uint256,{_ANY2EVM_TOKEN}[])"
_EXEC_REPORT = f"(uint64,{_ANY2EVM}[],bytes[][],bytes32[],uint256)"
_GAS_OVERRIDE = "(uint256,uint32[])"
_MERKLE_ROOT = "(uint64,bytes,uint64,uint64,bytes32)"
_PRICE_UPDATES = "((address,uint224)[],(uint64,uint224)[])"
_COMMIT_REPORT = f"({_PRICE_UPDATES},{_MERKLE_ROOT}[],{_MERKLE_ROOT}[],(bytes32,bytes32)[])"
_USDC_PAYLOAD = "(uint64,uint32,uint8,uint256,uint32,bytes32,address,bytes32,uint256,uint32)"
_EVM2EVM = (
    "(uint64,address,address,uint64,uint256,bool,uint64,address,uint256,bytes,"
    "(address,uint256)[],bytes[],bytes32)"
)
_V1_5_SOURCE_TOKEN_DATA = "(bytes,bytes,bytes,uint32)"


def _topic(signature: str) -> str:
    return "0x" + keccak(text=signature).hex()


def _selector(signature: str) -> bytes:
    return keccak(text=signature)[:4]


CCIP_MESSAGE_SENT_TOPIC = _topic(f"CCIPMessageSent(uint64,uint64,{_RAMP_SENT})")
EXECUTION_STATE_CHANGED_TOPIC = _topic(
    "ExecutionStateChanged(uint64,uint64,bytes32,bytes32,uint8,bytes,uint256)"
)
CCIP_SEND_REQUESTED_TOPIC = _topic(f"CCIPSendRequested({_EVM2EVM})")
"""v1.5's EVM2EVMOnRamp."""
EXECUTION_STATE_CHANGED_V1_5_TOPIC = _topic("ExecutionStateChanged(uint64,bytes32,uint8,bytes)")
"""v1.5's EVM2EVMOffRamp."""

_CCIP_SEND = _selector(f"ccipSend(uint64,{_EVM2ANY})")
_GET_FEE = _selector(f"getFee(uint64,{_EVM2ANY})")
_COMMIT = _selector("commit(bytes32[2],bytes,bytes32[],bytes32[],bytes32)")
_EXECUTE = _selector("execute(bytes32[2],bytes)")
_MANUALLY_EXECUTE = _selector(f"manuallyExecute({_EXEC_REPORT}[],{_GAS_OVERRIDE}[][])")
MANUALLY_EXECUTE_SELECTOR = _MANUALLY_EXECUTE
"""0x5e7bb008: OffRamp 1.6's manuallyExecute(ExecutionReport[], GasLimitOverride[][])."""
_GET_EXECUTION_STATE = _selector("getExecutionState(uint64,uint64)")
_GET_EXECUTION_STATE_V1_5 = _selector("getExecutionState(uint64)")
_GET_MERKLE_ROOT = _selector("getMerkleRoot(uint64,bytes32)")
_GET_SOURCE_CHAIN_CONFIG = _selector("getSourceChainConfig(uint64)")

_ANY_2_EVM_MESSAGE_HASH = keccak(text="Any2EVMMessageHashV1")
_EVM_2_ANY_MESSAGE_HASH = keccak(text="EVM2AnyMessageHashV1")
_LEAF_DOMAIN_SEPARATOR = bytes(32)

_CCTP_V2 = 2
"""USDCTokenPool.CCTPVersion.CCTP_V2."""


def abi_address(value: str) -> bytes:
    """An address as one ABI word (32 bytes, left-padded)."""
    return encode(["address"], [normalize_address(value)])


# -- the send --------------------------------------------------------------------


def extra_args(gas_limit: int = TOKEN_ONLY_GAS_LIMIT, allow_out_of_order: bool = True) -> bytes:
    """GenericExtraArgsV2: 0x181dcf10 ‖ abi.encode(uint256 gasLimit, bool
    allowOutOfOrderExecution)."""
    return GENERIC_EXTRA_ARGS_V2_TAG + encode(["uint256", "bool"], [gas_limit, allow_out_of_order])


def parse_extra_args(raw: bytes) -> tuple[int, bool]:
    """(gasLimit, allowOutOfOrderExecution) of an EVM message's extraArgs: empty
    (the defaults), EVMExtraArgsV1 or GenericExtraArgsV2; ValueError otherwise."""
    if not raw:
        return DEFAULT_GAS_LIMIT, False
    if len(raw) == 68 and raw[:4] == GENERIC_EXTRA_ARGS_V2_TAG:
        gas_limit, out_of_order = decode(["uint256", "bool"], raw[4:])
        return int(gas_limit), bool(out_of_order)
    if len(raw) == 36 and raw[:4] == EVM_EXTRA_ARGS_V1_TAG:
        (gas_limit,) = decode(["uint256"], raw[4:])
        return int(gas_limit), False
    raise ValueError("extraArgs are neither EVMExtraArgsV1 nor GenericExtraArgsV2")


def _message(receiver: str, token: str, amount: int, gas_limit: int) -> tuple[Any, ...]:
    return (
        abi_address(receiver),
        b"",
        [(normalize_address(token), amount)],
        "0x" + "00" * 20,
        extra_args(gas_limit),
    )


def ccip_send_calldata(
    dest_selector: int,
    receiver: str,
    token: str,
    amount: int,
    gas_limit: int = TOKEN_ONLY_GAS_LIMIT,
) -> bytes:
    """Router.ccipSend(dest, EVM2AnyMessage) moving ``amount`` of ``token`` to
    ``receiver``: no data, the native coin paying, out of order allowed, the
    token-only gas limit 0 unless told otherwise."""
    return _CCIP_SEND + encode(
        ["uint64", _EVM2ANY], [dest_selector, _message(receiver, token, amount, gas_limit)]
    )


def get_fee_calldata(
    dest_selector: int,
    receiver: str,
    token: str,
    amount: int,
    gas_limit: int = TOKEN_ONLY_GAS_LIMIT,
) -> bytes:
    """Router.getFee for the same message as ``ccip_send_calldata``."""
    return _GET_FEE + encode(
        ["uint64", _EVM2ANY], [dest_selector, _message(receiver, token, amount, gas_limit)]
    )


def fee_with_margin(quote: int, margin_bps: int) -> int:
    """What a send pays for a ``quote`` of Router.getFee: the quote and
    ``margin_bps`` basis points of it, rounded up (ccip_send_tx_problem holds
    the signed value to exactly this), so a fee risen by up to the margin
    between the quote and the send's block is still paid."""
    if quote < 0 or not 0 <= margin_bps <= 10_000:
        raise ValueError("a fee is not negative and a margin from 0 to 10000 basis points")
    return -(-quote * (10_000 + margin_bps) // 10_000)


# -- the messages ----------------------------------------------------------------


@dataclass(frozen=True)
class TokenTransfer:
    """One token of a sent message: on v1.6 an EVM2AnyTokenTransfer, on v1.5
    the message's token amount with its SourceTokenData."""

    source_pool: str
    dest_token: str
    amount: int
    extra_data: bytes
    dest_gas_amount: int


@dataclass(frozen=True)
class UsdcPayload:
    """Chainlink's USDC pool's SourceTokenDataPayload (a token transfer's extraData)."""

    nonce: int
    source_domain: int
    cctp_version: int
    amount: int
    destination_domain: int
    mint_recipient: bytes
    burn_token: str
    destination_caller: bytes
    max_fee: int
    min_finality_threshold: int

    @classmethod
    def decode(cls, raw: bytes) -> UsdcPayload:
        (fields,) = decode([_USDC_PAYLOAD], raw)
        nonce, src, version, amount, dst, recipient, token, caller, max_fee, finality = fields
        return cls(
            int(nonce), int(src), int(version), int(amount), int(dst), bytes(recipient),
            str(token).lower(), bytes(caller), int(max_fee), int(finality),
        )  # fmt: skip


@dataclass(frozen=True)
class SentMessage:
    """A message as its source OnRamp emitted it: v1.6 ``CCIPMessageSent``
    (EVM2AnyRampMessage) or v1.5 ``CCIPSendRequested`` (EVM2EVMMessage)."""

    version: str
    message_id: bytes
    source_selector: int
    dest_selector: int
    sequence_number: int
    nonce: int
    sender: str
    data: bytes
    receiver: str
    gas_limit: int | None
    """The destination's gas limit (the EVM extraArgs'); None where the
    extraArgs are another chain family's."""
    extra_args: bytes
    fee_token: str
    fee_amount: int
    tokens: tuple[TokenTransfer, ...]
    onramp: str
    tx_hash: str
    block_number: int | None
    log_index: int

    @property
    def message_id_hex(self) -> str:
        return "0x" + self.message_id.hex()

    @property
    def amount(self) -> int:
        return sum(t.amount for t in self.tokens)

    @classmethod
    def from_log(
        cls,
        address: str,
        topics: Sequence[str],
        data: bytes,
        tx_hash: str,
        block_number: int | None,
        log_index: int,
    ) -> SentMessage:
        """A v1.6 OnRamp's CCIPMessageSent."""
        if not topics or topics[0].lower() != CCIP_MESSAGE_SENT_TOPIC:
            raise ValueError("not a CCIPMessageSent log")
        (raw,) = decode([_RAMP_SENT], data)
        header, sender, payload, receiver, extra, fee_token, fee_amount, _juels, tokens = raw
        message_id, source, dest, seq, nonce = header
        (receiver_address,) = decode(["address"], bytes(receiver))
        try:
            gas_limit: int | None = parse_extra_args(bytes(extra))[0]
        except ValueError:
            gas_limit = None
        return cls(
            version="1.6",
            message_id=bytes(message_id),
            source_selector=int(source),
            dest_selector=int(dest),
            sequence_number=int(seq),
            nonce=int(nonce),
            sender=str(sender).lower(),
            data=bytes(payload),
            receiver=str(receiver_address).lower(),
            gas_limit=gas_limit,
            extra_args=bytes(extra),
            fee_token=str(fee_token).lower(),
            fee_amount=int(fee_amount),
            tokens=tuple(
                TokenTransfer(
                    str(pool).lower(),
                    str(decode(["address"], bytes(dest_token))[0]).lower(),
                    int(amount),
                    bytes(extra_data),
                    int(decode(["uint32"], bytes(exec_data))[0]) if exec_data else 0,
                )
                for pool, dest_token, extra_data, amount, exec_data in tokens
            ),
            onramp=address.lower(),
            tx_hash=tx_hash.lower(),
            block_number=block_number,
            log_index=log_index,
        )

    @classmethod
    def from_v1_5_log(
        cls,
        address: str,
        topics: Sequence[str],
        data: bytes,
        tx_hash: str,
        block_number: int | None,
        log_index: int,
        dest_selector: int,
    ) -> SentMessage:
        """A v1.5 EVM2EVMOnRamp's CCIPSendRequested; ``dest_selector`` is the
        lane's (a v1.5 OnRamp serves one destination, its message does not
        name it)."""
        if not topics or topics[0].lower() != CCIP_SEND_REQUESTED_TOPIC:
            raise ValueError("not a CCIPSendRequested log")
        (raw,) = decode([_EVM2EVM], data)
        (source, sender, receiver, seq, gas_limit, _strict, nonce, fee_token, fee_amount,
         payload, amounts, source_token_data, message_id) = raw  # fmt: skip
        tokens = []
        for i, (_token, amount) in enumerate(amounts):
            pool, dest_token, extra, dest_gas = "", "", b"", 0
            if i < len(source_token_data):
                try:
                    (fields,) = decode([_V1_5_SOURCE_TOKEN_DATA], bytes(source_token_data[i]))
                    pool = str(decode(["address"], bytes(fields[0]))[0]).lower()
                    dest_token = str(decode(["address"], bytes(fields[1]))[0]).lower()
                    extra, dest_gas = bytes(fields[2]), int(fields[3])
                except Exception:  # a pool's data is its own: then unnamed
                    pass
            tokens.append(TokenTransfer(pool, dest_token, int(amount), extra, dest_gas))
        return cls(
            version="1.5",
            message_id=bytes(message_id),
            source_selector=int(source),
            dest_selector=dest_selector,
            sequence_number=int(seq),
            nonce=int(nonce),
            sender=str(sender).lower(),
            data=bytes(payload),
            receiver=str(receiver).lower(),
            gas_limit=int(gas_limit),
            extra_args=b"",
            fee_token=str(fee_token).lower(),
            fee_amount=int(fee_amount),
            tokens=tuple(tokens),
            onramp=address.lower(),
            tx_hash=tx_hash.lower(),
            block_number=block_number,
            log_index=log_index,
        )

    def computed_id(self) -> bytes:
        """The message id a v1.6 OnRamp derives: Internal._hash(EVM2AnyRampMessage,
        metadataHash), the metadata EVM2AnyMessageHashV1, both selectors and the OnRamp."""
        if self.version != "1.6":
            raise ValueError(f"a v{self.version} message's id is not derived here")
        metadata = keccak(
            encode(
                ["bytes32", "uint64", "uint64", "address"],
                [_EVM_2_ANY_MESSAGE_HASH, self.source_selector, self.dest_selector, self.onramp],
            )
        )
        fixed = keccak(
            encode(
                ["address", "uint64", "uint64", "address", "uint256"],
                [self.sender, self.sequence_number, self.nonce, self.fee_token, self.fee_amount],
            )
        )
        tokens = encode(
            [f"{_SENT_TOKEN}[]"],
            [
                [
                    (t.source_pool, abi_address(t.dest_token), t.extra_data, t.amount,
                     encode(["uint32"], [t.dest_gas_amount]))
                    for t in self.tokens
                ]
            ],
        )  # fmt: skip
        return keccak(
            _LEAF_DOMAIN_SEPARATOR
            + metadata
            + fixed
            + keccak(abi_address(self.receiver))
            + keccak(self.data)
            + keccak(tokens)
            + keccak(self.extra_args)
        )

    def any2evm(self) -> tuple[Any, ...]:
        """The Any2EVMRampMessage a v1.6 OffRamp executes for this message."""
        if self.version != "1.6" or self.gas_limit is None:
            raise ValueError(
                f"a v{self.version} message (gas limit {self.gas_limit}) is not a v1.6 "
                "Any2EVMRampMessage"
            )
        return (
            (
                self.message_id,
                self.source_selector,
                self.dest_selector,
                self.sequence_number,
                self.nonce,
            ),
            abi_address(self.sender),
            self.data,
            self.receiver,
            self.gas_limit,
            [
                (
                    abi_address(t.source_pool),
                    t.dest_token,
                    t.dest_gas_amount,
                    t.extra_data,
                    t.amount,
                )
                for t in self.tokens
            ],
        )

    def leaf(self) -> bytes:
        """The OffRamp's leaf of this message: Internal._hash(Any2EVMRampMessage,
        metadataHash) with the lane's metadata hash (Any2EVMMessageHashV1, the
        source and destination selectors, keccak256(abi.encode(onRamp)))."""
        message = self.any2evm()
        header = message[0]
        assert self.gas_limit is not None
        metadata = keccak(
            encode(
                ["bytes32", "uint64", "uint64", "bytes32"],
                [
                    _ANY_2_EVM_MESSAGE_HASH,
                    self.source_selector,
                    self.dest_selector,
                    keccak(abi_address(self.onramp)),
                ],
            )
        )
        fixed = keccak(
            encode(
                ["bytes32", "address", "uint64", "uint256", "uint64"],
                [header[0], self.receiver, self.sequence_number, self.gas_limit, self.nonce],
            )
        )
        return keccak(
            _LEAF_DOMAIN_SEPARATOR
            + metadata
            + fixed
            + keccak(message[1])
            + keccak(self.data)
            + keccak(encode([f"{_ANY2EVM_TOKEN}[]"], [message[5]]))
        )

    def usdc_payloads(self) -> list[UsdcPayload | None]:
        """Each token's USDC pool payload, where its extraData is one."""
        payloads: list[UsdcPayload | None] = []
        for token in self.tokens:
            try:
                payloads.append(UsdcPayload.decode(token.extra_data))
            except Exception:  # another pool's extraData
                payloads.append(None)
        return payloads

    def evidence(self) -> dict[str, Any]:
        return {
            "ccip_version": self.version,
            "message_id": self.message_id_hex,
            "source_selector": str(self.source_selector),
            "dest_selector": str(self.dest_selector),
            "sequence_number": self.sequence_number,
            "sender": self.sender,
            "receiver": self.receiver,
            "gas_limit": self.gas_limit,
            "fee_paid": str(self.fee_amount),
            "amount_units": str(self.amount),
            "source_tx": self.tx_hash,
            "onramp": self.onramp,
        }


@dataclass(frozen=True)
class ExecutionStateChanged:
    """An OffRamp's ExecutionStateChanged, decoded: v1.6 (source selector,
    sequence number and message id indexed; the leaf and the gas used in the
    data) or v1.5 (sequence number and message id indexed)."""

    source_selector: int | None
    sequence_number: int
    message_id: str
    message_hash: str | None
    state: int
    return_data: bytes
    gas_used: int | None
    tx_hash: str
    block_number: int | None
    log_index: int

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.state, str(self.state))

    @classmethod
    def from_log(
        cls,
        topics: Sequence[str],
        data: bytes,
        tx_hash: str,
        block_number: int | None,
        log_index: int,
    ) -> ExecutionStateChanged:
        first = topics[0].lower() if topics else ""
        if len(topics) == 4 and first == EXECUTION_STATE_CHANGED_TOPIC:
            message_hash, state, return_data, gas_used = decode(
                ["bytes32", "uint8", "bytes", "uint256"], data
            )
            return cls(
                source_selector=int(topics[1], 16),
                sequence_number=int(topics[2], 16),
                message_id=topics[3].lower(),
                message_hash="0x" + bytes(message_hash).hex(),
                state=int(state),
                return_data=bytes(return_data),
                gas_used=int(gas_used),
                tx_hash=tx_hash.lower(),
                block_number=block_number,
                log_index=log_index,
            )
        if len(topics) == 3 and first == EXECUTION_STATE_CHANGED_V1_5_TOPIC:
            state, return_data = decode(["uint8", "bytes"], data)
            return cls(
                source_selector=None,
                sequence_number=int(topics[1], 16),
                message_id=topics[2].lower(),
                message_hash=None,
                state=int(state),
                return_data=bytes(return_data),
                gas_used=None,
                tx_hash=tx_hash.lower(),
                block_number=block_number,
                log_index=log_index,
            )
        raise ValueError("not an ExecutionStateChanged log")

    def evidence(self) -> dict[str, Any]:
        return {
            "state": self.state_name,
            "dest_tx": self.tx_hash,
            "dest_block": self.block_number,
            "return_data": "0x" + self.return_data.hex(),
            "gas_used": self.gas_used,
        }


def execution_state_topics(version: str, message: SentMessage) -> list[str]:
    """The topics of the destination's ExecutionStateChanged of ``message``
    on a lane of ``version``."""
    seq = "0x" + message.sequence_number.to_bytes(32, "big").hex()
    if version == "1.5":
        return [EXECUTION_STATE_CHANGED_V1_5_TOPIC, seq, message.message_id_hex]
    return [
        EXECUTION_STATE_CHANGED_TOPIC,
        "0x" + message.source_selector.to_bytes(32, "big").hex(),
        seq,
        message.message_id_hex,
    ]


# -- the OffRamp -----------------------------------------------------------------


def execution_state_calldata(message: SentMessage) -> bytes:
    """The destination's getExecutionState of ``message``: v1.6
    (sourceChainSelector, sequenceNumber), v1.5 (sequenceNumber)."""
    if message.version == "1.5":
        return _GET_EXECUTION_STATE_V1_5 + encode(["uint64"], [message.sequence_number])
    return _GET_EXECUTION_STATE + encode(
        ["uint64", "uint64"], [message.source_selector, message.sequence_number]
    )


def merkle_root_calldata(source_selector: int, root: bytes) -> bytes:
    """OffRamp.getMerkleRoot(source, root): its commit timestamp, 0 when not committed."""
    return _GET_MERKLE_ROOT + encode(["uint64", "bytes32"], [source_selector, root])


def next_sequence_calldata(source_selector: int) -> bytes:
    """OffRamp.getSourceChainConfig(source): its minSeqNr is the next root's first."""
    return _GET_SOURCE_CHAIN_CONFIG + encode(["uint64"], [source_selector])


def decode_next_sequence(answer: bytes) -> int:
    (config,) = decode(["(address,bool,uint64,bool,bytes)"], answer)
    return int(config[2])


def usdc_token_data(cctp_message: bytes, attestation: bytes) -> bytes:
    """The USDC pool's offchain token data: abi.encode(MessageAndAttestation)."""
    return encode(["(bytes,bytes)"], [(cctp_message, attestation)])


def match_attested(
    payload: UsdcPayload, attested: Sequence[Mapping[str, Any]]
) -> tuple[bytes, bytes] | None:
    """The (message, attestation) of the attestation service's answer for the
    source transaction that is this transfer's burn (its domains, recipient,
    caller, token, amount, finality and maxFee as the pool's payload says), or
    None where none is complete."""
    from qtg_runner.chains.cctp import BurnBody, CctpMessage

    for entry in attested:
        if entry.get("status") != "complete":
            continue
        try:
            raw = bytes.fromhex(str(entry.get("message", ""))[2:])
            attestation = bytes.fromhex(str(entry.get("attestation", ""))[2:])
            message = CctpMessage.decode(raw)
            body = BurnBody.decode(message.body)
        except ValueError:
            continue
        if (
            message.source_domain == payload.source_domain
            and message.destination_domain == payload.destination_domain
            and message.destination_caller == payload.destination_caller
            and message.min_finality_threshold == payload.min_finality_threshold
            and body.mint_recipient == payload.mint_recipient
            and body.burn_token[12:].hex() == payload.burn_token[2:]
            and body.amount == payload.amount
            and body.max_fee == payload.max_fee
            and attestation
        ):
            return raw, attestation
    return None


async def attested_token_data(iris: IrisClient, message: SentMessage) -> list[bytes] | None:
    """Each token's USDC pool data for the OffRamp (the burn's CCTP message and
    its attestation, as ``iris`` answers for the send's transaction; empty for
    another pool's token), or None while any burn is not attested."""
    from qtg_runner.chains.cctp_client import IrisStatus

    data: list[bytes] = []
    for payload in message.usdc_payloads():
        if payload is None:
            data.append(b"")
            continue
        answer = await iris.messages(payload.source_domain, message.tx_hash)
        if answer.status is not IrisStatus.COMPLETE:
            return None
        attested = match_attested(payload, answer.messages)
        if attested is None:
            return None
        data.append(usdc_token_data(*attested))
    return data


def _report(message: SentMessage, token_data: Sequence[bytes]) -> tuple[Any, ...]:
    """ExecutionReport of ``message`` alone: a one-leaf tree, so no proofs and
    proofFlagBits 0; one offchain datum per token."""
    if len(token_data) != len(message.tokens):
        raise ValueError("one offchain token datum per token of the message")
    return (message.source_selector, [message.any2evm()], [list(token_data)], [], 0)


def manually_execute_calldata(message: SentMessage, token_data: Sequence[bytes]) -> bytes:
    """OffRamp.manuallyExecute([report of ``message``], [[no overrides]]):
    anyone's, for a message that FAILED."""
    overrides = [[(0, [0] * len(message.tokens))]]
    return _MANUALLY_EXECUTE + encode(
        [f"{_EXEC_REPORT}[]", f"{_GAS_OVERRIDE}[][]"], [[_report(message, token_data)], overrides]
    )


def _context(sequence: int) -> list[bytes]:
    return [bytes(32), sequence.to_bytes(32, "big")]


def commit_calldata(message: SentMessage) -> bytes:
    """OffRamp.commit of one unblessed root: ``message``'s leaf alone, its
    sequence number both ends of the interval (the DON's)."""
    root = (
        message.source_selector,
        abi_address(message.onramp),
        message.sequence_number,
        message.sequence_number,
        message.leaf(),
    )
    report = encode([_COMMIT_REPORT], [(([], []), [], [root], [])])
    return _COMMIT + encode(
        ["bytes32[2]", "bytes", "bytes32[]", "bytes32[]", "bytes32"],
        [_context(message.sequence_number), report, [], [], bytes(32)],
    )


def execute_calldata(message: SentMessage, token_data: Sequence[bytes]) -> bytes:
    """OffRamp.execute(reportContext, abi.encode([report of ``message``])): the DON's."""
    report = encode([f"{_EXEC_REPORT}[]"], [[_report(message, token_data)]])
    return _EXECUTE + encode(["bytes32[2]", "bytes"], [_context(message.sequence_number), report])


def ccip_transaction(
    chain_id: int, to: str, data: bytes, value: int, nonce: int, fees: Any, gas: int
) -> dict[str, Any]:
    """An EIP-1559 transaction calling ``to`` with ``data`` and ``value`` wei (a
    ccipSend pays its fee so), as eth-account (Signer.sign_transaction) takes it:
    the EVM module's one builder, in the argument order of CCIP's callers."""
    return eip1559_transaction(chain_id, nonce, to, value, data, gas, fees)
