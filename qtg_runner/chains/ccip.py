"""The Chainlink CCIP local double on the local chains: CcipRouter, CcipOnRamp
and CcipOffRamp (contracts/, the token pools' roles folded into the ramps:
burn on the source, mint on the destination) deployed and wired on every chain
by `start_chains`, so `qtg chains up` and the test fixtures get the same; and
the ABI codec the executing network (qtg_runner.world.ccip), the `ccip`
executor and the `ccip_stranded_reaper` share.

On each chain: the Router with the chain's selector, an OnRamp (the Router's
for every other chain, its USDC a destination token there) and an OffRamp
(every other chain's OnRamp a source; the executing network's key its only
transmitter), both ramps minters of the chain's MockUSDC. The addresses go into
the chain's ``contracts`` in state.json (``CcipRouter``, ``CcipOnRamp``,
``CcipOffRamp``); ``ccip_selector`` is the chain's selector.

The executing network's key ("DON") and the ccip_stranded_reaper's keeper
account are keys of our own in the chains' encrypted keystore
(``keystore/ccip-don.json``, ``keystore/ccip-keeper.json``), funded with ETH
for gas on every chain. ``approve_router`` gives the Router a bounded standing allowance
of the treasury accounts' USDC (``ROUTER_ALLOWANCE``), as a treasury's setup
step: the `ccip` executor signs the send alone (see its module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_abi.abi import decode, encode
from eth_utils.crypto import keccak

from qtg_runner.chains.keys import LocalKey, ensure_treasury_keys
from qtg_runner.chains.local import ChainError, RunningChain, load_artifact, rpc

__all__ = [
    "CCIP_CONTRACTS",
    "CCIP_MESSAGE_SENT_TOPIC",
    "DEFAULT_GAS_LIMIT",
    "DON_KEY",
    "EXECUTION_STATE_CHANGED_TOPIC",
    "EXTRA_ARGS_V2_TAG",
    "FAILURE",
    "KEEPER_KEY",
    "KEEPER_SIGNER_ENV",
    "LOCAL_SELECTOR_BASE",
    "ROUTER_ALLOWANCE",
    "SUCCESS",
    "ExecutionStateChanged",
    "SentMessage",
    "approve_router",
    "ccip_selector",
    "ccip_send_calldata",
    "ccip_transaction",
    "deploy_ccip",
    "ensure_don_key",
    "execute_calldata",
    "extra_args",
    "get_fee_calldata",
    "manually_execute_calldata",
]

CCIP_CONTRACTS = ("CcipRouter", "CcipOnRamp", "CcipOffRamp")

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

EXTRA_ARGS_V2_TAG = bytes.fromhex("181dcf10")
DEFAULT_GAS_LIMIT = 200_000

UNTOUCHED, IN_PROGRESS, SUCCESS, FAILURE = 0, 1, 2, 3
STATE_NAMES = {0: "UNTOUCHED", 1: "IN_PROGRESS", 2: "SUCCESS", 3: "FAILURE"}

# -- the ABI types (contracts/CcipTypes.sol, the public v1.6 layout) -------------

_EVM2ANY = "(bytes,bytes,(address,uint256)[],address,bytes)"
_HEADER = "(bytes32,uint64,uint64,uint64,uint64)"
_SENT_TOKEN = "(address,bytes,bytes,uint256,bytes)"
_RAMP_SENT = f"({_HEADER},address,bytes,bytes,bytes,address,uint256,uint256,{_SENT_TOKEN}[])"
_ANY2EVM = f"({_HEADER},bytes,bytes,address,uint256,(bytes,address,uint32,bytes,uint256)[])"

CCIP_MESSAGE_SENT_TOPIC = "0x" + keccak(text=f"CCIPMessageSent(uint64,uint64,{_RAMP_SENT})").hex()
EXECUTION_STATE_CHANGED_TOPIC = (
    "0x"
    + keccak(text="ExecutionStateChanged(uint64,uint64,bytes32,bytes32,uint8,bytes,uint256)").hex()
)
_CCIP_SEND = keccak(text=f"ccipSend(uint64,{_EVM2ANY})")[:4]
_GET_FEE = keccak(text=f"getFee(uint64,{_EVM2ANY})")[:4]
_EXECUTE = keccak(text=f"execute({_ANY2EVM},uint256)")[:4]
_MANUALLY_EXECUTE = keccak(text=f"manuallyExecute({_ANY2EVM},uint256)")[:4]
_STATE_BY_ID = keccak(text="getExecutionStateById(bytes32)")[:4]


def ccip_selector(chain: RunningChain) -> int:
    """The CCIP chain selector ``chain`` is deployed with."""
    return LOCAL_SELECTOR_BASE + chain.chain_id


def _address(value: str) -> str:
    raw = value.lower()
    if len(raw) != 42 or not raw.startswith("0x"):
        raise ValueError(f"{value!r} is not an address")
    return raw


def extra_args(gas_limit: int = DEFAULT_GAS_LIMIT, allow_out_of_order: bool = True) -> bytes:
    """EVMExtraArgsV2: 0x181dcf10 ‖ abi.encode(uint256 gasLimit, bool allowOutOfOrderExecution)."""
    return EXTRA_ARGS_V2_TAG + encode(["uint256", "bool"], [gas_limit, allow_out_of_order])


def parse_extra_args(raw: bytes) -> tuple[int, bool]:
    """(gasLimit, allowOutOfOrderExecution) of a message's extraArgs (the OnRamp's rule)."""
    if not raw:
        return DEFAULT_GAS_LIMIT, False
    if len(raw) != 68 or raw[:4] != EXTRA_ARGS_V2_TAG:
        raise ValueError("extraArgs are not EVMExtraArgsV2")
    gas_limit, out_of_order = decode(["uint256", "bool"], raw[4:])
    return int(gas_limit), bool(out_of_order)


def _message(receiver: str, token: str, amount: int, gas_limit: int) -> tuple[Any, ...]:
    return (
        encode(["address"], [_address(receiver)]),
        b"",
        [(_address(token), amount)],
        "0x" + "00" * 20,
        extra_args(gas_limit),
    )


def ccip_send_calldata(
    dest_selector: int, receiver: str, token: str, amount: int, gas_limit: int = DEFAULT_GAS_LIMIT
) -> bytes:
    """Router.ccipSend(dest, EVM2AnyMessage) moving ``amount`` of ``token`` to
    ``receiver``, no data, the native coin paying, out of order allowed."""
    return _CCIP_SEND + encode(
        ["uint64", _EVM2ANY], [dest_selector, _message(receiver, token, amount, gas_limit)]
    )


def get_fee_calldata(
    dest_selector: int, receiver: str, token: str, amount: int, gas_limit: int = DEFAULT_GAS_LIMIT
) -> bytes:
    """Router.getFee for the same message as ``ccip_send_calldata``."""
    return _GET_FEE + encode(
        ["uint64", _EVM2ANY], [dest_selector, _message(receiver, token, amount, gas_limit)]
    )


def state_by_id_calldata(message_id: bytes) -> bytes:
    return _STATE_BY_ID + encode(["bytes32"], [message_id])


@dataclass(frozen=True)
class TokenTransfer:
    source_pool: str
    dest_token: str
    amount: int
    dest_exec_data: bytes


@dataclass(frozen=True)
class SentMessage:
    """A CCIPMessageSent of an OnRamp, decoded (EVM2AnyRampMessage)."""

    message_id: bytes
    source_selector: int
    dest_selector: int
    sequence_number: int
    nonce: int
    sender: str
    data: bytes
    receiver: str
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
        if not topics or topics[0].lower() != CCIP_MESSAGE_SENT_TOPIC:
            raise ValueError("not a CCIPMessageSent log")
        (raw,) = decode([_RAMP_SENT], data)
        header, sender, payload, receiver, extra, fee_token, fee_amount, _juels, tokens = raw
        message_id, source, dest, seq, nonce = header
        (receiver_address,) = decode(["address"], bytes(receiver))
        return cls(
            message_id=bytes(message_id),
            source_selector=int(source),
            dest_selector=int(dest),
            sequence_number=int(seq),
            nonce=int(nonce),
            sender=str(sender).lower(),
            data=bytes(payload),
            receiver=str(receiver_address).lower(),
            extra_args=bytes(extra),
            fee_token=str(fee_token).lower(),
            fee_amount=int(fee_amount),
            tokens=tuple(
                TokenTransfer(
                    str(pool).lower(),
                    str(decode(["address"], bytes(dest_token))[0]).lower(),
                    int(amount),
                    bytes(exec_data),
                )
                for pool, dest_token, _extra, amount, exec_data in tokens
            ),
            onramp=address.lower(),
            tx_hash=tx_hash.lower(),
            block_number=block_number,
            log_index=log_index,
        )

    def any2evm(self) -> tuple[Any, ...]:
        """The Any2EVMRampMessage an OffRamp executes for this message."""
        gas_limit, _ = parse_extra_args(self.extra_args)
        return (
            (
                self.message_id,
                self.source_selector,
                self.dest_selector,
                self.sequence_number,
                self.nonce,
            ),
            encode(["address"], [self.sender]),
            self.data,
            self.receiver,
            gas_limit,
            [
                (
                    encode(["address"], [t.source_pool]),
                    t.dest_token,
                    int(decode(["uint32"], t.dest_exec_data)[0]) if t.dest_exec_data else 0,
                    b"",
                    t.amount,
                )
                for t in self.tokens
            ],
        )

    def evidence(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id_hex,
            "source_selector": str(self.source_selector),
            "dest_selector": str(self.dest_selector),
            "sequence_number": self.sequence_number,
            "sender": self.sender,
            "receiver": self.receiver,
            "amount_units": str(self.amount),
            "source_tx": self.tx_hash,
            "onramp": self.onramp,
        }


def execute_calldata(message: SentMessage, gas_limit_override: int = 0) -> bytes:
    """OffRamp.execute(message, gasLimitOverride): the transmitter's."""
    return _EXECUTE + encode([_ANY2EVM, "uint256"], [message.any2evm(), gas_limit_override])


def manually_execute_calldata(message: SentMessage, gas_limit_override: int = 0) -> bytes:
    """OffRamp.manuallyExecute(message, gasLimitOverride): anyone's, for a FAILED message."""
    return _MANUALLY_EXECUTE + encode(
        [_ANY2EVM, "uint256"], [message.any2evm(), gas_limit_override]
    )


@dataclass(frozen=True)
class ExecutionStateChanged:
    """An ExecutionStateChanged of an OffRamp, decoded."""

    source_selector: int
    sequence_number: int
    message_id: str
    message_hash: str
    state: int
    return_data: bytes
    gas_used: int
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
        if len(topics) != 4 or topics[0].lower() != EXECUTION_STATE_CHANGED_TOPIC:
            raise ValueError("not an ExecutionStateChanged log")
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

    def evidence(self) -> dict[str, Any]:
        return {
            "state": self.state_name,
            "dest_tx": self.tx_hash,
            "dest_block": self.block_number,
            "return_data": "0x" + self.return_data.hex(),
            "gas_used": self.gas_used,
        }


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
    """Deploy and wire the CCIP double on ``chains`` (each already has MockUSDC):
    each round's transactions go out on every chain before any is awaited. The
    addresses go into each ``chain.contracts``."""
    from web3 import HTTPProvider, Web3

    don = ensure_don_key(state_dir, kdf_iterations=kdf_iterations)
    keeper = ensure_treasury_keys(state_dir, (KEEPER_KEY,), kdf_iterations=kdf_iterations)[0]
    w3s = [Web3(HTTPProvider(c.rpc_url, request_kwargs={"timeout": 10})) for c in chains]
    owners = [c.deployer or w3.eth.accounts[0] for c, w3 in zip(chains, w3s, strict=True)]
    arts = {name: load_artifact(name) for name in (*CCIP_CONTRACTS, "MockUSDC")}

    def deploy_round(name: str, args: Any) -> None:
        sent = [
            w3.eth.contract(abi=arts[name]["abi"], bytecode=arts[name]["bytecode"])
            .constructor(*args(c))
            .transact({"from": owner})
            for c, w3, owner in zip(chains, w3s, owners, strict=True)
        ]
        for chain, r in zip(chains, _wait_all(w3s, chains, sent, f"deploying {name}"), strict=True):
            chain.contracts[name] = str(r["contractAddress"])

    cs = Web3.to_checksum_address
    deploy_round("CcipRouter", lambda c: (ccip_selector(c),))
    deploy_round(
        "CcipOnRamp",
        lambda c: (ccip_selector(c), cs(c.contracts["CcipRouter"]), cs(c.contracts["MockUSDC"])),
    )
    deploy_round("CcipOffRamp", lambda c: (ccip_selector(c), cs(c.contracts["MockUSDC"])))

    pending: list[tuple[Any, RunningChain, Any]] = []
    for chain, w3, owner in zip(chains, w3s, owners, strict=True):
        tx: Any = {"from": owner, "gas": 300_000}

        def contract(name: str, c: RunningChain = chain, w: Any = w3) -> Any:
            return w.eth.contract(address=cs(c.contracts[name]), abi=arts[name]["abi"])

        router, onramp, offramp = (contract(n) for n in CCIP_CONTRACTS)
        usdc = contract("MockUSDC")
        calls = [
            usdc.functions.configureMinter(onramp.address, 2**256 - 1),
            usdc.functions.configureMinter(offramp.address, 2**256 - 1),
            offramp.functions.setTransmitter(cs(don.address), True),
        ]
        for other in chains:
            if other is chain:
                continue
            selector = ccip_selector(other)
            calls.append(router.functions.setOnRamp(selector, onramp.address))
            calls.append(onramp.functions.setDestChain(selector, cs(other.contracts["MockUSDC"])))
            calls.append(
                offramp.functions.setSourceChain(selector, cs(other.contracts["CcipOnRamp"]))
            )
        pending.extend((w3, chain, call.transact(tx)) for call in calls)
        for funded in (don, keeper):
            rpc(chain.rpc_url, "anvil_setBalance", [cs(funded.address), hex(DON_GAS)])
    _wait_all(
        [p[0] for p in pending], [p[1] for p in pending], [p[2] for p in pending], "wiring CCIP"
    )


def approve_router(chain: RunningChain, treasury: Sequence[LocalKey]) -> None:
    """Each treasury account's standing allowance of USDC to ``chain``'s Router,
    set to ROUTER_ALLOWANCE where below half of it: bounded, never unlimited.
    Sent as the account through anvil's impersonation (a local chain's setup
    step, before the engine signs for the account, its gas given back so the
    account's ETH is as it was; on a real chain the treasury signs this
    approval once through its own change process)."""
    from web3 import HTTPProvider, Web3

    if "CcipRouter" not in chain.contracts:
        return
    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    router = Web3.to_checksum_address(chain.contracts["CcipRouter"])
    pending = []
    balances: dict[str, int] = {}
    for account in treasury:
        address = Web3.to_checksum_address(account.address)
        if int(usdc.functions.allowance(address, router).call()) >= ROUTER_ALLOWANCE // 2:
            continue
        balances[address] = int(w3.eth.get_balance(address))
        if balances[address] < DON_GAS // 1000:
            rpc(chain.rpc_url, "anvil_setBalance", [address, hex(DON_GAS // 1000)])
        rpc(chain.rpc_url, "anvil_impersonateAccount", [address])
        try:
            pending.append(
                usdc.functions.approve(router, ROUTER_ALLOWANCE).transact(
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
