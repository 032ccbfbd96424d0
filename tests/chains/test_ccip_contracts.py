"""The CCIP double's contracts on the session's local chains (deployed by the
same code as `qtg chains up`), held to what the real v1.6 ramps do:

- a token-only send (gas limit 0) burns the USDC through CCTP on the source
  and emits the v1.6 CCIPMessageSent our decoder reads, its message id
  Internal._hash of the message (computed here the same way);
- the DON commits the message's leaf (Internal._hash of the Any2EVMRampMessage
  with the lane's metadata, computed here) as a one-leaf root, and its
  execute of a one-message report carrying the CCTP attestation as the USDC
  pool's offchain data mints once, ExecutionStateChanged SUCCESS with that
  leaf as the message hash; a SUCCESS is skipped by every later execution;
- without the attestation the release FAILS, and anyone's manuallyExecute
  (selector 0x5e7bb008: ExecutionReport[] and GasLimitOverride[][]) of the
  report with it succeeds, once; a message not committed, a wrong
  attestation, a lower gas override are refused with nothing minted;
- the Router refuses what the real one refuses, and a fee raised between the
  quote and the send is absorbed by a payment with a margin;
- a v1.5 lane emits CCIPSendRequested(EVM2EVMMessage) and
  ExecutionStateChanged(sequenceNumber, messageId, state, returnData).

Accounts here are anvil's own (never the treasury's, whose nonces the engine
tests count). Every message sent here is committed here, in order, so the
executing network of a later module never waits on one of them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from chain_support import LocalChainSet
from eth_abi.abi import decode, encode
from eth_utils.crypto import keccak
from evm_support import usdc_balance, web3_of
from web3 import Web3

from qtg_runner.chains.ccip import (
    CCIP_MESSAGE_SENT_TOPIC,
    CCIP_SEND_REQUESTED_TOPIC,
    EXECUTION_STATE_CHANGED_TOPIC,
    EXECUTION_STATE_CHANGED_V1_5_TOPIC,
    FAILURE,
    MANUALLY_EXECUTE_SELECTOR,
    SUCCESS,
    ExecutionStateChanged,
    SentMessage,
    ccip_send_calldata,
    commit_calldata,
    execute_calldata,
    execution_state_calldata,
    extra_args,
    fee_with_margin,
    get_fee_calldata,
    manually_execute_calldata,
    match_attested,
    usdc_token_data,
)
from qtg_runner.chains.cctp import FINALITY_STANDARD, BurnBody, CctpMessage
from qtg_runner.chains.errors import ChainError
from qtg_world.chains.ccip import ccip_selector, deploy_v1_5_lane, ensure_don_key
from qtg_world.chains.cctp import attest, cctp_domain, load_attesters
from qtg_world.chains.local import RunningChain, load_artifact, rpc

pytestmark = [pytest.mark.chain]

AMOUNT = 1_234_567
MANUALLY_EXECUTE_ARGS = [
    "(uint64,((bytes32,uint64,uint64,uint64,uint64),bytes,bytes,address,uint256,"
    "(bytes,address,uint32,bytes,uint256)[])[],bytes[][],bytes32[],uint256)[]",
    "(uint256,uint32[])[][]",
]
"""OffRamp 1.6's manuallyExecute(ExecutionReport[], GasLimitOverride[][])."""
MESSAGE_SENT_TOPIC = "0x" + keccak(text="MessageSent(bytes)").hex()


def selector(signature: str) -> str:
    return keccak(text=signature)[:4].hex()


def send_tx(chain: RunningChain, sender: str, to: str, data: bytes, value: int = 0) -> Any:
    """A transaction from an unlocked (or impersonated) account, mined; its receipt."""
    w3 = web3_of(chain)
    tx_hash = w3.eth.send_transaction(
        {
            "from": Web3.to_checksum_address(sender),
            "to": Web3.to_checksum_address(to),
            "data": "0x" + data.hex(),
            "value": value,
            "gas": 2_000_000,
        }
    )
    return w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30, poll_latency=0.1)


def call(chain: RunningChain, sender: str, to: str, data: bytes, value: int = 0) -> bytes:
    answer = rpc(
        chain.rpc_url,
        "eth_call",
        [{"from": sender, "to": to, "data": "0x" + data.hex(), "value": hex(value)}, "latest"],
    )
    return bytes.fromhex(str(answer)[2:])


def refused(chain: RunningChain, sender: str, to: str, data: bytes, error: str, value: int = 0):  # type: ignore[no-untyped-def]
    """The call reverts with the custom error ``error`` (its signature)."""
    with pytest.raises(ChainError) as caught:
        call(chain, sender, to, data, value)
    assert selector(error) in str(caught.value), str(caught.value)


def topics_of(log: Any) -> list[str]:
    return ["0x" + t.hex().removeprefix("0x") for t in log["topics"]]


def tx_of(receipt: Any) -> str:
    return "0x" + receipt["transactionHash"].hex().removeprefix("0x")


@pytest.fixture(scope="module")
def pair(local_chain_set: LocalChainSet) -> tuple[RunningChain, RunningChain, str, str, str]:
    """(source, destination, sender, receiver, the DON's address): the sender an
    anvil account holding USDC and having approved the source Router."""
    source, dest = local_chain_set.chains[0], local_chain_set.chains[1]
    w3 = web3_of(source)
    sender, receiver = (str(a).lower() for a in w3.eth.accounts[7:9])
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(source.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    owner = source.deployer
    w3.eth.wait_for_transaction_receipt(
        usdc.functions.mint(Web3.to_checksum_address(sender), 100 * AMOUNT).transact(
            {"from": owner}
        )
    )
    w3.eth.wait_for_transaction_receipt(
        usdc.functions.approve(
            Web3.to_checksum_address(source.contracts["CcipRouter"]), 100 * AMOUNT
        ).transact({"from": Web3.to_checksum_address(sender)})
    )
    don = ensure_don_key(local_chain_set.state_dir).address
    rpc(dest.rpc_url, "anvil_impersonateAccount", [don])
    return source, dest, sender, receiver, don


def sent_of(receipt: Any) -> SentMessage:
    (log,) = [log for log in receipt["logs"] if topics_of(log)[0] == CCIP_MESSAGE_SENT_TOPIC]
    return SentMessage.from_log(
        str(log["address"]), topics_of(log), bytes(log["data"]), tx_of(receipt),
        int(log["blockNumber"]), int(log["logIndex"]),
    )  # fmt: skip


def state_changes(receipt: Any) -> list[ExecutionStateChanged]:
    return [
        ExecutionStateChanged.from_log(
            topics_of(log),
            bytes(log["data"]),
            tx_of(receipt),
            int(log["blockNumber"]),
            int(log["logIndex"]),
        )
        for log in receipt["logs"]
        if topics_of(log)[0] in (EXECUTION_STATE_CHANGED_TOPIC, EXECUTION_STATE_CHANGED_V1_5_TOPIC)
    ]


def quote(source: RunningChain, dest: RunningChain, sender: str, receiver: str) -> int:
    data = get_fee_calldata(ccip_selector(dest), receiver, source.contracts["MockUSDC"], AMOUNT)
    return int.from_bytes(call(source, sender, source.contracts["CcipRouter"], data), "big")


def fee_config(
    source: RunningChain, dest: RunningChain, sender: str, receiver: str
) -> tuple[int, int]:
    """(feeBase, feePerGas) of the source OnRamp, read through the Router's quotes
    for a gas limit of 0 and of 1 (the real fee follows the FeeQuoter's prices;
    the double's is these two numbers, the owner's)."""
    usdc, router = source.contracts["MockUSDC"], source.contracts["CcipRouter"]
    fees = [
        int.from_bytes(
            call(
                source,
                sender,
                router,
                get_fee_calldata(ccip_selector(dest), receiver, usdc, AMOUNT, gas),
            ),
            "big",
        )
        for gas in (0, 1)
    ]
    return fees[0], fees[1] - fees[0]


def send(
    source: RunningChain, dest: RunningChain, sender: str, receiver: str
) -> tuple[SentMessage, Any]:
    """A token-only ccipSend of AMOUNT paying exactly the quote: the message and the receipt."""
    router = source.contracts["CcipRouter"]
    data = ccip_send_calldata(ccip_selector(dest), receiver, source.contracts["MockUSDC"], AMOUNT)
    fee = quote(source, dest, sender, receiver)
    returned = call(source, sender, router, data, fee)
    receipt = send_tx(source, sender, router, data, fee)
    assert receipt["status"] == 1
    sent = sent_of(receipt)
    # what ccipSend returned, simulated just before, is the id in the event's header
    assert sent.message_id == returned[:32]
    assert sent.fee_amount == fee
    return sent, receipt


def attested(chain_set: LocalChainSet, source: RunningChain, receipt: Any) -> list[bytes]:
    """The USDC pool's offchain data of the send: its burn's CCTP message as the
    attestation service fills it (a nonce, finality 2000 executed, no fee)
    and the local attesters' attestation, matched to the transfer as the
    reaper matches it."""
    sent = sent_of(receipt)
    (payload,) = sent.usdc_payloads()
    assert payload is not None
    (log,) = [
        log
        for log in receipt["logs"]
        if topics_of(log)[0] == MESSAGE_SENT_TOPIC
        and str(log["address"]).lower() == source.contracts["MessageTransmitterV2"].lower()
    ]
    (raw,) = decode(["bytes"], bytes(log["data"]))
    message = CctpMessage.decode(bytes(raw))
    filled = replace(
        message,
        nonce=keccak(bytes.fromhex(tx_of(receipt)[2:])),
        finality_threshold_executed=FINALITY_STANDARD,
        body=replace(BurnBody.decode(message.body), fee_executed=0).encode(),
    ).encode()
    attestation = attest(filled, load_attesters(chain_set.state_dir))
    entry = {
        "status": "complete",
        "message": "0x" + filled.hex(),
        "attestation": "0x" + attestation.hex(),
    }
    matched = match_attested(payload, [entry])
    assert matched == (filled, attestation)
    return [usdc_token_data(*matched)]


def offramp_state(dest: RunningChain, sent: SentMessage) -> int:
    return int.from_bytes(
        call(dest, dest.deployer, dest.contracts["CcipOffRamp"], execution_state_calldata(sent)),
        "big",
    )


def commit(dest: RunningChain, don: str, sent: SentMessage) -> None:
    receipt = send_tx(dest, don, dest.contracts["CcipOffRamp"], commit_calldata(sent))
    assert receipt["status"] == 1


def test_a_token_only_send_burns_through_cctp_and_its_ids_are_the_real_hashes(
    local_chain_set: LocalChainSet, pair: Any
) -> None:
    source, dest, sender, receiver, don = pair
    supply = (
        web3_of(source)
        .eth.contract(
            address=Web3.to_checksum_address(source.contracts["MockUSDC"]),
            abi=load_artifact("MockUSDC")["abi"],
        )
        .functions.totalSupply()
    )
    supply_before = int(supply.call())
    held = usdc_balance(source, sender)
    sent, _ = send(source, dest, sender, receiver)
    assert (sent.source_selector, sent.dest_selector) == (
        ccip_selector(source),
        ccip_selector(dest),
    )
    assert sent.sender == sender and sent.receiver == receiver and sent.amount == AMOUNT
    assert sent.gas_limit == 0 and sent.data == b"" and sent.nonce == 0  # token only, out of order
    assert sent.tokens[0].dest_token == dest.contracts["MockUSDC"].lower()
    assert sent.tokens[0].source_pool == source.contracts["CcipOnRamp"].lower()
    # the id is the real OnRamp's Internal._hash of the message, as computed here
    assert sent.computed_id() == sent.message_id
    # burned through CCTP: the pool's payload names the burn, received by the OffRamp only
    (payload,) = sent.usdc_payloads()
    assert payload is not None
    assert (payload.source_domain, payload.destination_domain) == (
        cctp_domain(source),
        cctp_domain(dest),
    )
    assert payload.cctp_version == 2 and payload.amount == AMOUNT and payload.max_fee == 0
    assert payload.min_finality_threshold == FINALITY_STANDARD
    assert payload.mint_recipient == bytes(12) + bytes.fromhex(receiver[2:])
    assert payload.destination_caller[12:].hex() == dest.contracts["CcipOffRamp"][2:].lower()
    assert usdc_balance(source, sender) == held - AMOUNT
    assert int(supply.call()) == supply_before - AMOUNT  # burned, not locked
    commit(dest, don, sent)


def test_the_onramp_emits_extra_args_converted_to_generic_extra_args_v2(pair: Any) -> None:
    """As the real OnRamp emits the FeeQuoter's conversion: empty extraArgs are
    GenericExtraArgsV2(200000, in order), EVMExtraArgsV1 too with its gas limit."""
    source, dest, sender, receiver, don = pair
    router, usdc = source.contracts["CcipRouter"], source.contracts["MockUSDC"]
    v1 = bytes.fromhex("97a657c9") + encode(["uint256"], [70_000])
    for given, expected in ((b"", (200_000, False)), (v1, (70_000, False))):
        data = bytearray(ccip_send_calldata(ccip_selector(dest), receiver, usdc, AMOUNT))
        # the message's extraArgs are its last field: cut the 68 bytes and their
        # length word, put the given ones (padded) in their place
        head_len = len(data) - 32 - 96
        message = data[:head_len] + encode(["bytes"], [given])[32:]
        receipt = send_tx(source, sender, router, bytes(message), 10**16)
        assert receipt["status"] == 1
        sent = sent_of(receipt)
        assert sent.extra_args == extra_args(*expected) and sent.gas_limit == expected[0]
        assert sent.nonce != 0  # in order: the sender's nonce
        assert sent.computed_id() == sent.message_id
        commit(dest, don, sent)


def test_the_don_commits_a_one_leaf_root_and_executes_with_the_attestation_once(
    local_chain_set: LocalChainSet, pair: Any
) -> None:
    source, dest, sender, receiver, don = pair
    received = usdc_balance(dest, receiver)
    sent, receipt = send(source, dest, sender, receiver)
    offramp = dest.contracts["CcipOffRamp"]
    token_data = attested(local_chain_set, source, receipt)

    # nothing executes before its root is committed; only the transmitter commits
    refused(dest, don, offramp, execute_calldata(sent, token_data), "RootNotCommitted(uint64)")
    refused(dest, sender, offramp, commit_calldata(sent), "UnauthorizedTransmitter()")
    commit(dest, don, sent)
    refused(dest, don, offramp, commit_calldata(sent), "InvalidInterval(uint64,uint64,uint64)")
    refused(dest, sender, offramp, execute_calldata(sent, token_data), "UnauthorizedTransmitter()")

    receipt = send_tx(dest, don, offramp, execute_calldata(sent, token_data))
    (changed,) = state_changes(receipt)
    assert changed.state == SUCCESS and changed.message_id == sent.message_id_hex
    assert (changed.source_selector, changed.sequence_number) == (
        sent.source_selector,
        sent.sequence_number,
    )
    # the leaf the OffRamp hashed is the one computed here
    assert changed.message_hash == "0x" + sent.leaf().hex()
    assert usdc_balance(dest, receiver) == received + AMOUNT
    assert offramp_state(dest, sent) == SUCCESS

    # no replay: a SUCCESS is skipped by the transmitter and by anyone manually
    for who, data in ((don, execute_calldata(sent, token_data)),
                      (sender, manually_execute_calldata(sent, token_data))):  # fmt: skip
        again = send_tx(dest, who, offramp, data)
        assert again["status"] == 1 and state_changes(again) == []
    assert usdc_balance(dest, receiver) == received + AMOUNT


def test_a_failed_release_is_executed_manually_with_the_attestation_once(
    local_chain_set: LocalChainSet, pair: Any
) -> None:
    source, dest, sender, receiver, don = pair
    received = usdc_balance(dest, receiver)
    sent, receipt = send(source, dest, sender, receiver)
    offramp = dest.contracts["CcipOffRamp"]
    token_data = attested(local_chain_set, source, receipt)
    commit(dest, don, sent)
    # nothing to execute manually before the network has tried (and the
    # commit is far younger than the permissionless threshold)
    refused(
        dest, sender, offramp, manually_execute_calldata(sent, token_data),
        "ManualExecutionNotYetEnabled(uint64)",
    )  # fmt: skip
    # the DON executes without the attestation: the release reverts, FAILURE
    receipt = send_tx(dest, don, offramp, execute_calldata(sent, [b""]))
    (changed,) = state_changes(receipt)
    assert changed.state == FAILURE
    assert changed.return_data[:4].hex() == selector("TokenHandlingError(address,bytes)")
    assert usdc_balance(dest, receiver) == received
    assert offramp_state(dest, sent) == FAILURE
    again = send_tx(dest, don, offramp, execute_calldata(sent, token_data))
    assert state_changes(again) == []  # the DON never runs a message twice: AlreadyAttempted

    # another message under the failed one's header is not committed; a wrong
    # attestation fails again (the whole call reverts); a lower gas override is refused
    forged = replace(sent, tokens=(replace(sent.tokens[0], amount=10 * AMOUNT),))
    refused(
        dest, sender, offramp, manually_execute_calldata(forged, token_data),
        "RootNotCommitted(uint64)",
    )  # fmt: skip
    wrong = [usdc_token_data(b"\x00" * 200, b"\x01" * 130)]
    refused(
        dest, sender, offramp, manually_execute_calldata(sent, wrong),
        "ExecutionError(bytes32,bytes)",
    )  # fmt: skip
    data = manually_execute_calldata(sent, token_data)
    assert data[:4] == MANUALLY_EXECUTE_SELECTOR == bytes.fromhex("5e7bb008")
    # the report as the real ABI reads it, no override; a token gas override
    # below the transfer's destGasAmount is refused
    reports, overrides = decode(MANUALLY_EXECUTE_ARGS, data[4:])
    assert reports[0][0] == sent.source_selector and len(reports[0][1]) == 1
    assert reports[0][3] == () and reports[0][4] == 0  # one leaf: no proofs, no flags
    assert overrides == (((0, (0,)),),)
    low = MANUALLY_EXECUTE_SELECTOR + encode(MANUALLY_EXECUTE_ARGS, [reports, [[(0, [1])]]])
    refused(
        dest, sender, offramp, low,
        "InvalidManualExecutionTokenGasOverride(bytes32,uint256,uint256,uint256)",
    )  # fmt: skip
    assert usdc_balance(dest, receiver) == received

    receipt = send_tx(dest, sender, offramp, data)
    (changed,) = state_changes(receipt)
    assert changed.state == SUCCESS and changed.message_hash == "0x" + sent.leaf().hex()
    assert usdc_balance(dest, receiver) == received + AMOUNT
    again = send_tx(dest, sender, offramp, data)
    assert state_changes(again) == []  # skipped: SkippedAlreadyExecutedMessage
    assert usdc_balance(dest, receiver) == received + AMOUNT


def test_the_router_refuses_an_unknown_destination_a_short_fee_a_zero_amount_and_a_fee_token(
    pair: Any,
) -> None:
    source, dest, sender, receiver, _ = pair
    router, usdc = source.contracts["CcipRouter"], source.contracts["MockUSDC"]
    held = usdc_balance(source, sender)
    unknown = ccip_selector(source)  # a chain is not its own destination
    refused(
        source, sender, router, ccip_send_calldata(unknown, receiver, usdc, AMOUNT),
        "UnsupportedDestinationChain(uint64)", value=10**18,
    )  # fmt: skip
    data = ccip_send_calldata(ccip_selector(dest), receiver, usdc, AMOUNT)
    fee = quote(source, dest, sender, receiver)
    assert fee > 0
    refused(source, sender, router, data, "InsufficientFeeTokenAmount()", value=fee - 1)
    refused(
        source, sender, router, ccip_send_calldata(ccip_selector(dest), receiver, usdc, 0),
        "InvalidTokenAmount(address)", value=fee,
    )  # fmt: skip
    # a LINK-style fee token: this double takes the native coin only
    with_fee_token = bytearray(data)
    # feeToken is the 4th head word of the message tuple: selector 4 + dest 32 +
    # offset 32, then receiver/data/tokenAmounts offsets (3 x 32)
    start = 4 + 32 + 32 + 3 * 32
    with_fee_token[start + 12 : start + 32] = bytes.fromhex(usdc[2:])
    refused(
        source, sender, router, bytes(with_fee_token), "UnsupportedFeeToken(address)", value=fee
    )
    assert usdc_balance(source, sender) == held


def test_a_fee_raised_after_the_quote_is_absorbed_by_the_margin(
    local_chain_set: LocalChainSet, pair: Any
) -> None:
    source, dest, sender, receiver, don = pair
    onramp = web3_of(source).eth.contract(
        address=Web3.to_checksum_address(source.contracts["CcipOnRamp"]),
        abi=load_artifact("CcipOnRamp")["abi"],
    )
    base, per_gas = fee_config(source, dest, sender, receiver)
    quoted = quote(source, dest, sender, receiver)
    assert quoted == base  # a token-only message pays for no destination gas
    paid = fee_with_margin(quoted, 1_000)  # 10 %
    assert paid == quoted + quoted // 10 + (1 if quoted % 10 else 0)
    data = ccip_send_calldata(ccip_selector(dest), receiver, source.contracts["MockUSDC"], AMOUNT)
    owner = Web3.to_checksum_address(source.deployer)
    try:
        # the fee rises 8 % between the quote and the send's block
        web3_of(source).eth.wait_for_transaction_receipt(
            onramp.functions.setFeeConfig(base * 108 // 100, per_gas).transact({"from": owner})
        )
        assert quote(source, dest, sender, receiver) > quoted
        refused(source, sender, source.contracts["CcipRouter"], data,
                "InsufficientFeeTokenAmount()", value=quoted)  # fmt: skip
        receipt = send_tx(source, sender, source.contracts["CcipRouter"], data, paid)
        assert receipt["status"] == 1
        sent = sent_of(receipt)
        assert sent.fee_amount == paid  # all of it paid, the overpayment kept
        commit(dest, don, sent)
    finally:
        web3_of(source).eth.wait_for_transaction_receipt(
            onramp.functions.setFeeConfig(base, per_gas).transact({"from": owner})
        )


def test_a_v1_5_lane_emits_the_v1_5_events(local_chain_set: LocalChainSet, pair: Any) -> None:
    source, dest, sender, receiver, _ = pair
    don = dest.deployer  # anvil's unlocked account executes the lane here
    lane = deploy_v1_5_lane(source, dest, don)
    usdc = web3_of(source).eth.contract(
        address=Web3.to_checksum_address(source.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    web3_of(source).eth.wait_for_transaction_receipt(
        usdc.functions.approve(Web3.to_checksum_address(lane.router), AMOUNT).transact(
            {"from": Web3.to_checksum_address(sender)}
        )
    )
    received = usdc_balance(dest, receiver)
    data = ccip_send_calldata(ccip_selector(dest), receiver, source.contracts["MockUSDC"], AMOUNT)
    receipt = send_tx(source, sender, lane.router, data, 10**15)
    (log,) = [log for log in receipt["logs"] if topics_of(log)[0] == CCIP_SEND_REQUESTED_TOPIC]
    sent = SentMessage.from_v1_5_log(
        str(log["address"]), topics_of(log), bytes(log["data"]), tx_of(receipt),
        int(log["blockNumber"]), int(log["logIndex"]), ccip_selector(dest),
    )  # fmt: skip
    assert sent.version == "1.5" and sent.onramp == lane.onramp
    assert (sent.sender, sent.receiver, sent.amount, sent.gas_limit) == (
        sender,
        receiver,
        AMOUNT,
        0,
    )
    assert sent.tokens[0].dest_token == dest.contracts["MockUSDC"].lower()
    (raw,) = decode(
        ["(uint64,address,address,uint64,uint256,bool,uint64,address,uint256,bytes,"
         "(address,uint256)[],bytes[],bytes32)"],
        bytes(log["data"]),
    )  # fmt: skip
    execute = keccak(
        text="executeMessages((uint64,address,address,uint64,uint256,bool,uint64,address,uint256,"
        "bytes,(address,uint256)[],bytes[],bytes32)[])"
    )[:4]
    executed = send_tx(
        dest, don, lane.offramp,
        execute + encode(
            ["(uint64,address,address,uint64,uint256,bool,uint64,address,uint256,bytes,"
             "(address,uint256)[],bytes[],bytes32)[]"],
            [[raw]],
        ),
    )  # fmt: skip
    (changed,) = state_changes(executed)
    assert changed.source_selector is None and changed.gas_used is None
    assert (changed.sequence_number, changed.message_id, changed.state) == (
        sent.sequence_number,
        sent.message_id_hex,
        SUCCESS,
    )
    assert (
        int.from_bytes(
            call(dest, dest.deployer, lane.offramp, execution_state_calldata(sent)), "big"
        )
        == SUCCESS
    )
    assert usdc_balance(dest, receiver) == received + AMOUNT
