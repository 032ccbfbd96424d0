"""The Stargate v2 local double on the local chains: one StargatePool for USDC
(contracts/StargatePool.sol: the pool with LayerZero's endpoint and Stargate's
TokenMessaging folded in) deployed on every chain by `start_chains`, beside the
CCTP double, so `qtg chains up` and the test fixtures get the same.

On each chain: the pool with the chain's LayerZero endpoint id
(``LOCAL_STARGATE_EIDS``, else ``STARGATE_EID_BASE`` + the chain id), the
relayer's account (anvil's unlocked account ``RELAYER_ACCOUNT_INDEX``: no key
of ours) as the only one that may deliver, ``POOL_LIQUIDITY`` of mocked USDC
minted to it, and every other chain's pool as a peer with a credit of as much
(what the pool may send there). The address goes into the chain's
``contracts`` in state.json (``StargatePool``).

The pool pulls what it sends from the sender: ``approve_pool`` gives it an
unlimited allowance from the local treasury accounts (sent as the account
through anvil's impersonation, so no key is read), called where the treasury
is funded. The relayer (qtg_runner.world.stargate) delivers from its unlocked
account.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qtg_runner.chains.local import ChainError, RunningChain, load_artifact, rpc

__all__ = [
    "BUS_OFT_CMD",
    "LOCAL_STARGATE_EIDS",
    "POOL_LIQUIDITY",
    "RELAYER_ACCOUNT_INDEX",
    "STARGATE_CONTRACTS",
    "approve_pool",
    "deploy_stargate",
    "relayer_address",
    "stargate_eid",
]

STARGATE_CONTRACTS = ("StargatePool",)

LOCAL_STARGATE_EIDS: dict[str, int] = {
    "local-a": 50101,
    "local-b": 50102,
    "test-a": 50111,
    "test-b": 50112,
}
"""The LayerZero endpoint ids of the known local chains: beside LayerZero's
real ranges (30xxx mainnets, 40xxx testnets), so a local message is never
mistaken for a real one."""

STARGATE_EID_BASE = 1_000_000
"""Another chain's endpoint id: this plus its chain id (unique, fits a uint32)."""

RELAYER_ACCOUNT_INDEX = 5
"""anvil's unlocked account that relays (delivers) messages; the pools trust it."""

POOL_LIQUIDITY = 1_000_000 * 10**6
"""Mocked USDC (6 decimals) minted to each pool, and each path's credit."""

BUS_OFT_CMD = b"\x00"
"""``oftCmd`` of a bus ride (``new bytes(1)``); a taxi's is empty."""

MAX_UINT256 = 2**256 - 1


def stargate_eid(chain: RunningChain) -> int:
    """The LayerZero endpoint id ``chain``'s pool is deployed with."""
    return LOCAL_STARGATE_EIDS.get(chain.key, STARGATE_EID_BASE + chain.chain_id)


def _w3(chain: RunningChain) -> Any:
    from web3 import HTTPProvider, Web3

    return Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))


def relayer_address(chain: RunningChain) -> str:
    """The relayer's account on ``chain`` (anvil's unlocked account)."""
    return str(_w3(chain).eth.accounts[RELAYER_ACCOUNT_INDEX])


def _wait(w3: Any, chain: RunningChain, tx_hash: Any, what: str) -> Any:
    receipt = w3.eth.wait_for_transaction_receipt(
        tx_hash, timeout=max(10.0, chain.block_time * 5.0), poll_latency=0.1
    )
    if receipt["status"] != 1:
        raise ChainError(f"{what} on {chain.key} failed: {receipt}")
    return receipt


def deploy_stargate(chains: Sequence[RunningChain]) -> None:
    """Deploy and wire a StargatePool on each of ``chains`` (each already has
    MockUSDC): deployed on every chain before any is awaited, then the wiring
    likewise. The addresses go into each ``chain.contracts``."""
    from web3 import Web3

    art = load_artifact("StargatePool")
    usdc_abi = load_artifact("MockUSDC")["abi"]
    w3s = [_w3(c) for c in chains]
    owners = [c.deployer or w3.eth.accounts[0] for c, w3 in zip(chains, w3s, strict=True)]
    sent = [
        w3.eth.contract(abi=art["abi"], bytecode=art["bytecode"])
        .constructor(
            Web3.to_checksum_address(c.contracts["MockUSDC"]),
            stargate_eid(c),
            w3.eth.accounts[RELAYER_ACCOUNT_INDEX],
        )
        .transact({"from": owner})
        for c, w3, owner in zip(chains, w3s, owners, strict=True)
    ]
    for chain, w3, tx_hash in zip(chains, w3s, sent, strict=True):
        chain.contracts["StargatePool"] = str(
            _wait(w3, chain, tx_hash, "deploying StargatePool")["contractAddress"]
        )
    pending: list[tuple[Any, RunningChain, Any]] = []
    for chain, w3, owner in zip(chains, w3s, owners, strict=True):
        tx: Any = {"from": owner, "gas": 300_000}
        pool = w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["StargatePool"]), abi=art["abi"]
        )
        usdc = w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["MockUSDC"]), abi=usdc_abi
        )
        calls = [usdc.functions.mint(pool.address, POOL_LIQUIDITY)]
        for other in chains:
            if other is chain:
                continue
            eid = stargate_eid(other)
            calls.append(
                pool.functions.setPeer(
                    eid, Web3.to_checksum_address(other.contracts["StargatePool"])
                )
            )
            calls.append(pool.functions.setCredit(eid, POOL_LIQUIDITY))
        pending.extend((w3, chain, call.transact(tx)) for call in calls)
    for w3, chain, tx_hash in pending:
        _wait(w3, chain, tx_hash, "wiring StargatePool")


def approve_pool(chain: RunningChain, owners: Sequence[str]) -> None:
    """An unlimited allowance of ``chain``'s USDC to its StargatePool from each
    of ``owners`` where it is below half of that, sent as the owner through
    anvil's impersonation (a local chain only: no key is read)."""
    from web3 import Web3

    if "StargatePool" not in chain.contracts:
        return
    w3 = _w3(chain)
    pool = Web3.to_checksum_address(chain.contracts["StargatePool"])
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    for owner in owners:
        address = Web3.to_checksum_address(owner)
        if int(usdc.functions.allowance(address, pool).call()) >= MAX_UINT256 // 2:
            continue
        rpc(chain.rpc_url, "anvil_impersonateAccount", [address])
        try:
            tx_hash = usdc.functions.approve(pool, MAX_UINT256).transact(
                {"from": address, "gas": 100_000}
            )
            _wait(w3, chain, tx_hash, f"approving the pool for {address}")
        finally:
            rpc(chain.rpc_url, "anvil_stopImpersonatingAccount", [address])
