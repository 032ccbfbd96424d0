"""Every selector, event topic and struct layout our Python encodes or decodes,
against the real protocol's ABI of the version we claim (conformance_abis):

- SELECTORS: each selector or topic that qtg_runner/ computes or writes, with
  the real contract it must match (the list is proved complete by reading every
  module of qtg_runner/);
- the calls our code builds, encoded by our code and decoded by web3 with the
  real ABI, each value back as given;
- the events, emitted as the real ABI lays them out and read back by our
  decoders (and the decode types written inline in the Stargate executor);
- the struct types our code spells out, field by field.

No chain and no database."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conformance_abis import (
    REPO,
    Contract,
    canonical,
    ccip,
    ccip_constant,
    ccip_enum,
    ccip_struct,
    ccip_v1_5,
    circle,
    circle_github,
    event_log,
    layerzero,
    multicall3,
    node_modules,
    plain,
    sample,
    samples,
    stargate,
    usdc,
)
from eth_abi.abi import decode, encode
from eth_utils import to_checksum_address

from qtg_runner.chains.evm_rpc import Log, Receipt

# -- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Hashed:
    """One selector or topic of ours: ``module.name``, and the ``kind`` (function
    or event) named ``entry`` of the real contract it must equal."""

    module: str
    name: str
    kind: str
    contract: Callable[[], Contract]
    entry: str

    def ours(self) -> str:
        value = getattr(importlib.import_module(self.module), self.name)
        return "0x" + value.hex() if isinstance(value, bytes) else str(value).lower()

    def where(self) -> str:
        return where(self.module, self.name)


def where(module: str, name: str) -> str:
    """file:line of ``name``'s assignment in ``module``."""
    path = Path(inspect.getfile(importlib.import_module(module)))
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.match(rf"{re.escape(name)}\b.*=", line):
            return f"{path.relative_to(REPO)}:{number}"
    return f"{path.relative_to(REPO)}: {name} not found"


CCTP, CCIP_ = "qtg_runner.chains.cctp_client", "qtg_runner.chains.ccip"
SG, SG_WORLD = "qtg_runner.executors.stargate", "qtg_world.stargate"
LZ = "qtg_world.chains.layerzero"


def _mt() -> Contract:
    return circle("MessageTransmitterV2")


def _tm() -> Contract:
    return circle("TokenMessengerV2")


def _tm_v2_1() -> Contract:
    return circle_github("TokenMessengerV2 v2.1")


def _pool() -> Contract:
    return stargate("StargatePool")


def _messaging() -> Contract:
    return stargate("TokenMessaging")


def _router() -> Contract:
    return ccip("Router")


def _onramp() -> Contract:
    return ccip("OnRamp")


def _offramp() -> Contract:
    return ccip("OffRamp")


def _onramp_v1_5() -> Contract:
    return ccip_v1_5("evm_2_evm_onramp")


def _offramp_v1_5() -> Contract:
    return ccip_v1_5("evm_2_evm_offramp")


def _endpoint() -> Contract:
    return layerzero("EndpointV2")


SELECTORS = [
    # CCTP v2: Circle's TokenMessengerV2 and MessageTransmitterV2
    Hashed(CCTP, "DEPOSIT_FOR_BURN", "function", _tm, "depositForBurn"),
    Hashed(CCTP, "_RECEIVE_MESSAGE", "function", _mt, "receiveMessage"),
    Hashed(CCTP, "_USED_NONCES", "function", _mt, "usedNonces"),
    Hashed(CCTP, "_MIN_FEE", "function", _tm_v2_1, "minFee"),
    Hashed(CCTP, "DEPOSIT_FOR_BURN_TOPIC", "event", _tm, "DepositForBurn"),
    Hashed(CCTP, "MESSAGE_SENT_TOPIC", "event", _mt, "MessageSent"),
    Hashed(CCTP, "MESSAGE_RECEIVED_TOPIC", "event", _mt, "MessageReceived"),
    Hashed("qtg_world.iris", "MESSAGE_SENT_TOPIC", "event", _mt, "MessageSent"),
    Hashed("qtg_runner.chains.cctp_allowance", "_APPROVE", "function", usdc, "approve"),
    # ERC-20: Circle's USDC
    Hashed("qtg_runner.chains.evm", "ERC20_TRANSFER", "function", usdc, "transfer"),
    Hashed("qtg_runner.chains.evm", "ERC20_BALANCE_OF", "function", usdc, "balanceOf"),
    Hashed("qtg_runner.chains.evm", "ERC20_ALLOWANCE", "function", usdc, "allowance"),
    Hashed("qtg_runner.chains.evm", "TRANSFER_TOPIC", "event", usdc, "Transfer"),
    # Multicall3: the shared reads of a moment (EvmRpc)
    Hashed("qtg_runner.chains.evm_rpc", "_AGGREGATE3", "function", multicall3, "aggregate3"),
    Hashed(
        "qtg_runner.chains.evm_rpc", "_GET_ETH_BALANCE", "function", multicall3, "getEthBalance"
    ),
    # CCIP v1.6: Router, OnRamp, OffRamp
    Hashed(CCIP_, "_CCIP_SEND", "function", _router, "ccipSend"),
    Hashed(CCIP_, "_GET_FEE", "function", _router, "getFee"),
    Hashed(CCIP_, "CCIP_MESSAGE_SENT_TOPIC", "event", _onramp, "CCIPMessageSent"),
    Hashed(CCIP_, "EXECUTION_STATE_CHANGED_TOPIC", "event", _offramp, "ExecutionStateChanged"),
    Hashed(CCIP_, "_COMMIT", "function", _offramp, "commit"),
    Hashed(CCIP_, "_EXECUTE", "function", _offramp, "execute"),
    Hashed(CCIP_, "_MANUALLY_EXECUTE", "function", _offramp, "manuallyExecute"),
    Hashed(CCIP_, "_GET_EXECUTION_STATE", "function", _offramp, "getExecutionState"),
    Hashed(CCIP_, "_GET_MERKLE_ROOT", "function", _offramp, "getMerkleRoot"),
    Hashed(CCIP_, "_GET_SOURCE_CHAIN_CONFIG", "function", _offramp, "getSourceChainConfig"),
    # CCIP v1.5: a lane's EVM2EVMOnRamp and EVM2EVMOffRamp
    Hashed(CCIP_, "CCIP_SEND_REQUESTED_TOPIC", "event", _onramp_v1_5, "CCIPSendRequested"),
    Hashed(
        CCIP_, "EXECUTION_STATE_CHANGED_V1_5_TOPIC", "event", _offramp_v1_5, "ExecutionStateChanged"
    ),
    Hashed(CCIP_, "_GET_EXECUTION_STATE_V1_5", "function", _offramp_v1_5, "getExecutionState"),
    # Stargate v2: the pool, and TokenMessaging's bus events
    Hashed(SG, "SEND", "function", _pool, "send"),
    Hashed(SG, "QUOTE_OFT", "function", _pool, "quoteOFT"),
    Hashed(SG, "QUOTE_SEND", "function", _pool, "quoteSend"),
    Hashed(SG, "OFT_SENT_TOPIC", "event", _pool, "OFTSent"),
    Hashed(SG, "OFT_RECEIVED_TOPIC", "event", _pool, "OFTReceived"),
    Hashed(SG, "BUS_RODE_TOPIC", "event", _messaging, "BusRode"),
    Hashed(SG, "BUS_DRIVEN_TOPIC", "event", _messaging, "BusDriven"),
    Hashed(SG, "UNRECEIVED_TOPIC", "event", _pool, "UnreceivedTokenCached"),
    Hashed(SG_WORLD, "OFT_SENT_TOPIC", "event", _pool, "OFTSent"),
    Hashed(SG_WORLD, "OFT_RECEIVED_TOPIC", "event", _pool, "OFTReceived"),
    Hashed(SG_WORLD, "BUS_RODE_TOPIC", "event", _messaging, "BusRode"),
    Hashed(SG_WORLD, "BUS_DRIVEN_TOPIC", "event", _messaging, "BusDriven"),
    Hashed(SG_WORLD, "UNRECEIVED_TOPIC", "event", _pool, "UnreceivedTokenCached"),
    # a rehearsal's LayerZero deliveries: TokenMessaging names its endpoint
    Hashed("qtg_rehearsal.deliveries", "_ENDPOINT", "function", _messaging, "endpoint"),
    # LayerZero v2: EndpointV2
    Hashed(LZ, "PACKET_SENT_TOPIC", "event", _endpoint, "PacketSent"),
    Hashed(LZ, "COMPOSE_SENT_TOPIC", "event", _endpoint, "ComposeSent"),
]
"""What each hard-coded or computed selector and topic of qtg_runner/ stands for."""

NOT_ABI = {
    (CCIP_, "EXTRA_ARGS_V2_TAG"): "test_extra_args_are_generic_extra_args_v2",
    (CCIP_, "EVM_EXTRA_ARGS_V1_TAG"): "test_extra_args_v1_are_clients",
    (CCIP_, "_ANY_2_EVM_MESSAGE_HASH"): "test_the_message_hash_domains_are_internals",
    (CCIP_, "_EVM_2_ANY_MESSAGE_HASH"): "test_the_message_hash_domains_are_internals",
}
"""Hashed or four-byte constants that are no selector or topic: the test that
checks each against its real constant."""


@pytest.mark.parametrize(
    "item",
    [pytest.param(h, id=f"{h.module.rsplit('.', 1)[1]}.{h.name}") for h in SELECTORS],
)
def test_our_selectors_and_topics_are_the_real_contracts(item: Hashed) -> None:
    contract = item.contract()
    real = (
        contract.selectors(item.entry) if item.kind == "function" else contract.topics(item.entry)
    )
    assert item.ours() in real, (
        f"{item.where()}: {item.name} = {item.ours()}, but {contract}'s {item.kind} "
        f"{item.entry} is {real or 'absent'}"
    )


def _hashed_constants() -> set[tuple[str, str]]:
    """(module, name) of every module-level constant of qtg_runner/ (and
    qtg_world/, the doubles', and qtg_rehearsal/) whose value is
    a keccak of a signature (keccak(text=...), a _selector/_topic helper) or a
    four-byte literal (bytes.fromhex of 8 hex digits)."""
    found = set()
    hashing = re.compile(
        r"keccak\(\s*text=|\b_selector\(|\b_topic\(|fromhex\(\s*\"[0-9a-fA-F]{8}\"\)"
    )
    packages = ("qtg_runner", "qtg_world", "qtg_rehearsal")
    for path in sorted(p for pkg in packages for p in (REPO / pkg).rglob("*.py")):
        source = path.read_text()
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.parse(source).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign) and node.value is not None
                else []
            )
            value = getattr(node, "value", None)
            if value is None or not hashing.search(ast.get_source_segment(source, value) or ""):
                continue
            found |= {(module, t.id) for t in targets if isinstance(t, ast.Name)}
    return found


def test_the_table_holds_every_selector_and_topic_of_qtg_runner() -> None:
    """A new hard-coded selector or topic joins SELECTORS (or NOT_ABI) with the
    real contract it stands for; one gone is taken out."""
    listed = {(h.module, h.name) for h in SELECTORS} | set(NOT_ABI)
    found = _hashed_constants()
    assert not found - listed, f"not in SELECTORS: {sorted(found - listed)}"
    assert not listed - found, f"in SELECTORS, no longer in qtg_runner/: {sorted(listed - found)}"


# -- calls: encoded by our code, decoded with the real ABI ---------------------------------

ADDRESS_A, ADDRESS_B = "0x" + "a1" * 20, "0x" + "b2" * 20
WORD = bytes(range(32))


def decoded(contract: Contract, data: bytes, function: str) -> dict[str, Any]:
    """web3's reading of ``data`` with the real ABI: the function must be ``function``."""
    try:
        func, params = contract.web3().decode_function_input(data)
    except ValueError as exc:  # web3: no function of the ABI has the selector
        raise AssertionError(f"{contract} reads no function 0x{data[:4].hex()}: {exc}") from None
    assert func.fn_name == function, f"{contract} reads {func.fn_name}, not {function}"
    return {k: plain(v) for k, v in params.items()}


def test_deposit_for_burn_is_circles_call() -> None:
    from qtg_runner.chains.cctp_client import deposit_for_burn_calldata

    data = deposit_for_burn_calldata(
        2_500_000, 6, ADDRESS_A, ADDRESS_B, 250, 1000, destination_caller=WORD
    )
    assert decoded(_tm(), data, "depositForBurn") == {
        "amount": 2_500_000,
        "destinationDomain": 6,
        "mintRecipient": "0x" + "00" * 12 + ADDRESS_A[2:],
        "burnToken": ADDRESS_B,
        "destinationCaller": plain(WORD),
        "maxFee": 250,
        "minFinalityThreshold": 1000,
    }


def test_receive_message_and_used_nonces_are_circles_calls() -> None:
    from qtg_runner.chains.cctp_client import _USED_NONCES, receive_message_calldata

    message, attestation = bytes(range(200)), bytes(130)
    assert decoded(_mt(), receive_message_calldata(message, attestation), "receiveMessage") == {
        "message": plain(message),
        "attestation": plain(attestation),
    }
    assert list(decoded(_mt(), _USED_NONCES + WORD, "usedNonces").values()) == [plain(WORD)]
    assert [canonical(o) for o in _mt().one("function", "usedNonces")["outputs"]] == ["uint256"]


def test_erc20_calls_are_usdcs() -> None:
    from qtg_runner.chains.cctp_allowance import approve_calldata
    from qtg_runner.chains.evm import transfer_calldata

    token = usdc()
    assert decoded(token, transfer_calldata(ADDRESS_A, 7), "transfer") == {
        "to": ADDRESS_A,
        "value": 7,
    }
    assert decoded(token, approve_calldata(ADDRESS_B, 9), "approve") == {
        "spender": ADDRESS_B,
        "value": 9,
    }


def test_ccip_send_and_get_fee_are_the_routers_calls() -> None:
    from qtg_runner.chains.ccip import ccip_send_calldata, extra_args, get_fee_calldata

    message = (
        plain(encode(["address"], [ADDRESS_A])),
        "0x",
        ((ADDRESS_B, 1_000_000),),
        "0x" + "00" * 20,
        plain(extra_args(300_000)),
    )
    for build, function in ((ccip_send_calldata, "ccipSend"), (get_fee_calldata, "getFee")):
        data = build(16015286601757825753, ADDRESS_A, ADDRESS_B, 1_000_000, 300_000)
        assert decoded(_router(), data, function) == {
            "destinationChainSelector": 16015286601757825753,
            "message": message,
        }


def _sent_message(**change: Any) -> Any:
    from qtg_runner.chains.ccip import SentMessage, TokenTransfer

    fields: dict[str, Any] = {
        "version": "1.6",
        "message_id": WORD,
        "source_selector": 5009297550715157269,
        "dest_selector": 4949039107694359620,
        "sequence_number": 12,
        "nonce": 0,
        "sender": ADDRESS_A,
        "data": b"",
        "receiver": ADDRESS_B,
        "gas_limit": 0,
        "extra_args": bytes.fromhex("181dcf10") + encode(["uint256", "bool"], [0, True]),
        "fee_token": "0x" + "00" * 20,
        "fee_amount": 10**15,
        "tokens": (TokenTransfer("0x" + "c3" * 20, "0x" + "d4" * 20, 5, b"\x01\x02", 9),),
        "onramp": "0x" + "e5" * 20,
        "tx_hash": "0x" + "f6" * 32,
        "block_number": 1,
        "log_index": 0,
    }
    return SentMessage(**(fields | change))


def _abi_word(address: str) -> str:
    return plain(encode(["address"], [address]))


def _report(message: Any, token_data: list[bytes]) -> tuple[Any, ...]:
    """The ExecutionReport of ``message`` alone, as the real ABI reads it back."""
    [token] = message.tokens
    any2evm = (
        (plain(message.message_id), message.source_selector, message.dest_selector,
         message.sequence_number, message.nonce),
        _abi_word(message.sender),
        plain(message.data),
        message.receiver,
        message.gas_limit,
        ((_abi_word(token.source_pool), token.dest_token, token.dest_gas_amount,
          plain(token.extra_data), token.amount),),
    )  # fmt: skip
    return (message.source_selector, (any2evm,), (tuple(plain(d) for d in token_data),), (), 0)


def test_manual_execution_is_the_offramps_call() -> None:
    """manuallyExecute([the message's one-leaf report], [[no overrides]])."""
    from qtg_runner.chains.ccip import manually_execute_calldata

    message, token_data = _sent_message(), [b"attested"]
    params = decoded(_offramp(), manually_execute_calldata(message, token_data), "manuallyExecute")
    assert list(params.values()) == [(_report(message, token_data),), (((0, (0,)),),)]


def test_execute_is_the_offramps_call() -> None:
    """execute(reportContext, abi.encode(ExecutionReport[])): the report read
    with the real manuallyExecute's ExecutionReport type."""
    from qtg_runner.chains.ccip import execute_calldata

    message, token_data = _sent_message(), [b"attested"]
    context, report = decoded(_offramp(), execute_calldata(message, token_data), "execute").values()
    assert context == (plain(bytes(32)), plain(message.sequence_number.to_bytes(32, "big")))
    reports = _offramp().one("function", "manuallyExecute")["inputs"][0]
    assert plain(decode([canonical(reports)], bytes.fromhex(report[2:]))) == (
        (_report(message, token_data),),
    )


def _commit_report_type() -> str:
    """OffRamp.sol's CommitReport, its parts as the real ABI spells them."""
    fields = ccip_struct("offRamp/OffRamp.sol", "CommitReport")
    assert fields == [
        ("PriceUpdates", "priceUpdates"),
        ("MerkleRoot[]", "blessedMerkleRoots"),
        ("MerkleRoot[]", "unblessedMerkleRoots"),
        ("Signature[]", "rmnSignatures"),
    ]
    accepted = {p["name"]: p for p in _offramp().one("event", "CommitReportAccepted")["inputs"]}
    [signatures] = [
        p
        for p in ccip("RMNRemote").one("function", "verify")["inputs"]
        if p["name"] == "signatures"
    ]
    return (
        f"({canonical(accepted['priceUpdates'])},{canonical(accepted['blessedMerkleRoots'])},"
        f"{canonical(accepted['unblessedMerkleRoots'])},{canonical(signatures)})"
    )


def test_commit_is_the_offramps_call() -> None:
    """commit of one unblessed root, the message's leaf, its sequence number
    both ends: the report read with OffRamp.sol's CommitReport."""
    from qtg_runner.chains.ccip import commit_calldata

    message = _sent_message()
    params = decoded(_offramp(), commit_calldata(message), "commit")
    context, report, rs, ss, raw_vs = params.values()
    assert context == (plain(bytes(32)), plain(message.sequence_number.to_bytes(32, "big")))
    assert (rs, ss, raw_vs) == ((), (), plain(bytes(32)))
    root = (
        message.source_selector,
        _abi_word(message.onramp),
        message.sequence_number,
        message.sequence_number,
        plain(message.leaf()),
    )
    assert plain(decode([_commit_report_type()], bytes.fromhex(report[2:]))) == (
        (((), ()), (), (root,), ()),
    )


def test_the_offramp_reads_are_the_offramps_calls_and_answers() -> None:
    """getExecutionState (v1.6 and v1.5), getMerkleRoot, getSourceChainConfig,
    and getSourceChainConfig's answer as decode_next_sequence reads it."""
    from qtg_runner.chains.ccip import (
        decode_next_sequence,
        execution_state_calldata,
        merkle_root_calldata,
        next_sequence_calldata,
    )

    message = _sent_message()
    state = decoded(_offramp(), execution_state_calldata(message), "getExecutionState")
    assert list(state.values()) == [message.source_selector, message.sequence_number]
    v1_5 = execution_state_calldata(_sent_message(version="1.5"))
    assert list(decoded(_offramp_v1_5(), v1_5, "getExecutionState").values()) == [
        message.sequence_number
    ]
    root = decoded(_offramp(), merkle_root_calldata(11, WORD), "getMerkleRoot")
    assert list(root.values()) == [11, plain(WORD)]
    config = decoded(_offramp(), next_sequence_calldata(11), "getSourceChainConfig")
    assert list(config.values()) == [11]
    outputs = _offramp().one("function", "getSourceChainConfig")["outputs"]
    assert [c["name"] for c in outputs[0]["components"]][2] == "minSeqNr"
    answer = [sample(p, i + 1) for i, p in enumerate(outputs)]
    raw = encode([canonical(p) for p in outputs], answer)
    assert decode_next_sequence(raw) == answer[0][2]


def _stargate_route(mode: str) -> Any:
    return SimpleNamespace(
        dst_eid=30184,
        recipient=ADDRESS_A,
        amount_units=1_000_000,
        min_amount_units=999_000,
        mode=mode,
        sender=ADDRESS_B,
    )


def _resolved(module: Any, node: ast.expr) -> Any:
    """A literal list of types as written, names looked up in ``module``."""
    if isinstance(node, ast.List):
        return [_resolved(module, e) for e in node.elts]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return getattr(module, node.id)
    raise ValueError(ast.dump(node))


def inline_types(module_name: str, function: str, call: str) -> list[list[str]]:
    """The type lists written as the first argument of each ``call(...)`` inside
    ``function`` of a module (how the Stargate executor encodes and decodes)."""
    module = importlib.import_module(module_name)
    tree = ast.parse(inspect.getsource(module))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Call)
                    and isinstance(sub.func, ast.Name)
                    and sub.func.id == call
                    and sub.args
                    and isinstance(sub.args[0], ast.List)
                ):
                    found.append(_resolved(module, sub.args[0]))
    assert found, f"{module_name}.{function} has no {call}([...], ...)"
    return found


@pytest.mark.parametrize("mode", ["taxi", "bus"])
def test_stargate_send_is_the_pools_call(mode: str) -> None:
    """prepare's send: SEND ‖ encode(its types, (SendParam, MessagingFee, refund))."""
    from qtg_runner.executors import stargate as executor

    [types] = [t for t in inline_types(SG, "prepare", "encode") if len(t) == 3]
    route = _stargate_route(mode)
    data = executor.SEND + encode(types, [executor._send_param(route), (123, 0), ADDRESS_B])
    assert decoded(_pool(), data, "send") == {
        "_sendParam": (
            30184,
            "0x" + "00" * 12 + ADDRESS_A[2:],
            1_000_000,
            999_000,
            "0x",
            "0x",
            "0x00" if mode == "bus" else "0x",
        ),
        "_fee": (123, 0),
        "_refundAddress": ADDRESS_B,
    }


def test_stargate_quotes_are_the_pools_calls_and_answers() -> None:
    """quoteOFT and quoteSend: our calls as the pool reads them, and the pool's
    answers as our types read them."""
    from qtg_runner.executors import stargate as executor

    param = executor._send_param(_stargate_route("taxi"))
    oft = decoded(_pool(), executor.QUOTE_OFT + encode([executor.SEND_PARAM], [param]), "quoteOFT")
    assert list(oft.values()) == [plain(param)]
    send_call = executor.QUOTE_SEND + encode([executor.SEND_PARAM, "bool"], [param, False])
    assert list(decoded(_pool(), send_call, "quoteSend").values()) == [plain(param), False]
    ours = inline_types(SG, "_quote", "decode")
    for function, our_types in zip(("quoteOFT", "quoteSend"), ours, strict=True):
        round_trip(_pool().one("function", function)["outputs"], our_types)


def round_trip(real: list[dict[str, Any]], our_types: list[str]) -> None:
    """Values of the real parameters, encoded as the real ABI lays them out,
    read back with our types: every leaf value in its place."""
    values = [sample(p, i + 1) for i, p in enumerate(real)]
    got = decode(our_types, encode([canonical(p) for p in real], values))
    assert flat(plain(got)) == flat(plain(values)), (
        f"ours {our_types} read {[canonical(p) for p in real]} wrongly"
    )


def flat(value: Any) -> list[Any]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in flat(v)]
    return [value]


# -- events: emitted as the real ABI lays them out, read by our decoders -----------------------


def _log(contract: Contract, event: str, values: dict[str, Any], address: str = ADDRESS_A) -> Log:
    topics, data = event_log(contract.one("event", event), values)
    return Log(address, tuple(topics), data, 3, 100, "0x" + "ab" * 32)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def test_deposit_for_burn_and_message_received_read_circles_events() -> None:
    from qtg_runner.chains.cctp_client import decode_deposit_for_burn, decode_message_received

    for contract, event, decoder in (
        (_tm(), "DepositForBurn", decode_deposit_for_burn),
        (_mt(), "MessageReceived", decode_message_received),
    ):
        values = samples(contract.one("event", event))
        ours = decoder(_log(contract, event, values))
        assert ours is not None, f"{decoder.__name__} does not recognise Circle's {event}"
        kept = {snake(k): plain(v) for k, v in values.items() if hasattr(ours, snake(k))}
        assert kept == {k: plain(getattr(ours, k)) for k in kept}
        assert len(kept) >= len(values) - 1, f"{decoder.__name__} keeps only {sorted(kept)}"


def test_ccip_message_sent_reads_the_onramps_event() -> None:
    from qtg_runner.chains.ccip import SentMessage, extra_args

    entry = _onramp().one("event", "CCIPMessageSent")
    values = samples(entry)
    message = list(values["message"])
    header = message[0]
    message[3] = encode(["address"], [ADDRESS_B])  # receiver: abi.encode(address)
    token = list(message[8][0])
    token[1] = encode(["address"], [ADDRESS_A])  # destTokenAddress: abi.encode(address)
    token[4] = encode(["uint32"], [90_000])  # destExecData: abi.encode(uint32 destGasAmount)
    message[8] = [tuple(token)]
    message[4] = extra_args(250_000, True)  # GenericExtraArgsV2
    values["message"] = tuple(message)
    log = _log(_onramp(), "CCIPMessageSent", values)
    ours = SentMessage.from_log(log.address, log.topics, log.data, log.tx_hash, 1, 0)
    assert (ours.version, ours.gas_limit) == ("1.6", 250_000)
    assert (ours.message_id, ours.source_selector, ours.dest_selector) == header[:3]
    assert (ours.sequence_number, ours.nonce) == header[3:]
    assert (ours.sender, ours.receiver, ours.data) == (message[1].lower(), ADDRESS_B, message[2])
    assert (ours.extra_args, ours.fee_token, ours.fee_amount) == (
        message[4],
        message[5].lower(),
        message[6],
    )
    [ours_token] = ours.tokens
    assert (ours_token.source_pool, ours_token.dest_token, ours_token.amount) == (
        token[0].lower(),
        ADDRESS_A,
        token[3],
    )
    assert (ours_token.extra_data, ours_token.dest_gas_amount) == (token[2], 90_000)


def test_ccip_send_requested_reads_the_v1_5_onramps_event() -> None:
    """CCIPSendRequested(EVM2EVMMessage) of a v1.5 EVM2EVMOnRamp, each token's
    sourceTokenData an Internal.SourceTokenData."""
    from qtg_runner.chains.ccip import _V1_5_SOURCE_TOKEN_DATA, SentMessage

    source_token = ccip_struct("Internal.sol", "SourceTokenData")
    assert "(" + ",".join(t for t, _ in source_token) + ")" == _V1_5_SOURCE_TOKEN_DATA
    entry = _onramp_v1_5().one("event", "CCIPSendRequested")
    values = samples(entry)
    fields = [c["name"] for c in entry["inputs"][0]["components"]]
    message = dict(zip(fields, values["message"], strict=True))
    message["tokenAmounts"] = message["tokenAmounts"][:1]
    message["sourceTokenData"] = [
        encode(
            [_V1_5_SOURCE_TOKEN_DATA],
            [(encode(["address"], [ADDRESS_A]), encode(["address"], [ADDRESS_B]), b"\x07", 90_000)],
        )
    ]
    values["message"] = tuple(message.values())
    log = _log(_onramp_v1_5(), "CCIPSendRequested", values)
    ours = SentMessage.from_v1_5_log(log.address, log.topics, log.data, log.tx_hash, 1, 0, 77)
    assert ours.version == "1.5"
    assert (ours.message_id, ours.source_selector, ours.dest_selector) == (
        message["messageId"],
        message["sourceChainSelector"],
        77,
    )
    assert (ours.sequence_number, ours.nonce, ours.gas_limit) == (
        message["sequenceNumber"],
        message["nonce"],
        message["gasLimit"],
    )
    assert (ours.sender, ours.receiver, ours.data) == (
        message["sender"].lower(),
        message["receiver"].lower(),
        message["data"],
    )
    assert (ours.fee_token, ours.fee_amount) == (
        message["feeToken"].lower(),
        message["feeTokenAmount"],
    )
    [ours_token] = ours.tokens
    assert (ours_token.source_pool, ours_token.dest_token, ours_token.amount) == (
        ADDRESS_A,
        ADDRESS_B,
        message["tokenAmounts"][0][1],
    )
    assert (ours_token.extra_data, ours_token.dest_gas_amount) == (b"\x07", 90_000)


def test_execution_state_changed_reads_the_offramps_event() -> None:
    from qtg_runner.chains.ccip import ExecutionStateChanged

    values = samples(_offramp().one("event", "ExecutionStateChanged"))
    log = _log(_offramp(), "ExecutionStateChanged", values)
    ours = ExecutionStateChanged.from_log(log.topics, log.data, log.tx_hash, 1, 0)
    assert {snake(k): plain(v) for k, v in values.items()} == {
        "source_chain_selector": ours.source_selector,
        "sequence_number": ours.sequence_number,
        "message_id": ours.message_id,
        "message_hash": ours.message_hash,
        "state": ours.state,
        "return_data": plain(ours.return_data),
        "gas_used": ours.gas_used,
    }


def test_execution_state_changed_reads_the_v1_5_offramps_event() -> None:
    from qtg_runner.chains.ccip import ExecutionStateChanged

    values = samples(_offramp_v1_5().one("event", "ExecutionStateChanged"))
    log = _log(_offramp_v1_5(), "ExecutionStateChanged", values)
    ours = ExecutionStateChanged.from_log(log.topics, log.data, log.tx_hash, 1, 0)
    assert {snake(k): plain(v) for k, v in values.items()} == {
        "sequence_number": ours.sequence_number,
        "message_id": ours.message_id,
        "state": ours.state,
        "return_data": plain(ours.return_data),
    }
    assert (ours.source_selector, ours.message_hash, ours.gas_used) == (None, None, None)


@pytest.mark.parametrize("version", ["1.6", "1.5"])
def test_the_execution_state_filter_is_the_offramps_event(version: str) -> None:
    """execution_state_topics of a message: the topics its destination's
    ExecutionStateChanged is emitted with."""
    from qtg_runner.chains.ccip import execution_state_topics

    message = _sent_message(version=version)
    offramp = _offramp() if version == "1.6" else _offramp_v1_5()
    entry = offramp.one("event", "ExecutionStateChanged")
    values = samples(entry) | {
        "sourceChainSelector": message.source_selector,
        "sequenceNumber": message.sequence_number,
        "messageId": message.message_id,
    }
    topics, _ = event_log(entry, values)
    assert execution_state_topics(version, message) == topics


def test_erc20_transfers_read_usdcs_event() -> None:
    from qtg_runner.chains.evm import decode_transfers

    values = {"from": ADDRESS_A, "to": ADDRESS_B, "value": 10**9}
    log = _log(
        usdc(),
        "Transfer",
        {k: to_checksum_address(v) if k != "value" else v for k, v in values.items()},
    )
    receipt = Receipt(
        "0x" + "ab" * 32, 1, 100, "0x" + "cd" * 32, ADDRESS_A, ADDRESS_B, (log,), 1, 1
    )
    [ours] = decode_transfers(receipt)
    assert (ours.sender, ours.recipient, ours.value) == (ADDRESS_A, ADDRESS_B, 10**9)


def test_stargate_decoders_read_the_pool_and_messaging_events() -> None:
    from qtg_runner.executors import stargate as executor

    values = samples(_pool().one("event", "UnreceivedTokenCached"))
    ours = executor._unreceived(_log(_pool(), "UnreceivedTokenCached", values))
    assert (ours["guid"], ours["index"], ours["src_eid"], ours["receiver"], ours["amount"]) == (
        plain(values["guid"]),
        values["index"],
        values["srcEid"],
        values["receiver"].lower(),
        str(values["amountLD"]),
    )

    rode = samples(_messaging().one("event", "BusRode"))
    log = _log(_messaging(), "BusRode", rode, address=ADDRESS_B)
    receipt = Receipt(log.tx_hash, 1, 100, "0x" + "cd" * 32, ADDRESS_A, ADDRESS_B, (log,), 1, 1)
    assert executor._ticket(receipt, ADDRESS_B) == rode["ticketId"]

    for function, contract, event in (
        ("_sent", _pool(), "OFTSent"),
        ("_destination", _pool(), "OFTReceived"),
        ("_bus_driven", _messaging(), "BusDriven"),
    ):
        [our_types] = inline_types(SG, function, "decode")
        data = [p for p in contract.one("event", event)["inputs"] if not p.get("indexed")]
        round_trip(data, our_types)


@pytest.mark.parametrize(
    ("contract", "event", "ours"),
    [
        # cctp_client.decode_message_received and cctp_mint's log filter [topic, None, nonce]
        (_mt, "MessageReceived", ["caller", "nonce", "finalityThresholdExecuted"]),
        (_tm, "DepositForBurn", ["burnToken", "depositor", "minFinalityThreshold"]),
        # executors/ccip.py: the filter [topic, source selector, sequence number, message id]
        (_offramp, "ExecutionStateChanged", ["sourceChainSelector", "sequenceNumber", "messageId"]),
        (_onramp, "CCIPMessageSent", ["destChainSelector", "sequenceNumber"]),
        (_offramp_v1_5, "ExecutionStateChanged", ["sequenceNumber", "messageId"]),
        # executors/stargate.py: OFTSent topics[1] guid, topics[2] the sender; the
        # OFTReceived filter [topic, guid, recipient]
        (_pool, "OFTSent", ["guid", "fromAddress"]),
        (_pool, "OFTReceived", ["guid", "toAddress"]),
        (_pool, "UnreceivedTokenCached", []),
        (_messaging, "BusRode", []),
        (_messaging, "BusDriven", []),
        # world/bybit.py: the filter [Transfer, None, the deposit address]
        (usdc, "Transfer", ["from", "to"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_the_topics_we_filter_on_are_the_events_indexed_inputs(
    contract: Callable[[], Contract], event: str, ours: list[str]
) -> None:
    entry = contract().one("event", event)
    assert [p["name"] for p in entry["inputs"] if p.get("indexed")] == ours


# -- structs and constants ----------------------------------------------------------------------


def test_send_param_is_the_pools() -> None:
    from qtg_runner.executors.stargate import SEND_PARAM

    send = _pool().one("function", "send")
    assert canonical(send["inputs"][0]) == SEND_PARAM
    assert [c["name"] for c in send["inputs"][0]["components"]] == [
        "dstEid",
        "to",
        "amountLD",
        "minAmountLD",
        "extraOptions",
        "composeMsg",
        "oftCmd",
    ]


def test_ccip_structs_are_v1_6s() -> None:
    from qtg_runner.chains import ccip as ours

    message = _onramp().one("event", "CCIPMessageSent")["inputs"][2]
    components = {c["name"]: c for c in message["components"]}
    assert canonical(message) == ours._RAMP_SENT
    assert canonical(components["header"]) == ours._HEADER
    assert canonical(components["tokenAmounts"]) == ours._SENT_TOKEN + "[]"
    assert canonical(_router().one("function", "ccipSend")["inputs"][1]) == ours._EVM2ANY
    any2evm = _offramp().one("function", "executeSingleMessage")["inputs"][0]
    assert canonical(any2evm) == ours._ANY2EVM
    token = dict(ccip_struct("Client.sol", "EVMTokenAmount"))
    struct = (
        "("
        + ",".join(
            f"({','.join(token)})[]" if t == "EVMTokenAmount[]" else t
            for t, _ in ccip_struct("Client.sol", "EVM2AnyMessage")
        )
        + ")"
    )
    assert struct == ours._EVM2ANY


def test_extra_args_are_generic_extra_args_v2() -> None:
    from qtg_runner.chains.ccip import EXTRA_ARGS_V2_TAG, extra_args

    assert "0x" + EXTRA_ARGS_V2_TAG.hex() == ccip_constant(
        "Client.sol", "GENERIC_EXTRA_ARGS_V2_TAG"
    )
    fields = ccip_struct("Client.sol", "GenericExtraArgsV2")
    assert fields == [("uint256", "gasLimit"), ("bool", "allowOutOfOrderExecution")]
    raw = extra_args(321_000, True)
    assert raw[:4] == EXTRA_ARGS_V2_TAG
    assert decode([t for t, _ in fields], raw[4:]) == (321_000, True)


def test_ccip_report_structs_are_v1_6s() -> None:
    """The execution and commit reports, as the OffRamp takes them."""
    from qtg_runner.chains import ccip as ours

    reports, overrides = _offramp().one("function", "manuallyExecute")["inputs"]
    assert canonical(reports) == ours._EXEC_REPORT + "[]"
    assert canonical(overrides) == ours._GAS_OVERRIDE + "[][]"
    any2evm = _offramp().one("function", "executeSingleMessage")["inputs"][0]
    tokens = {c["name"]: c for c in any2evm["components"]}["tokenAmounts"]
    assert canonical(tokens) == ours._ANY2EVM_TOKEN + "[]"
    accepted = {p["name"]: p for p in _offramp().one("event", "CommitReportAccepted")["inputs"]}
    assert canonical(accepted["unblessedMerkleRoots"]) == ours._MERKLE_ROOT + "[]"
    assert canonical(accepted["priceUpdates"]) == ours._PRICE_UPDATES
    assert _commit_report_type() == ours._COMMIT_REPORT


def test_ccip_v1_5_message_is_the_onramps() -> None:
    from qtg_runner.chains import ccip as ours

    sent = _onramp_v1_5().one("event", "CCIPSendRequested")["inputs"][0]
    assert canonical(sent) == ours._EVM2EVM
    executed = _offramp_v1_5().one("function", "executeSingleMessage")["inputs"][0]
    assert canonical(executed) == ours._EVM2EVM


def test_usdc_token_data_is_the_usdc_pools() -> None:
    """The USDC pool's SourceTokenDataPayload (a transfer's extraData) and
    MessageAndAttestation (its offchain token data), and CCTPVersion.CCTP_V2."""
    from qtg_runner.chains import ccip as ours

    pool = "pools/USDC/USDCTokenPool.sol"
    versions = ccip_enum(pool, "CCTPVersion")
    payload = [
        "uint8" if t == "CCTPVersion" else t for t, _ in ccip_struct(pool, "SourceTokenDataPayload")
    ]
    assert "(" + ",".join(payload) + ")" == ours._USDC_PAYLOAD
    assert versions.index("CCTP_V2") == ours._CCTP_V2
    fields = ccip_struct(pool, "MessageAndAttestation")
    assert fields == [("bytes", "message"), ("bytes", "attestation")]
    (decoded_data,) = decode(["(bytes,bytes)"], ours.usdc_token_data(b"m" * 40, b"a" * 65))
    assert decoded_data == (b"m" * 40, b"a" * 65)


def test_extra_args_v1_are_clients() -> None:
    from qtg_runner.chains.ccip import EVM_EXTRA_ARGS_V1_TAG, parse_extra_args

    assert "0x" + EVM_EXTRA_ARGS_V1_TAG.hex() == ccip_constant(
        "Client.sol", "EVM_EXTRA_ARGS_V1_TAG"
    )
    assert ccip_struct("Client.sol", "EVMExtraArgsV1") == [("uint256", "gasLimit")]
    assert parse_extra_args(EVM_EXTRA_ARGS_V1_TAG + encode(["uint256"], [123_456])) == (
        123_456,
        False,
    )


def test_the_message_hash_domains_are_internals() -> None:
    from eth_utils import keccak

    from qtg_runner.chains import ccip as ours

    for name, value in (
        ("ANY_2_EVM_MESSAGE_HASH", ours._ANY_2_EVM_MESSAGE_HASH),
        ("EVM_2_ANY_MESSAGE_HASH", ours._EVM_2_ANY_MESSAGE_HASH),
    ):
        literal = re.fullmatch(r'keccak256\("(\w+)"\)', ccip_constant("Internal.sol", name))
        assert literal is not None, f"Internal.{name} is not keccak256 of a string"
        assert value == keccak(text=literal.group(1)), name


def test_execution_states_are_internals() -> None:
    from qtg_runner.chains import ccip as ours

    names = ccip_enum("Internal.sol", "MessageExecutionState")
    assert [ours.STATE_NAMES[i] for i in range(len(names))] == names
    assert [getattr(ours, n) for n in names] == list(range(len(names)))


def test_the_packages_are_there() -> None:
    """The check every other test relies on: node_modules holds the packages."""
    root = node_modules()
    for package in (
        "@stargatefinance/stg-evm-v2",
        "@chainlink/contracts-ccip-1.6",
        "@layerzerolabs/lz-evm-protocol-v2",
        "@circle-fin/provider-cctp-v2",
    ):
        assert (root / package / "package.json").is_file(), package
