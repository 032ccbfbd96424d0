"""The fake Iris (qtg_world.iris) over real HTTP against the local chains:
an unseen burn is 404 (or an empty list), then pending, then complete after its
finality's delay; the complete message and attestation mint on the destination
through MessageTransmitterV2; fast completes before standard; a fast
attestation expires at a block of the destination, and its re-attestation
(POST /v2/reattest/{nonce}, with its errors) mints past it; the rate limit's
429 and its block window. Every wait polls a condition under a deadline."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from chain_support import LocalChainSet
from web3 import HTTPProvider, Web3

from qtg_runner.chains.cctp import (
    FINALITY_FAST,
    FINALITY_STANDARD,
    BurnBody,
    CctpMessage,
    address_to_bytes32,
)
from qtg_world.chains.cctp import Attester, cctp_domain, load_attesters
from qtg_world.chains.local import RunningChain, load_artifact, rpc
from qtg_world.iris import REATTEST_REQUESTED, IrisConfig, IrisHandle, serve

pytestmark = [pytest.mark.chain, pytest.mark.slow]

FAST_S, STANDARD_S = 4.0, 8.0  # wide enough for a loaded machine to see "pending"


def _w3(chain: RunningChain) -> Web3:
    return Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))


def _contract(w3: Web3, chain: RunningChain, name: str) -> Any:
    return w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts[name]), abi=load_artifact(name)["abi"]
    )


def _mined(w3: Web3, chain: RunningChain, tx_hash: Any) -> Any:
    receipt = w3.eth.wait_for_transaction_receipt(
        tx_hash, timeout=chain.block_time * 10, poll_latency=0.1
    )
    assert receipt["status"] == 1
    return receipt


def _wait_for(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def attesters(local_chain_set: LocalChainSet) -> list[Attester]:
    return load_attesters(local_chain_set.state_dir)


@pytest.fixture
def iris(local_chain_set: LocalChainSet, attesters: list[Attester]) -> Iterator[IrisHandle]:
    handle = serve(
        local_chain_set.chains,
        attesters,
        IrisConfig(fast_delay_s=FAST_S, standard_delay_s=STANDARD_S, fast_fee_bps=10),
    )
    yield handle
    handle.stop()


def _send_burn(
    chain: RunningChain,
    dst: RunningChain,
    depositor: str,
    recipient: str,
    amount: int,
    max_fee: int,
    finality: int,
) -> str:
    """Mint, approve and send depositForBurn; returns its hash at once (not awaited)."""
    w3 = _w3(chain)
    usdc, tm = _contract(w3, chain, "MockUSDC"), _contract(w3, chain, "TokenMessengerV2")
    _mined(w3, chain, usdc.functions.mint(depositor, amount).transact({"from": w3.eth.accounts[0]}))
    _mined(w3, chain, usdc.functions.approve(tm.address, amount).transact({"from": depositor}))
    tx_hash = tm.functions.depositForBurn(
        amount, cctp_domain(dst), address_to_bytes32(recipient), usdc.address, bytes(32),
        max_fee, finality,
    ).transact({"from": depositor})  # fmt: skip
    return "0x" + bytes(tx_hash).hex()


def _get(iris: IrisHandle, domain: int, tx_hash: str) -> httpx.Response:
    return httpx.get(f"{iris.url}/v2/messages/{domain}", params={"transactionHash": tx_hash})


def _status(iris: IrisHandle, domain: int, tx_hash: str) -> str:
    response = _get(iris, domain, tx_hash)
    if response.status_code == 404:
        return "404"
    assert response.status_code == 200, response.text
    return str(response.json()["messages"][0]["status"])


def test_unseen_then_pending_then_complete_and_the_attestation_mints(
    local_chain_set: LocalChainSet, iris: IrisHandle, attesters: list[Attester]
) -> None:
    a, b = local_chain_set.chains
    src = cctp_domain(a)
    unknown = "0x" + secrets.token_hex(32)
    assert _get(iris, src, unknown).status_code == 404
    assert _get(iris, 12345, unknown).status_code == 400
    assert _get(iris, src, "0x1234").status_code == 400

    wa, wb = _w3(a), _w3(b)
    depositor, recipient = wa.eth.accounts[10 % len(wa.eth.accounts)], wb.eth.accounts[9]
    amount, max_fee = 3_000_000, 4_000
    tx_hash = _send_burn(a, b, depositor, recipient, amount, max_fee, FINALITY_FAST)
    seen = [_status(iris, src, tx_hash)]
    assert seen[0] in ("404", "pending_confirmations")  # mined within a block (1 s)
    _mined(wa, a, tx_hash)
    seen.append(_wait_for("pending", lambda: _status(iris, src, tx_hash), 5))
    assert seen[-1] == "pending_confirmations"
    pending = _get(iris, src, tx_hash).json()["messages"][0]
    assert pending["attestation"] == "PENDING" and pending["cctpVersion"] == 2
    # complete once the burn's block is FAST_S old
    _wait_for("complete", lambda: _status(iris, src, tx_hash) == "complete", FAST_S + 5)
    (entry,) = _get(iris, src, tx_hash).json()["messages"]
    block_ts = wa.eth.get_block(wa.eth.get_transaction_receipt(tx_hash)["blockNumber"])["timestamp"]
    assert time.time() >= block_ts + FAST_S

    message = CctpMessage.decode(bytes.fromhex(entry["message"][2:]))
    assert entry["eventNonce"] == "0x" + message.nonce.hex() and message.nonce != bytes(32)
    assert message.finality_threshold_executed == FINALITY_FAST
    body = BurnBody.decode(message.body)
    assert body.fee_executed == amount * 10 // 10_000 <= max_fee
    assert entry["decodedMessage"]["decodedMessageBody"]["amount"] == str(amount)
    # a fast attestation expires a window of the destination's blocks ahead
    window = IrisConfig().fast_expiration_blocks
    assert wb.eth.block_number < body.expiration_block <= wb.eth.block_number + window
    assert entry["decodedMessage"]["decodedMessageBody"]["expirationBlock"] == str(
        body.expiration_block
    )
    assert _get(iris, src, tx_hash).json()["messages"][0]["message"] == entry["message"]
    assert entry["decodedMessage"]["finalityThresholdExecuted"] == "1000"

    # a restarted Iris attests the same nonce: no second mint is ever possible
    again = serve(local_chain_set.chains, attesters, IrisConfig(fast_delay_s=0))
    try:
        assert _get(again, src, tx_hash).json()["messages"][0]["eventNonce"] == entry["eventNonce"]
    finally:
        again.stop()

    usdc_b, mt_b = _contract(wb, b, "MockUSDC"), _contract(wb, b, "MessageTransmitterV2")
    before = int(usdc_b.functions.balanceOf(recipient).call())
    attestation = bytes.fromhex(entry["attestation"][2:])
    assert len(attestation) == 130
    mint = mt_b.functions.receiveMessage(bytes.fromhex(entry["message"][2:]), attestation)
    _mined(wb, b, mint.transact({"from": wb.eth.accounts[11 % len(wb.eth.accounts)]}))
    assert int(usdc_b.functions.balanceOf(recipient).call()) == before + amount - body.fee_executed
    assert mt_b.functions.usedNonces(message.nonce).call() == 1


def test_fast_completes_before_standard(local_chain_set: LocalChainSet, iris: IrisHandle) -> None:
    a, b = local_chain_set.chains
    wa = _w3(a)
    src = cctp_domain(a)
    standard = _send_burn(a, b, wa.eth.accounts[12 % len(wa.eth.accounts)], wa.eth.accounts[1],
                          1_000_000, 0, FINALITY_STANDARD)  # fmt: skip
    fast = _send_burn(a, b, wa.eth.accounts[13 % len(wa.eth.accounts)], wa.eth.accounts[1],
                      1_000_000, 100, FINALITY_FAST)  # fmt: skip
    _mined(wa, a, standard)
    _mined(wa, a, fast)
    _wait_for("fast complete", lambda: _status(iris, src, fast) == "complete", FAST_S + 5)
    fast_done = time.time()
    assert _status(iris, src, standard) == "pending_confirmations"
    _wait_for(
        "standard complete", lambda: _status(iris, src, standard) == "complete", STANDARD_S + 5
    )
    ts = wa.eth.get_block(wa.eth.get_transaction_receipt(standard)["blockNumber"])["timestamp"]
    assert time.time() >= ts + STANDARD_S > fast_done
    entry = _get(iris, src, standard).json()["messages"][0]
    message = CctpMessage.decode(bytes.fromhex(entry["message"][2:]))
    assert message.finality_threshold_executed == FINALITY_STANDARD
    assert BurnBody.decode(message.body).fee_executed == 0
    assert BurnBody.decode(message.body).expiration_block == 0  # standard never expires


def _reattest(handle: IrisHandle, nonce: str) -> httpx.Response:
    return httpx.post(f"{handle.url}/v2/reattest/{nonce}", json={})


def test_an_expired_fast_attestation_is_re_attested_as_finalized_and_mints_once(
    local_chain_set: LocalChainSet, attesters: list[Attester]
) -> None:
    """Past its expirationBlock a fast message reverts on the destination;
    POST /v2/reattest/{nonce} (200 as Circle's; 400 or 404 for what it cannot
    re-attest) and, once the burn is finalized, the messages answer the same
    message as finalized with expirationBlock 0: it mints, once."""
    window, standard_s = 4, 3.0
    handle = serve(
        local_chain_set.chains,
        attesters,
        IrisConfig(fast_delay_s=0, standard_delay_s=standard_s, fast_expiration_blocks=window),
    )
    a, b = local_chain_set.chains
    src = cctp_domain(a)
    wa, wb = _w3(a), _w3(b)
    depositor, recipient = wa.eth.accounts[14 % len(wa.eth.accounts)], wb.eth.accounts[5]
    relayer = wb.eth.accounts[16 % len(wb.eth.accounts)]
    try:
        assert _reattest(handle, "0x1234").status_code == 400
        unknown = _reattest(handle, "0x" + secrets.token_hex(32))
        assert unknown.status_code == 404
        standard = _send_burn(a, b, depositor, recipient, 1_000_000, 0, FINALITY_STANDARD)
        _mined(wa, a, standard)
        standard_nonce = _get(handle, src, standard).json()["messages"][0]["eventNonce"]
        assert _reattest(handle, standard_nonce).status_code == 400  # not pre-finality

        amount, max_fee = 2_000_000, 2_000
        tx_hash = _send_burn(a, b, depositor, recipient, amount, max_fee, FINALITY_FAST)
        _mined(wa, a, tx_hash)
        _wait_for("complete", lambda: _status(handle, src, tx_hash) == "complete", 10)
        (fast,) = _get(handle, src, tx_hash).json()["messages"]
        message = CctpMessage.decode(bytes.fromhex(fast["message"][2:]))
        body = BurnBody.decode(message.body)
        assert 0 < body.expiration_block <= wb.eth.block_number + window
        mt_b = _contract(wb, b, "MessageTransmitterV2")
        receive = mt_b.functions.receiveMessage(
            bytes.fromhex(fast["message"][2:]), bytes.fromhex(fast["attestation"][2:])
        )
        rpc(b.rpc_url, "anvil_mine", [hex(window + 1)])  # the destination past expirationBlock
        with pytest.raises(Exception, match="Message expired and must be re-signed"):
            receive.call({"from": relayer})

        answer = _reattest(handle, fast["eventNonce"])
        assert answer.status_code == 200
        assert answer.json() == {"message": REATTEST_REQUESTED, "nonce": fast["eventNonce"]}
        assert _reattest(handle, fast["eventNonce"]).status_code == 200  # asked again: the same

        def reattested() -> Any:
            (entry,) = _get(handle, src, tx_hash).json()["messages"]
            expiration = entry["decodedMessage"]["decodedMessageBody"]["expirationBlock"]
            return entry if expiration == "0" else None

        entry = _wait_for("the re-attestation", reattested, standard_s + 5)
        block_ts = wa.eth.get_block(wa.eth.get_transaction_receipt(tx_hash)["blockNumber"])
        assert time.time() >= block_ts["timestamp"] + standard_s  # once the burn is final
        again = CctpMessage.decode(bytes.fromhex(entry["message"][2:]))
        assert entry["eventNonce"] == fast["eventNonce"] and again.nonce == message.nonce
        assert again.finality_threshold_executed == FINALITY_STANDARD
        assert BurnBody.decode(again.body) == replace(body, expiration_block=0)
        assert replace(again, finality_threshold_executed=FINALITY_FAST, body=message.body) == (
            message
        )

        usdc_b = _contract(wb, b, "MockUSDC")
        before = int(usdc_b.functions.balanceOf(recipient).call())
        mint = mt_b.functions.receiveMessage(
            bytes.fromhex(entry["message"][2:]), bytes.fromhex(entry["attestation"][2:])
        )
        _mined(wb, b, mint.transact({"from": relayer}))
        assert int(usdc_b.functions.balanceOf(recipient).call()) == (
            before + amount - body.fee_executed
        )
        with pytest.raises(Exception, match="Nonce already used"):
            mint.call({"from": relayer})
    finally:
        handle.stop()


def test_empty_list_mode(local_chain_set: LocalChainSet, attesters: list[Attester]) -> None:
    handle = serve(local_chain_set.chains, attesters, IrisConfig(not_found="empty"))
    try:
        response = _get(
            handle, cctp_domain(local_chain_set.chains[0]), "0x" + secrets.token_hex(32)
        )
        assert (response.status_code, response.json()) == (200, {"messages": []})
    finally:
        handle.stop()


def test_over_the_rate_limit_every_request_gets_429_for_the_block_window(
    local_chain_set: LocalChainSet, attesters: list[Attester]
) -> None:
    window = 3.0
    handle = serve(
        local_chain_set.chains,
        attesters,
        IrisConfig(rate_limit_per_s=5, block_window_s=window * 10, time_scale=0.1),
    )
    domain = cctp_domain(local_chain_set.chains[0])
    unknown = "0x" + secrets.token_hex(32)
    try:
        with httpx.Client() as client:
            url = f"{handle.url}/v2/messages/{domain}"

            def status() -> int:
                return client.get(url, params={"transactionHash": unknown}).status_code

            # one request after another until the limit is passed: on a loaded
            # machine fewer than six may fit in a second, so send on until one does
            codes: list[int] = []
            deadline = time.monotonic() + 30
            while 429 not in codes and time.monotonic() < deadline:
                blocked_at = time.monotonic()
                codes.append(status())
            assert 429 in codes, f"no 429 in {len(codes)} requests"
            # the block began while the first 429's request was answered (no sooner
            # than it was sent)
            first = codes.index(429)
            assert codes[:first] == [404] * first and first >= 5
            # inside the window every request is refused
            while time.monotonic() < blocked_at + window - 1:
                assert status() == 429
            response = client.get(url, params={"transactionHash": unknown})
            assert response.status_code == 429 and int(response.headers["Retry-After"]) >= 1
            # the block lasts its window, then requests are answered again
            _wait_for("the block to end", lambda: status() != 429, window + 5)
            assert time.monotonic() - blocked_at >= window
            # on demand
            handle.block(0.5)
            assert status() == 429
            handle.unblock()
            assert status() == 404
    finally:
        handle.stop()
