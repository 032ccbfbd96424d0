"""The CCIP double's contracts on the session's local chains (deployed by the
same code as `qtg chains up`): a send burns on the source and emits the v1.6
CCIPMessageSent our decoder reads (the message id the Router returns in its
header); the transmitter's execute mints once on the destination with
ExecutionStateChanged SUCCESS; a FAILURE is executed again by anyone, for the
same message only, once; every replay and every bad send is refused with
nothing moved. Accounts here are anvil's own (never the treasury's, whose
nonces the engine tests count)."""

from __future__ import annotations

from typing import Any

import pytest
from chain_support import LocalChainSet
from eth_abi.abi import decode
from eth_utils.crypto import keccak
from evm_support import usdc_balance, web3_of
from web3 import Web3

from qtg_runner.chains.ccip import (
    CCIP_MESSAGE_SENT_TOPIC,
    EXECUTION_STATE_CHANGED_TOPIC,
    FAILURE,
    SUCCESS,
    ExecutionStateChanged,
    SentMessage,
    ccip_selector,
    ccip_send_calldata,
    ensure_don_key,
    execute_calldata,
    get_fee_calldata,
    manually_execute_calldata,
)
from qtg_runner.chains.local import ChainError, RunningChain, load_artifact, rpc

pytestmark = [pytest.mark.chain]

AMOUNT = 1_234_567


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
            "gas": 1_000_000,
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
    return source, dest, sender, receiver, don


def sent_of(receipt: Any) -> SentMessage:
    logs = [
        log
        for log in receipt["logs"]
        if log["topics"][0].hex() in (CCIP_MESSAGE_SENT_TOPIC[2:], CCIP_MESSAGE_SENT_TOPIC)
    ]
    assert len(logs) == 1
    log = logs[0]
    return SentMessage.from_log(
        str(log["address"]),
        ["0x" + t.hex().removeprefix("0x") for t in log["topics"]],
        bytes(log["data"]),
        "0x" + receipt["transactionHash"].hex().removeprefix("0x"),
        int(log["blockNumber"]),
        int(log["logIndex"]),
    )


def state_changes(receipt: Any) -> list[ExecutionStateChanged]:
    return [
        ExecutionStateChanged.from_log(
            ["0x" + t.hex().removeprefix("0x") for t in log["topics"]],
            bytes(log["data"]),
            "0x" + receipt["transactionHash"].hex().removeprefix("0x"),
            int(log["blockNumber"]),
            int(log["logIndex"]),
        )
        for log in receipt["logs"]
        if "0x" + log["topics"][0].hex().removeprefix("0x") == EXECUTION_STATE_CHANGED_TOPIC
    ]


def send(source: RunningChain, dest: RunningChain, sender: str, receiver: str) -> SentMessage:
    router = source.contracts["CcipRouter"]
    data = ccip_send_calldata(ccip_selector(dest), receiver, source.contracts["MockUSDC"], AMOUNT)
    fee = int.from_bytes(
        call(
            source,
            sender,
            router,
            get_fee_calldata(ccip_selector(dest), receiver, source.contracts["MockUSDC"], AMOUNT),
        ),
        "big",
    )
    returned = call(source, sender, router, data, fee)
    receipt = send_tx(source, sender, router, data, fee)
    assert receipt["status"] == 1
    sent = sent_of(receipt)
    # what ccipSend returned, simulated just before, is the id in the event's header
    assert sent.message_id == returned[:32]
    assert sent.fee_amount == fee
    return sent


def impersonated(chain: RunningChain, address: str) -> None:
    rpc(chain.rpc_url, "anvil_impersonateAccount", [address])


def offramp_state(dest: RunningChain, sent: SentMessage) -> int:
    data = keccak(text="getExecutionState(uint64,uint64)")[:4] + (
        sent.source_selector.to_bytes(32, "big") + sent.sequence_number.to_bytes(32, "big")
    )
    return int.from_bytes(call(dest, dest.deployer, dest.contracts["CcipOffRamp"], data), "big")


def test_a_send_burns_on_the_source_and_the_transmitter_mints_it_once_on_the_destination(
    pair: Any,
) -> None:
    source, dest, sender, receiver, don = pair
    supply_before = int(
        decode(
            ["uint256"],
            call(source, sender, source.contracts["MockUSDC"], keccak(text="totalSupply()")[:4]),
        )[0]
    )
    held = usdc_balance(source, sender)
    received = usdc_balance(dest, receiver)
    sent = send(source, dest, sender, receiver)
    assert (sent.source_selector, sent.dest_selector) == (
        ccip_selector(source),
        ccip_selector(dest),
    )
    assert sent.sender == sender and sent.receiver == receiver and sent.amount == AMOUNT
    assert sent.tokens[0].dest_token == dest.contracts["MockUSDC"].lower()
    assert usdc_balance(source, sender) == held - AMOUNT
    supply_after = int(
        decode(
            ["uint256"],
            call(source, sender, source.contracts["MockUSDC"], keccak(text="totalSupply()")[:4]),
        )[0]
    )
    assert supply_after == supply_before - AMOUNT  # burned, not locked
    offramp = dest.contracts["CcipOffRamp"]

    # only the transmitter executes
    refused(dest, sender, offramp, execute_calldata(sent), "OnlyTransmitter(address)")
    impersonated(dest, don)
    receipt = send_tx(dest, don, offramp, execute_calldata(sent))
    (changed,) = state_changes(receipt)
    assert changed.state == SUCCESS and changed.message_id == sent.message_id_hex
    assert (changed.source_selector, changed.sequence_number) == (
        sent.source_selector,
        sent.sequence_number,
    )
    assert usdc_balance(dest, receiver) == received + AMOUNT
    assert offramp_state(dest, sent) == SUCCESS

    # no replay: neither the transmitter nor anyone manually
    refused(dest, don, offramp, execute_calldata(sent), "AlreadyExecuted(uint64,uint64)")
    refused(
        dest, sender, offramp, manually_execute_calldata(sent), "AlreadyExecuted(uint64,uint64)"
    )
    assert usdc_balance(dest, receiver) == received + AMOUNT


def test_a_failed_execution_is_executed_again_manually_by_anyone_for_that_message_once(
    pair: Any,
) -> None:
    source, dest, sender, receiver, don = pair
    received = usdc_balance(dest, receiver)
    sent = send(source, dest, sender, receiver)
    offramp = dest.contracts["CcipOffRamp"]
    # nothing to execute manually before the network has tried
    refused(
        dest, sender, offramp, manually_execute_calldata(sent), "NotFailed(uint64,uint64,uint8)"
    )
    impersonated(dest, don)
    receipt = send_tx(dest, don, offramp, execute_calldata(sent, 5_000))
    (changed,) = state_changes(receipt)
    assert changed.state == FAILURE and changed.return_data == b""  # out of gas
    assert usdc_balance(dest, receiver) == received
    assert offramp_state(dest, sent) == FAILURE
    refused(dest, don, offramp, execute_calldata(sent), "AlreadyAttempted(uint64,uint64)")

    # another message under the failed one's header, or too little gas: refused
    forged = SentMessage(
        **{
            **sent.__dict__,
            "tokens": (
                sent.tokens[0].__class__(
                    sent.tokens[0].source_pool,
                    sent.tokens[0].dest_token,
                    10 * AMOUNT,
                    sent.tokens[0].dest_exec_data,
                ),
            ),
        }
    )
    refused(
        dest, sender, offramp, manually_execute_calldata(forged),
        "MessageHashMismatch(bytes32,bytes32)",
    )  # fmt: skip
    refused(
        dest, sender, offramp, manually_execute_calldata(sent, 50_000),
        "InvalidManualExecutionGasLimit(uint256,uint256)",
    )  # fmt: skip

    receipt = send_tx(dest, sender, offramp, manually_execute_calldata(sent))
    (changed,) = state_changes(receipt)
    assert changed.state == SUCCESS
    assert usdc_balance(dest, receiver) == received + AMOUNT
    refused(
        dest, sender, offramp, manually_execute_calldata(sent), "AlreadyExecuted(uint64,uint64)"
    )
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
    fee = int.from_bytes(
        call(source, sender, router, get_fee_calldata(ccip_selector(dest), receiver, usdc, AMOUNT)),
        "big",
    )
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
