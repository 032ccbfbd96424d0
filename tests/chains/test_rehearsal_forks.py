"""The forks a rehearsal runs on (qtg_rehearsal.forks, .proxy, .stand_ins),
forking the local chains as a rehearsal forks a real one.

What an operator relies on: a transaction signed by a stand-in runs on the
fork as the treasury account itself (its balance, its nonce), is read back
under the hash the engine recorded (receipt, transaction, logs), and changes
nothing on the chain that was forked; the stand-in's bytes are worthless on
the real chain (they recover to an account that holds nothing); the same
bytes again are "already known"; an RPC that serves another chain than the
registry says is refused; a fork's CCTP transmitter trusts the rehearsal's
attesters and the real one does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chain_support import LocalChainSet
from evm_support import usdc_balance, web3_of
from web3 import Web3

from qtg_rehearsal.forks import Fork, ForkError, head_block, rpc, start_fork, trust_attesters
from qtg_rehearsal.stand_ins import StandIns
from qtg_runner.chains.evm import Fees, eip1559_transaction
from qtg_runner.chains.evm_rpc import EvmRpc, RpcError
from qtg_world.chains.local import RunningChain, load_artifact

pytestmark = [pytest.mark.chain, pytest.mark.slow]

UNITS = 10**6


@pytest.fixture
def fork_of_a(local_chain_set: LocalChainSet, tmp_path: Path) -> Iterator[tuple[Fork, StandIns]]:
    chain = local_chain_set.chains[0]
    treasury = local_chain_set.treasury[0].address.lower()
    stand_ins = StandIns([("keystore:treasury-1", treasury)])
    fork = start_fork(
        chain.key,
        chain.chain_id,
        chain.rpc_url,
        head_block(chain.rpc_url),
        stand_ins.senders(),
        tmp_path,
    )
    yield fork, stand_ins
    fork.stop()


def usdc_transfer(chain: RunningChain, to: str, amount: int) -> bytes:
    usdc = web3_of(chain).eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    data: str = usdc.encode_abi("transfer", [Web3.to_checksum_address(to), amount])
    return bytes.fromhex(data[2:])


def nonce_of(url: str, address: str) -> int:
    return int(str(rpc(url, "eth_getTransactionCount", [address, "pending"])), 16)


def wait_receipt(rpc_client: EvmRpc, tx_hash: str) -> Any:
    async def wait() -> Any:
        for _ in range(100):
            receipt = await rpc_client.receipt(tx_hash)
            if receipt is not None:
                return receipt
            await asyncio.sleep(0.1)
        raise AssertionError(f"{tx_hash} not mined on the fork")

    return asyncio.run(wait())


def test_a_stand_ins_transfer_runs_as_the_treasury_on_the_fork_alone(
    local_chain_set: LocalChainSet, fork_of_a: tuple[Fork, StandIns]
) -> None:
    fork, stand_ins = fork_of_a
    chain = local_chain_set.chains[0]
    sender = local_chain_set.treasury[0].address.lower()
    recipient = local_chain_set.treasury[1].address.lower()
    real_nonce, real_balance = nonce_of(chain.rpc_url, sender), usdc_balance(chain, recipient)
    stand_in = stand_ins.by_signer["keystore:treasury-1"]
    assert stand_in.address == sender and stand_in.stand_in_address != sender

    tx = eip1559_transaction(
        chain.chain_id,
        nonce_of(fork.url, sender),
        chain.contracts["MockUSDC"],
        0,
        usdc_transfer(chain, recipient, 7 * UNITS),
        100_000,
        Fees(10**10, 10**9),
    )
    signed = asyncio.run(stand_in.sign_transaction(tx))

    async def send() -> str:
        client = EvmRpc(fork.url)
        try:
            return await client.send_raw_transaction(signed.raw)
        finally:
            await client.aclose()

    assert asyncio.run(send()) == signed.tx_hash
    client = EvmRpc(fork.url)
    receipt = wait_receipt(client, signed.tx_hash)
    assert receipt.succeeded
    assert receipt.tx_hash == signed.tx_hash and receipt.sender == sender
    assert all(log.tx_hash == signed.tx_hash for log in receipt.logs)
    raw_tx = rpc(fork.url, "eth_getTransactionByHash", [signed.tx_hash])
    assert raw_tx["hash"] == signed.tx_hash and raw_tx["from"].lower() == sender
    logs = rpc(
        fork.url,
        "eth_getLogs",
        [{"address": chain.contracts["MockUSDC"], "fromBlock": hex(receipt.block_number),
          "toBlock": hex(receipt.block_number)}],
    )  # fmt: skip
    assert logs and {log["transactionHash"] for log in logs} == {signed.tx_hash}

    # the same bytes again: already known, nothing sent twice
    with pytest.raises(RpcError, match="already known"):
        asyncio.run(send())

    # the fork moved the treasury's USDC; the forked chain did not move at all
    fork_usdc = int(
        str(
            rpc(
                fork.anvil_url,
                "eth_call",
                [{"to": chain.contracts["MockUSDC"],
                  "data": "0x70a08231" + recipient[2:].rjust(64, "0")}, "latest"],
            )
        ),
        16,
    )  # fmt: skip
    assert fork_usdc == real_balance + 7 * UNITS
    assert nonce_of(chain.rpc_url, sender) == real_nonce
    assert usdc_balance(chain, recipient) == real_balance

    # the stand-in's bytes are worthless on the real chain: they recover to
    # the stand-in's own address, which holds nothing
    with pytest.raises(Exception, match=r"(?i)insufficient funds"):
        rpc(chain.rpc_url, "eth_sendRawTransaction", [signed.raw_hex])
    asyncio.run(client.aclose())


def test_an_rpc_of_another_chain_is_refused(local_chain_set: LocalChainSet, tmp_path: Path) -> None:
    a, b = local_chain_set.chains
    with pytest.raises(
        ForkError, match=f"serves chain id {b.chain_id}, the registry says {a.chain_id}"
    ):
        start_fork(a.key, a.chain_id, b.rpc_url, head_block(b.rpc_url), {}, tmp_path)


def test_the_forks_transmitters_trust_the_rehearsals_attesters_alone(
    local_chain_set: LocalChainSet, tmp_path: Path
) -> None:
    forks = [
        start_fork(c.key, c.chain_id, c.rpc_url, head_block(c.rpc_url), {}, tmp_path)
        for c in local_chain_set.chains
    ]
    try:
        transmitters = {
            c.key: c.contracts["MessageTransmitterV2"].lower() for c in local_chain_set.chains
        }
        attesters = trust_attesters(forks, transmitters)
        abi = load_artifact("MessageTransmitterV2")["abi"]
        for chain, fork in zip(local_chain_set.chains, forks, strict=True):
            on_fork = Web3(Web3.HTTPProvider(fork.url)).eth.contract(
                address=Web3.to_checksum_address(transmitters[chain.key]), abi=abi
            )
            real = web3_of(chain).eth.contract(
                address=Web3.to_checksum_address(transmitters[chain.key]), abi=abi
            )
            assert on_fork.functions.signatureThreshold().call() == len(attesters)
            for attester in attesters:
                assert on_fork.functions.isEnabledAttester(attester.address).call()
                assert not real.functions.isEnabledAttester(attester.address).call()
    finally:
        for fork in forks:
            fork.stop()
