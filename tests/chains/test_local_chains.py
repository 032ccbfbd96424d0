"""The local chains as real JSON-RPC nodes, and the mocked USDC on each: deployed
by the same code as `qtg chains up`, then driven with web3.py through anvil's
unlocked accounts (no key is held anywhere in the tests)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from chain_support import TEST_CHAINS
from web3 import HTTPProvider, Web3
from web3.exceptions import ContractLogicError

from qtg_runner.chains.evm_rpc import MULTICALL3
from qtg_world.chains.local import (
    ChainSpec,
    RunningChain,
    load_artifact,
    mined_at_once,
    read_state,
    rpc,
    write_state,
)
from qtg_world.chains.start import start_chains

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def _web3(chain: RunningChain) -> Web3:
    return Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))


def _usdc(w3: Web3, chain: RunningChain) -> Any:
    return w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )


def _mined(w3: Web3, chain: RunningChain, tx_hash: Any) -> Any:
    receipt = w3.eth.wait_for_transaction_receipt(
        tx_hash, timeout=chain.block_time * 10, poll_latency=0.1
    )
    assert receipt["status"] == 1
    return receipt


def _mines_at_its_block_time(chain: RunningChain) -> None:
    """Interval mining, not a block per transaction: two blocks past the head
    come (waited for with a deadline), their block time apart."""
    assert rpc(chain.rpc_url, "anvil_getAutomine") is False
    w3 = _web3(chain)
    target = w3.eth.block_number + 2
    deadline = time.monotonic() + chain.block_time * 6
    while w3.eth.block_number < target:
        assert time.monotonic() < deadline, f"{chain.key} mines no blocks"
        time.sleep(0.1)
    newer, older = w3.eth.get_block(target), w3.eth.get_block(target - 1)
    assert newer["timestamp"] - older["timestamp"] == chain.block_time


def test_each_chain_answers_with_its_own_chain_id_and_block_time(
    local_chains: list[RunningChain],
) -> None:
    assert [(c.key, c.chain_id, c.block_time) for c in local_chains] == list(TEST_CHAINS)
    assert len({c.port for c in local_chains}) == len(local_chains)
    for chain in local_chains:
        assert chain.rpc_url.startswith("http://127.0.0.1:")
        assert int(rpc(chain.rpc_url, "eth_chainId"), 16) == chain.chain_id
        # set up (deployed, funded) a transaction at a time, then paced again
        _mines_at_its_block_time(chain)


def test_a_setup_that_fails_leaves_the_chains_mining_at_their_block_time(
    local_chains: list[RunningChain],
) -> None:
    with pytest.raises(RuntimeError, match="the setup failed"), mined_at_once(local_chains):
        for chain in local_chains:
            assert rpc(chain.rpc_url, "anvil_getAutomine") is True
            # a transaction is mined as it arrives (automine replaces interval
            # mining: no block comes otherwise); anvil's miner answers the send
            # before it has mined, so the receipt is awaited, with a deadline
            w3 = _web3(chain)
            tx_hash = w3.eth.send_transaction(
                {"from": w3.eth.accounts[0], "to": w3.eth.accounts[1], "value": 1}
            )
            receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=10, poll_latency=0.02)
            assert receipt["status"] == 1
        raise RuntimeError("the setup failed")
    for chain in local_chains:
        _mines_at_its_block_time(chain)


@pytest.mark.parametrize("index", range(len(TEST_CHAINS)), ids=[c[0] for c in TEST_CHAINS])
def test_usdc_moves_between_two_accounts_with_balances_checked(
    local_chains: list[RunningChain], index: int
) -> None:
    chain = local_chains[index]
    w3 = _web3(chain)
    usdc = _usdc(w3, chain)
    owner = w3.eth.accounts[0]
    assert chain.deployer == owner
    assert usdc.functions.decimals().call() == 6
    assert usdc.functions.symbol().call() == "USDC"
    # accounts of this test alone: the session's chains are shared
    sender, recipient = w3.eth.accounts[2 + 2 * index], w3.eth.accounts[3 + 2 * index]
    before_sender = usdc.functions.balanceOf(sender).call()
    before_recipient = usdc.functions.balanceOf(recipient).call()
    supply = usdc.functions.totalSupply().call()

    _mined(w3, chain, usdc.functions.mint(sender, 1_000_000_000).transact({"from": owner}))
    receipt = _mined(
        w3, chain, usdc.functions.transfer(recipient, 250_500_000).transact({"from": sender})
    )

    assert usdc.functions.balanceOf(sender).call() == before_sender + 1_000_000_000 - 250_500_000
    assert usdc.functions.balanceOf(recipient).call() == before_recipient + 250_500_000
    assert usdc.functions.totalSupply().call() == supply + 1_000_000_000
    (event,) = usdc.events.Transfer().process_receipt(receipt)
    assert event["address"] == usdc.address
    assert (event["args"]["from"], event["args"]["to"], event["args"]["value"]) == (
        sender,
        recipient,
        250_500_000,
    )


def test_mint_is_the_owners_alone_and_overdrafts_are_refused(
    local_chains: list[RunningChain],
) -> None:
    chain = local_chains[0]
    w3 = _web3(chain)
    usdc = _usdc(w3, chain)
    stranger, other = w3.eth.accounts[8], w3.eth.accounts[9]
    supply = usdc.functions.totalSupply().call()
    with pytest.raises(ContractLogicError):
        usdc.functions.mint(stranger, 5).transact({"from": stranger})
    balance = usdc.functions.balanceOf(stranger).call()
    with pytest.raises(ContractLogicError):
        usdc.functions.transfer(other, balance + 1).transact({"from": stranger})
    assert usdc.functions.totalSupply().call() == supply
    assert usdc.functions.balanceOf(stranger).call() == balance


def test_approve_and_transfer_from_spend_the_allowance(
    local_chains: list[RunningChain],
) -> None:
    chain = local_chains[0]
    w3 = _web3(chain)
    usdc = _usdc(w3, chain)
    owner, holder, spender, to = (w3.eth.accounts[i] for i in (0, 6, 7, 1))
    _mined(w3, chain, usdc.functions.mint(holder, 100).transact({"from": owner}))
    receipt = _mined(w3, chain, usdc.functions.approve(spender, 60).transact({"from": holder}))
    (approval,) = usdc.events.Approval().process_receipt(receipt)
    assert (approval["args"]["owner"], approval["args"]["spender"]) == (holder, spender)
    assert approval["args"]["value"] == 60
    with pytest.raises(ContractLogicError):
        usdc.functions.transferFrom(holder, to, 61).transact({"from": spender})
    held, received = usdc.functions.balanceOf(holder).call(), usdc.functions.balanceOf(to).call()
    _mined(w3, chain, usdc.functions.transferFrom(holder, to, 40).transact({"from": spender}))
    assert usdc.functions.allowance(holder, spender).call() == 20
    assert usdc.functions.balanceOf(holder).call() == held - 40
    assert usdc.functions.balanceOf(to).call() == received + 40


def test_chains_of_an_earlier_build_get_multicall3_placed_as_they_run(
    local_chain_set: Any,
) -> None:
    """Chains started before Multicall3 was part of the world are not
    refused as an older build: start_chains places it on them, and records
    it, since it takes no deployment."""
    state_dir = local_chain_set.state_dir
    chains = read_state(state_dir)
    for chain in chains:
        rpc(chain.rpc_url, "anvil_setCode", [MULTICALL3, "0x"])
        del chain.contracts["Multicall3"]
    write_state(state_dir, chains)
    again = start_chains(state_dir, [ChainSpec(c.key, c.chain_id, c.port, c.block_time)
                                     for c in chains])  # fmt: skip
    assert [c.pid for c in again] == [c.pid for c in chains]  # the same chains, still running
    for chain in read_state(state_dir):
        assert chain.contracts["Multicall3"] == MULTICALL3
        code = rpc(chain.rpc_url, "eth_getCode", [MULTICALL3, "latest"])
        assert code == load_artifact("Multicall3")["deployedBytecode"]
