"""The CCTP v2 double on the local chains (deployed and wired by the same code as
`qtg chains up`): a burn on test-a, its message filled in and attested here with
the local attester keys, minted on test-b through MessageTransmitterV2; the
refusals the real contracts make (replay, signer order, threshold, unknown
attester, tampering, bad burns, v2.1's minimum fee, a fast message past its
expiration block) each seen as the revert reason."""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any

import pytest
from chain_support import LocalChainSet
from web3 import HTTPProvider, Web3
from web3.exceptions import ContractLogicError
from web3.logs import DISCARD

from qtg_runner.chains.cctp import (
    FINALITY_FAST,
    FINALITY_STANDARD,
    BurnBody,
    CctpMessage,
    address_to_bytes32,
)
from qtg_world.chains.cctp import Attester, attest, cctp_domain, load_attesters, read_domain
from qtg_world.chains.local import RunningChain, load_artifact

pytestmark = [pytest.mark.chain, pytest.mark.slow]


class Side:
    """One chain's web3, accounts and CCTP contracts."""

    def __init__(self, chain: RunningChain) -> None:
        self.chain = chain
        self.w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
        self.owner = self.w3.eth.accounts[0]
        self.usdc = self._contract("MockUSDC")
        self.mt = self._contract("MessageTransmitterV2")
        self.tm = self._contract("TokenMessengerV2")
        self.domain = cctp_domain(chain)

    def _contract(self, name: str) -> Any:
        return self.w3.eth.contract(
            address=Web3.to_checksum_address(self.chain.contracts[name]),
            abi=load_artifact(name)["abi"],
        )

    def mined(self, tx_hash: Any) -> Any:
        receipt = self.w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=self.chain.block_time * 10, poll_latency=0.1
        )
        assert receipt["status"] == 1
        return receipt

    def balance(self, who: str) -> int:
        return int(self.usdc.functions.balanceOf(who).call())


@pytest.fixture(scope="module")
def sides(local_chain_set: LocalChainSet) -> tuple[Side, Side]:
    a, b = local_chain_set.chains
    return Side(a), Side(b)


@pytest.fixture(scope="module")
def attesters(local_chain_set: LocalChainSet) -> list[Attester]:
    return load_attesters(local_chain_set.state_dir)


def _revert_reason(call: Any, sender: str) -> str:
    with pytest.raises(ContractLogicError) as info:
        call.call({"from": sender})
    return str(info.value)


def _burn(
    src: Side,
    dst: Side,
    depositor: str,
    recipient: str,
    amount: int,
    max_fee: int,
    finality: int,
    caller: bytes = bytes(32),
) -> tuple[Any, CctpMessage]:
    src.mined(src.usdc.functions.mint(depositor, amount).transact({"from": src.owner}))
    src.mined(src.usdc.functions.approve(src.tm.address, amount).transact({"from": depositor}))
    receipt = src.mined(
        src.tm.functions.depositForBurn(
            amount, dst.domain, address_to_bytes32(recipient), src.usdc.address, caller,
            max_fee, finality,
        ).transact({"from": depositor})
    )  # fmt: skip
    (sent,) = src.mt.events.MessageSent().process_receipt(receipt, errors=DISCARD)
    return receipt, CctpMessage.decode(bytes(sent["args"]["message"]))


def _filled(message: CctpMessage, executed: int, fee: int) -> bytes:
    body = replace(BurnBody.decode(message.body), fee_executed=fee)
    return replace(
        message,
        nonce=secrets.token_bytes(32),
        finality_threshold_executed=executed,
        body=body.encode(),
    ).encode()


def test_the_double_is_wired_on_each_chain(
    sides: tuple[Side, Side], attesters: list[Attester]
) -> None:
    a, b = sides
    assert (read_domain(a.chain), read_domain(b.chain)) == (110, 111)
    for side, other in ((a, b), (b, a)):
        assert side.mt.functions.version().call() == 1
        assert side.mt.functions.signatureThreshold().call() == 2
        assert side.mt.functions.tokenMessenger().call() == side.tm.address
        assert all(side.mt.functions.isEnabledAttester(x.address).call() for x in attesters)
        assert side.usdc.functions.isMinter(side.tm.address).call()
        remote = side.tm.functions.remoteTokenMessengers(other.domain).call()
        assert remote == address_to_bytes32(other.tm.address)
    # the depositForBurn selector is the real one
    assert a.tm.functions.depositForBurn(1, 1, bytes(32), a.usdc.address, bytes(32), 0, 0
                                         ).selector == "0x8e0250ee"  # fmt: skip


def test_burn_on_a_attested_mint_on_b_once(
    sides: tuple[Side, Side], attesters: list[Attester]
) -> None:
    a, b = sides
    depositor, recipient, stranger = (
        a.w3.eth.accounts[1],
        b.w3.eth.accounts[2],
        b.w3.eth.accounts[3],
    )
    amount, max_fee, fee = 5_000_000, 5_000, 1_200
    supply_a = int(a.usdc.functions.totalSupply().call())
    held_a = a.balance(depositor)  # the session's chains: another file may have paid it
    receipt, sent = _burn(a, b, depositor, recipient, amount, max_fee, FINALITY_FAST)

    # the source log: v2 layout, nonce zero, execution fields zero
    assert (sent.version, sent.source_domain, sent.destination_domain) == (1, a.domain, b.domain)
    assert sent.nonce == bytes(32) and sent.finality_threshold_executed == 0
    assert sent.sender == address_to_bytes32(a.tm.address)
    assert sent.recipient == address_to_bytes32(b.tm.address)
    assert sent.min_finality_threshold == FINALITY_FAST
    body = BurnBody.decode(sent.body)
    assert body == BurnBody(1, address_to_bytes32(a.usdc.address), address_to_bytes32(recipient),
                            amount, address_to_bytes32(depositor), max_fee, 0, 0, b"")  # fmt: skip
    (deposit,) = a.tm.events.DepositForBurn().process_receipt(receipt, errors=DISCARD)
    assert deposit["args"]["amount"] == amount and deposit["args"]["depositor"] == depositor
    assert deposit["args"]["minFinalityThreshold"] == FINALITY_FAST
    assert deposit["args"]["destinationTokenMessenger"] == address_to_bytes32(b.tm.address)
    # burned: the depositor's tokens gone, the supply back where it was before their mint
    assert a.balance(depositor) == held_a
    assert int(a.usdc.functions.totalSupply().call()) == supply_a

    message = _filled(sent, FINALITY_FAST, fee)
    good = attest(message, attesters)
    sigs = [good[:65], good[65:]]
    outsider = Attester(secrets.token_bytes(32))
    refusals = {
        "Invalid signature order or dupe": sigs[1] + sigs[0],
        "Invalid attestation length": sigs[0],
        "Invalid signature: not attester": attest(message, [attesters[0], outsider]),
    }
    for reason, attestation in refusals.items():
        assert reason in _revert_reason(
            b.mt.functions.receiveMessage(message, attestation), stranger
        )
    # tampered: the amount raised after signing
    decoded = CctpMessage.decode(message)
    raised = replace(BurnBody.decode(decoded.body), amount=amount * 10).encode()
    tampered = replace(decoded, body=raised).encode()
    reason = _revert_reason(b.mt.functions.receiveMessage(tampered, good), stranger)
    assert "Invalid signature" in reason
    # a message for test-a is refused on test-b
    elsewhere = replace(decoded, destination_domain=a.domain).encode()
    reason = _revert_reason(
        b.mt.functions.receiveMessage(elsewhere, attest(elsewhere, attesters)), stranger
    )
    assert "Invalid destination domain" in reason

    fee_recipient = b.tm.functions.feeRecipient().call()
    before_recipient, before_fee = b.balance(recipient), b.balance(fee_recipient)
    minted = b.mined(b.mt.functions.receiveMessage(message, good).transact({"from": stranger}))
    assert b.balance(recipient) == before_recipient + amount - fee
    assert b.balance(fee_recipient) == before_fee + fee
    assert b.mt.functions.usedNonces(decoded.nonce).call() == 1
    (received,) = b.mt.events.MessageReceived().process_receipt(minted, errors=DISCARD)
    assert received["args"]["caller"] == stranger
    assert received["args"]["nonce"] == decoded.nonce
    assert received["args"]["sourceDomain"] == a.domain
    assert received["args"]["finalityThresholdExecuted"] == FINALITY_FAST
    assert received["args"]["messageBody"] == decoded.body

    # replay: refused, nothing minted again
    reason = _revert_reason(b.mt.functions.receiveMessage(message, good), stranger)
    assert "Nonce already used" in reason
    assert b.balance(recipient) == before_recipient + amount - fee


def test_standard_finality_and_the_finality_rules(
    sides: tuple[Side, Side], attesters: list[Attester]
) -> None:
    a, b = sides
    depositor, recipient = a.w3.eth.accounts[4], b.w3.eth.accounts[5]
    caller = b.w3.eth.accounts[6]
    _, sent = _burn(a, b, depositor, recipient, 2_000_000, 0, FINALITY_STANDARD,
                    caller=address_to_bytes32(caller))  # fmt: skip
    # attested fast for a message that asked for standard: refused
    early = _filled(sent, FINALITY_FAST, 0)
    reason = _revert_reason(b.mt.functions.receiveMessage(early, attest(early, attesters)), caller)
    assert "Finality below" in reason
    final = _filled(sent, FINALITY_STANDARD, 0)
    attestation = attest(final, attesters)
    # a destination caller is set: anyone else is refused
    other = b.w3.eth.accounts[7]
    assert "Invalid caller" in _revert_reason(
        b.mt.functions.receiveMessage(final, attestation), other
    )
    before = b.balance(recipient)
    b.mined(b.mt.functions.receiveMessage(final, attestation).transact({"from": caller}))
    assert b.balance(recipient) == before + 2_000_000


def test_bad_burns_are_refused(sides: tuple[Side, Side]) -> None:
    a, b = sides
    depositor = a.w3.eth.accounts[8]
    held = a.balance(depositor)
    a.mined(a.usdc.functions.mint(depositor, 10_000).transact({"from": a.owner}))
    a.mined(a.usdc.functions.approve(a.tm.address, 10_000).transact({"from": depositor}))
    to = address_to_bytes32(depositor)
    cases = {
        "Amount must be nonzero": (0, b.domain, to, 0),
        "Mint recipient must be nonzero": (1_000, b.domain, bytes(32), 0),
        "Max fee must be less than amount": (1_000, b.domain, to, 1_000),
        "No TokenMessenger for domain": (1_000, 9_999, to, 0),
    }
    for reason, (amount, domain, recipient, max_fee) in cases.items():
        call = a.tm.functions.depositForBurn(
            amount, domain, recipient, a.usdc.address, bytes(32), max_fee, FINALITY_FAST
        )
        assert reason in _revert_reason(call, depositor)
    # only the local messenger sends; only the owner mints or burns besides minters
    call = a.mt.functions.sendMessage(b.domain, to, bytes(32), FINALITY_FAST, b"x")
    assert "not the local TokenMessenger" in _revert_reason(call, depositor)
    with pytest.raises(ContractLogicError):
        a.usdc.functions.burn(1).call({"from": depositor})
    assert a.balance(depositor) == held + 10_000


def test_a_burn_must_allow_the_minimum_fee_the_controller_sets(sides: tuple[Side, Side]) -> None:
    """v2.1's minFee (1/1000 basis points of the amount, 0 by default here): a
    burn whose maxFee is below amount * minFee / 10^7 (at least one unit)
    reverts "Insufficient max fee"; only the min fee controller sets it."""
    a, b = sides
    depositor = a.w3.eth.accounts[14 % len(a.w3.eth.accounts)]
    a.mined(a.usdc.functions.mint(depositor, 2_000_000).transact({"from": a.owner}))
    a.mined(a.usdc.functions.approve(a.tm.address, 2_000_000).transact({"from": depositor}))
    to = address_to_bytes32(depositor)
    assert a.tm.functions.minFee().call() == 0
    assert a.tm.functions.MIN_FEE_MULTIPLIER().call() == 10_000_000
    assert a.tm.functions.minFeeController().call() == a.owner
    assert a.tm.functions.getMinFeeAmount(1_000_000).call() == 0

    def burn(amount: int, max_fee: int, finality: int = FINALITY_FAST) -> Any:
        return a.tm.functions.depositForBurn(
            amount, b.domain, to, a.usdc.address, bytes(32), max_fee, finality
        )

    burn(1_000_000, 0).call({"from": depositor})  # no minimum yet
    assert "not the min fee controller" in _revert_reason(a.tm.functions.setMinFee(1), depositor)
    assert "Min fee too high" in _revert_reason(a.tm.functions.setMinFee(10_000_000), a.owner)
    a.mined(a.tm.functions.setMinFee(1_000).transact({"from": a.owner}))  # 1 basis point
    try:
        assert a.tm.functions.getMinFeeAmount(1_000_000).call() == 100
        assert a.tm.functions.getMinFeeAmount(5_000).call() == 1  # never below one unit
        assert "Amount too low" in _revert_reason(a.tm.functions.getMinFeeAmount(1), depositor)
        for finality in (FINALITY_FAST, FINALITY_STANDARD):  # every burn, as v2.1's
            reason = _revert_reason(burn(1_000_000, 99, finality), depositor)
            assert "Insufficient max fee" in reason
            burn(1_000_000, 100, finality).call({"from": depositor})
    finally:
        a.mined(a.tm.functions.setMinFee(0).transact({"from": a.owner}))


def test_a_fast_message_past_its_expiration_block_waits_for_its_re_attestation(
    sides: tuple[Side, Side], attesters: list[Attester]
) -> None:
    """A fast attestation names an expirationBlock on the destination: a mint
    at or past it reverts "Message expired and must be re-signed" through
    receiveMessage and leaves the nonce unused, so the same message
    re-attested as finalized (expirationBlock 0) mints, once."""
    from qtg_world.chains.local import rpc

    a, b = sides
    depositor, recipient, relayer = (
        a.w3.eth.accounts[15 % len(a.w3.eth.accounts)],
        b.w3.eth.accounts[16 % len(b.w3.eth.accounts)],
        b.w3.eth.accounts[17 % len(b.w3.eth.accounts)],
    )
    amount, fee = 1_000_000, 100
    _, sent = _burn(a, b, depositor, recipient, amount, 1_000, FINALITY_FAST)
    nonce = secrets.token_bytes(32)
    expiration = int(b.w3.eth.block_number) + 5
    body = replace(BurnBody.decode(sent.body), fee_executed=fee, expiration_block=expiration)
    fast = replace(
        sent, nonce=nonce, finality_threshold_executed=FINALITY_FAST, body=body.encode()
    ).encode()
    b.mt.functions.receiveMessage(fast, attest(fast, attesters)).call({"from": relayer})
    rpc(b.chain.rpc_url, "anvil_mine", [hex(10)])
    reason = _revert_reason(b.mt.functions.receiveMessage(fast, attest(fast, attesters)), relayer)
    assert "Message expired and must be re-signed" in reason
    assert b.mt.functions.usedNonces(nonce).call() == 0

    again = replace(
        CctpMessage.decode(fast),
        finality_threshold_executed=FINALITY_STANDARD,
        body=replace(body, expiration_block=0).encode(),
    ).encode()
    before = b.balance(recipient)
    mint = b.mt.functions.receiveMessage(again, attest(again, attesters))
    b.mined(mint.transact({"from": relayer}))
    assert b.balance(recipient) == before + amount - fee
    assert b.mt.functions.usedNonces(nonce).call() == 1
    reason = _revert_reason(b.mt.functions.receiveMessage(fast, attest(fast, attesters)), relayer)
    assert "Nonce already used" in reason
