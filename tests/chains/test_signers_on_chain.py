"""Signers against a real chain: a transaction signed by an `env:` signer and by
the local treasury's `keystore:` signers (loaded from the environment
`runner_env` gives a runner) is accepted by anvil, mined from the signer's
address, and hashed as the signer said."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from chain_support import LocalChainSet
from eth_account import Account
from web3 import HTTPProvider, Web3

from qtg_runner.signers import SignedTransaction, Signer, SignerSet, load
from qtg_world.chains.local import RunningChain, load_artifact, rpc

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def _web3(chain: RunningChain) -> Web3:
    return Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))


def _eip1559(w3: Web3, chain: RunningChain, signer: Signer, **fields: Any) -> dict[str, Any]:
    base_fee = int(w3.eth.get_block("latest")["baseFeePerGas"])
    return {
        "type": 2,
        "chainId": chain.chain_id,
        "nonce": w3.eth.get_transaction_count(Web3.to_checksum_address(signer.address)),
        "maxPriorityFeePerGas": 10**9,
        "maxFeePerGas": 2 * base_fee + 10**9,
        "value": 0,
        "data": b"",
        **fields,
    }


def _send(w3: Web3, chain: RunningChain, signer: Signer, tx: dict[str, Any]) -> Any:
    signed = asyncio.run(signer.sign_transaction(tx))
    assert isinstance(signed, SignedTransaction)
    assert signed.tx_hash == "0x" + bytes(Web3.keccak(signed.raw)).hex()
    sent = w3.eth.send_raw_transaction(signed.raw)
    assert "0x" + bytes(sent).hex() == signed.tx_hash
    receipt = w3.eth.wait_for_transaction_receipt(
        sent, timeout=chain.block_time * 10, poll_latency=0.1
    )
    assert receipt["status"] == 1
    assert str(receipt["from"]).lower() == signer.address
    assert "0x" + bytes(receipt["transactionHash"]).hex() == signed.tx_hash
    return receipt


def _usdc_balance(usdc: Any, signer: Signer) -> int:
    return int(usdc.functions.balanceOf(Web3.to_checksum_address(signer.address)).call())


def test_an_env_signer_sends_eth_that_anvil_accepts(local_chains: list[RunningChain]) -> None:
    chain = local_chains[0]
    w3 = _web3(chain)
    account = Account.create()
    signer = load("env:QTG_SIGNER_TEST", {"QTG_SIGNER_TEST": "0x" + account.key.hex()})
    assert signer.address == account.address.lower()
    rpc(chain.rpc_url, "anvil_setBalance", [account.address, hex(10**18)])
    recipient = Web3.to_checksum_address(Account.create().address)

    _send(w3, chain, signer, _eip1559(w3, chain, signer, to=recipient, value=12345, gas=21000))

    assert w3.eth.get_balance(recipient) == 12345


def test_the_treasury_keystore_signers_move_usdc_on_every_chain(
    local_chain_set: LocalChainSet,
) -> None:
    signers = SignerSet.load([k.signer_id for k in local_chain_set.treasury],
                             env=local_chain_set.runner_env())  # fmt: skip
    first, second = (signers.for_account(k.address, k.signer_id) for k in local_chain_set.treasury)
    for chain in local_chain_set.chains:
        w3 = _web3(chain)
        usdc = w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
            abi=load_artifact("MockUSDC")["abi"],
        )
        pair = (first, second)
        before = [_usdc_balance(usdc, s) for s in pair]
        # there and back, each signed by the account that sends
        for sender, to, amount in ((first, second, 2_500_000), (second, first, 1_000_000)):
            data = usdc.encode_abi("transfer", [Web3.to_checksum_address(to.address), amount])
            tx = _eip1559(w3, chain, sender, to=usdc.address, data=data, gas=100_000)
            receipt = _send(w3, chain, sender, tx)
            (event,) = usdc.events.Transfer().process_receipt(receipt)
            assert (str(event["args"]["from"]).lower(), str(event["args"]["to"]).lower()) == (
                sender.address,
                to.address,
            )
            assert event["args"]["value"] == amount
        assert [_usdc_balance(usdc, s) for s in pair] == [
            before[0] - 1_500_000,
            before[1] + 1_500_000,
        ]
