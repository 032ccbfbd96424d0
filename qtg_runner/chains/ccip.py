"""Chainlink CCIP on the local chains and on real ones: the ABI codec the
`ccip` executor, the `ccip_stranded_reaper` and the local executing network
(qtg_world.ccip) share, and the deployment of the local double
(contracts/, CcipRouter, CcipOnRamp and CcipOffRamp for v1.6) by
`start_chains`, so `qtg chains up` and the test fixtures get the same.

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

On each local chain: the Router with the chain's selector, an OnRamp (the
Router's for every other chain, burning USDC through the chain's CCTP
TokenMessengerV2 as Chainlink's USDC pool does) and an OffRamp (every other
chain's OnRamp a source; the executing network's key its only transmitter;
USDC received through the chain's MessageTransmitterV2). The addresses go
into the chain's ``contracts`` in state.json (``CcipRouter``, ``CcipOnRamp``,
``CcipOffRamp``); ``ccip_selector`` is the chain's selector. A v1.5 lane
(``deploy_v1_5_lane``: a Router of its own, an EVM2EVMOnRamp and an
EVM2EVMOffRamp) is deployed by the tests that need one.

The executing network's key ("DON") and the ccip_stranded_reaper's keeper
account are keys of our own in the chains' encrypted keystore
(``keystore/ccip-don.json``, ``keystore/ccip-keeper.json``), funded with ETH
for gas on every chain. ``approve_router`` gives the Router a bounded standing
allowance of the treasury accounts' USDC (``ROUTER_ALLOWANCE``), as a
treasury's setup step: the `ccip` executor signs the send alone (see its
module).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eth_abi.abi import decode, encode
from eth_utils.crypto import keccak

from qtg_world.chains.keys import LocalKey, ensure_treasury_keys
from qtg_world.chains.local import ChainError, RunningChain, load_artifact, rpc

__all__ = [
    "CCIP_CONTRACTS",
    "CCIP_MESSAGE_SENT_TOPIC",
    "CCIP_SEND_REQUESTED_TOPIC",
    "DON_KEY",
    "EXECUTION_STATE_CHANGED_TOPIC",
    "EXECUTION_STATE_CHANGED_V1_5_TOPIC",
    "EXTRA_ARGS_V2_TAG",
    "FAILURE",
    "GENERIC_EXTRA_ARGS_V2_TAG",
    "KEEPER_KEY",
    "KEEPER_SIGNER_ENV",
    "LOCAL_SELECTOR_BASE",
    "MANUALLY_EXECUTE_SELECTOR",
    "ROUTER_ALLOWANCE",
    "SUCCESS",
    "TOKEN_ONLY_GAS_LIMIT",
    "UNTOUCHED",
    "VERSIONS",
    "ExecutionStateChanged",
    "SentMessage",
    "UsdcPayload",
    "V15Lane",
    "approve_router",
    "ccip_selector",
    "ccip_send_calldata",
    "ccip_transaction",
    "commit_calldata",
    "deploy_ccip",
    "deploy_v1_5_lane",
    "ensure_don_key",
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
    "with_contracts",
]

CCIP_CONTRACTS = ("CcipRouter", "CcipOnRamp", "CcipOffRamp")

VERSIONS = ("1.5", "1.6")
"""The CCIP versions whose events the engine reads (a lane's ``version``)."""

DON_KEY = "ccip-don"
"""The keystore name of the local executing network's transmitter key."""

KEEPER_KEY = "ccip-keeper"
"""The keystore name of the ccip_stranded_reaper's account on the local chains:
it signs manual executions (gas only, it holds no tokens), never a treasury
account, so the engine's nonces of treasury accounts are not touched."""

KEEPER_SIGNER_ENV = "QTG_CCIP_KEEPER_SIGNER"
"""The signer id of the reaper's keeper account (default ``keystore:ccip-keeper``)."""

LOCAL_SELECTOR_BASE = 7_700_000_000_000_000_000
"""A local chain's CCIP selector is this plus its chain id: distinct per chain
(chain ids are), fits a uint64, and far from every real selector (Ethereum's is
5009297550715157269) so a local message is never mistaken for a real one."""

DON_GAS = 1_000 * 10**18
"""ETH (wei) the transmitter key is set to on each chain."""

ROUTER_ALLOWANCE = 10_000_000 * 10**6
"""The Router's standing allowance of each treasury account's USDC: 10M USDC,
topped up again by `qtg chains up` when below half."""

PERMISSIONLESS_EXECUTION_S = 8 * 3600
"""The local OffRamps' permissionLessExecutionThresholdSeconds: a message the
DON never executed may be executed by anyone this long after its commit."""

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


def ccip_selector(chain: RunningChain) -> int:
    """The CCIP chain selector ``chain`` is deployed with."""
    return LOCAL_SELECTOR_BASE + chain.chain_id


def _address(value: str) -> str:
    raw = value.lower()
    if len(raw) != 42 or not raw.startswith("0x"):
        raise ValueError(f"{value!r} is not an address")
    return raw


def _abi_address(value: str) -> bytes:
    return encode(["address"], [_address(value)])


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
        _abi_address(receiver),
        b"",
        [(_address(token), amount)],
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
                    (t.source_pool, _abi_address(t.dest_token), t.extra_data, t.amount,
                     encode(["uint32"], [t.dest_gas_amount]))
                    for t in self.tokens
                ]
            ],
        )  # fmt: skip
        return keccak(
            _LEAF_DOMAIN_SEPARATOR
            + metadata
            + fixed
            + keccak(_abi_address(self.receiver))
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
            _abi_address(self.sender),
            self.data,
            self.receiver,
            self.gas_limit,
            [
                (
                    _abi_address(t.source_pool),
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
                    keccak(_abi_address(self.onramp)),
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
        _abi_address(message.onramp),
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


# -- deployment ------------------------------------------------------------------


def ensure_don_key(state_dir: Path, kdf_iterations: int | None = None) -> LocalKey:
    """The executing network's transmitter key (made where missing, reused where there)."""
    return ensure_treasury_keys(state_dir, (DON_KEY,), kdf_iterations=kdf_iterations)[0]


def _wait_all(
    w3s: Sequence[Any], chains: Sequence[RunningChain], sent: Sequence[Any], what: str
) -> list[Any]:
    receipts = []
    for w3, chain, tx_hash in zip(w3s, chains, sent, strict=True):
        receipt = w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=max(10.0, chain.block_time * 5.0), poll_latency=0.1
        )
        if receipt["status"] != 1:
            raise ChainError(f"{what} on {chain.key} failed: {receipt}")
        receipts.append(receipt)
    return receipts


def deploy_ccip(
    state_dir: Path, chains: Sequence[RunningChain], kdf_iterations: int | None = None
) -> None:
    """Deploy and wire the CCIP v1.6 double on ``chains`` (each already has
    MockUSDC and the CCTP double): each round's transactions go out on every
    chain before any is awaited. The addresses go into each ``chain.contracts``."""
    from web3 import HTTPProvider, Web3

    from qtg_runner.chains.cctp import cctp_domain

    don = ensure_don_key(state_dir, kdf_iterations=kdf_iterations)
    keeper = ensure_treasury_keys(state_dir, (KEEPER_KEY,), kdf_iterations=kdf_iterations)[0]
    w3s = [Web3(HTTPProvider(c.rpc_url, request_kwargs={"timeout": 10})) for c in chains]
    owners = [c.deployer or w3.eth.accounts[0] for c, w3 in zip(chains, w3s, strict=True)]
    arts = {name: load_artifact(name) for name in CCIP_CONTRACTS}
    cs = Web3.to_checksum_address

    def deploy_round(name: str, args: Any) -> None:
        sent = [
            w3.eth.contract(abi=arts[name]["abi"], bytecode=arts[name]["bytecode"])
            .constructor(*args(c))
            .transact({"from": owner})
            for c, w3, owner in zip(chains, w3s, owners, strict=True)
        ]
        for chain, r in zip(chains, _wait_all(w3s, chains, sent, f"deploying {name}"), strict=True):
            chain.contracts[name] = str(r["contractAddress"])

    deploy_round("CcipRouter", lambda c: (ccip_selector(c),))
    deploy_round(
        "CcipOnRamp",
        lambda c: (
            ccip_selector(c),
            cs(c.contracts["CcipRouter"]),
            cs(c.contracts["MockUSDC"]),
            cs(c.contracts["TokenMessengerV2"]),
            cctp_domain(c),
        ),
    )
    deploy_round(
        "CcipOffRamp",
        lambda c: (
            ccip_selector(c),
            cs(c.contracts["MockUSDC"]),
            cs(c.contracts["MessageTransmitterV2"]),
            cctp_domain(c),
            PERMISSIONLESS_EXECUTION_S,
        ),
    )

    pending: list[tuple[Any, RunningChain, Any]] = []
    for chain, w3, owner in zip(chains, w3s, owners, strict=True):
        tx: Any = {"from": owner, "gas": 500_000}

        def contract(name: str, c: RunningChain = chain, w: Any = w3) -> Any:
            return w.eth.contract(address=cs(c.contracts[name]), abi=arts[name]["abi"])

        router, onramp, offramp = (contract(n) for n in CCIP_CONTRACTS)
        others = [other for other in chains if other is not chain]
        calls = [
            offramp.functions.setTransmitter(cs(don.address), True),
            router.functions.applyRampUpdates(
                [(ccip_selector(o), onramp.address) for o in others],
                [],
                [(ccip_selector(o), offramp.address) for o in others],
            ),
            offramp.functions.applySourceChainConfigUpdates(
                [
                    (
                        router.address,
                        ccip_selector(o),
                        True,
                        True,
                        _abi_address(o.contracts["CcipOnRamp"]),
                    )
                    for o in others
                ]
            ),
        ]
        calls.extend(
            onramp.functions.setDestChain(
                ccip_selector(o),
                cs(o.contracts["MockUSDC"]),
                cctp_domain(o),
                cs(o.contracts["CcipOffRamp"]),
            )
            for o in others
        )
        pending.extend((w3, chain, call.transact(tx)) for call in calls)
        for funded in (don, keeper):
            rpc(chain.rpc_url, "anvil_setBalance", [cs(funded.address), hex(DON_GAS)])
    _wait_all(
        [p[0] for p in pending], [p[1] for p in pending], [p[2] for p in pending], "wiring CCIP"
    )


@dataclass(frozen=True)
class V15Lane:
    """A v1.5 lane deployed by ``deploy_v1_5_lane``."""

    router: str
    onramp: str
    offramp: str


def deploy_v1_5_lane(source: RunningChain, dest: RunningChain, transmitter: str) -> V15Lane:
    """Deploy a CCIP v1.5 lane from ``source`` to ``dest`` (each with MockUSDC):
    a Router of its own on the source (the chain's v1.6 Router keeps its
    lanes) routing to a new EVM2EVMOnRamp, and an EVM2EVMOffRamp on the
    destination that ``transmitter`` executes; the ramps are minters of their
    chain's MockUSDC (the lane burns and mints). Sent from each chain's deployer."""
    from web3 import HTTPProvider, Web3

    cs = Web3.to_checksum_address
    src = Web3(HTTPProvider(source.rpc_url, request_kwargs={"timeout": 10}))
    dst = Web3(HTTPProvider(dest.rpc_url, request_kwargs={"timeout": 10}))
    src_owner = source.deployer or src.eth.accounts[0]
    dst_owner = dest.deployer or dst.eth.accounts[0]
    usdc_abi = load_artifact("MockUSDC")["abi"]

    def deployed(w3: Any, chain: RunningChain, owner: str, name: str, *args: Any) -> Any:
        art = load_artifact(name)
        tx_hash = (
            w3.eth.contract(abi=art["abi"], bytecode=art["bytecode"])
            .constructor(*args)
            .transact({"from": owner})
        )
        (receipt,) = _wait_all([w3], [chain], [tx_hash], f"deploying {name}")
        return w3.eth.contract(address=receipt["contractAddress"], abi=art["abi"])

    def done(w3: Any, chain: RunningChain, call: Any, owner: str, what: str) -> None:
        _wait_all([w3], [chain], [call.transact({"from": owner, "gas": 300_000})], what)

    router = deployed(src, source, src_owner, "CcipRouter", ccip_selector(source))
    onramp = deployed(
        src, source, src_owner, "CcipEvm2EvmOnRamp", ccip_selector(source), ccip_selector(dest),
        router.address, cs(source.contracts["MockUSDC"]), cs(dest.contracts["MockUSDC"]),
    )  # fmt: skip
    offramp = deployed(
        dst, dest, dst_owner, "CcipEvm2EvmOffRamp", ccip_selector(source), ccip_selector(dest),
        onramp.address, cs(dest.contracts["MockUSDC"]),
    )  # fmt: skip
    done(
        src, source,
        router.functions.applyRampUpdates([(ccip_selector(dest), onramp.address)], [], []),
        src_owner, "routing the v1.5 lane",
    )  # fmt: skip
    src_usdc = src.eth.contract(address=cs(source.contracts["MockUSDC"]), abi=usdc_abi)
    dst_usdc = dst.eth.contract(address=cs(dest.contracts["MockUSDC"]), abi=usdc_abi)
    any_amount = 2**256 - 1
    ramp_minter = "making the v1.5 ramp a minter"
    make_onramp_minter = src_usdc.functions.configureMinter(onramp.address, any_amount)
    make_offramp_minter = dst_usdc.functions.configureMinter(offramp.address, any_amount)
    done(src, source, make_onramp_minter, src_owner, ramp_minter)
    done(dst, dest, make_offramp_minter, dst_owner, ramp_minter)
    done(dst, dest, offramp.functions.setTransmitter(cs(transmitter), True), dst_owner, "DON")
    return V15Lane(
        str(router.address).lower(), str(onramp.address).lower(), str(offramp.address).lower()
    )


def approve_router(
    chain: RunningChain, treasury: Sequence[LocalKey], router: str | None = None
) -> None:
    """Each treasury account's standing allowance of USDC to ``chain``'s Router
    (or ``router``), set to ROUTER_ALLOWANCE where below half of it: bounded,
    never unlimited. Sent as the account through anvil's impersonation (a
    local chain's setup step, before the engine signs for the account, its gas
    given back so the account's ETH is as it was; on a real chain the
    treasury signs this approval once through its own change process)."""
    from web3 import HTTPProvider, Web3

    if router is None and "CcipRouter" not in chain.contracts:
        return
    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    spender = Web3.to_checksum_address(router or chain.contracts["CcipRouter"])
    pending = []
    balances: dict[str, int] = {}
    for account in treasury:
        address = Web3.to_checksum_address(account.address)
        if int(usdc.functions.allowance(address, spender).call()) >= ROUTER_ALLOWANCE // 2:
            continue
        balances[address] = int(w3.eth.get_balance(address))
        if balances[address] < DON_GAS // 1000:
            rpc(chain.rpc_url, "anvil_setBalance", [address, hex(DON_GAS // 1000)])
        rpc(chain.rpc_url, "anvil_impersonateAccount", [address])
        try:
            pending.append(
                usdc.functions.approve(spender, ROUTER_ALLOWANCE).transact(
                    {"from": address, "gas": 100_000}
                )
            )
        finally:
            rpc(chain.rpc_url, "anvil_stopImpersonatingAccount", [address])
    for tx_hash in pending:
        receipt = w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=max(10.0, chain.block_time * 5.0), poll_latency=0.1
        )
        if receipt["status"] != 1:
            raise ChainError(f"approving the CCIP Router on {chain.key} failed: {receipt}")
    # the approvals' gas given back: each account's ETH as it was before
    for account_address, balance in balances.items():
        rpc(chain.rpc_url, "anvil_setBalance", [account_address, hex(balance)])


def ccip_transaction(
    chain_id: int, to: str, data: bytes, value: int, nonce: int, fees: Any, gas: int
) -> dict[str, Any]:
    """An EIP-1559 transaction calling ``to`` with ``data`` and ``value`` wei (a
    ccipSend pays its fee so), as eth-account (Signer.sign_transaction) takes it."""
    from eth_utils.address import to_checksum_address

    if chain_id <= 0 or nonce < 0 or gas <= 0 or value < 0:
        raise ValueError("a transaction needs chain id > 0, nonce >= 0, gas > 0, value >= 0")
    return {
        "type": 2,
        "chainId": chain_id,
        "nonce": nonce,
        "to": to_checksum_address(_address(to)),
        "value": value,
        "data": "0x" + data.hex(),
        "gas": gas,
        "maxFeePerGas": fees.max_fee_per_gas,
        "maxPriorityFeePerGas": fees.max_priority_fee_per_gas,
        "accessList": [],
    }


def with_contracts(chain: RunningChain, **contracts: str) -> RunningChain:
    """``chain`` with some contracts replaced (a v1.5 lane's Router, say)."""
    return replace(chain, contracts={**chain.contracts, **contracts})
