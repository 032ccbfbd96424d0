"""The local CCIP double on the local chains, deployed by `start_chains`
(qtg_world.chains.start) so `qtg chains up` and the test fixtures get the
same; its codec is the runtime's (qtg_runner.chains.ccip).

On each local chain: the Router with the chain's selector, an OnRamp (the
Router's for every other chain, burning USDC through the chain's CCTP
TokenMessengerV2 as Chainlink's USDC pool does) and an OffRamp (every other
chain's OnRamp a source; the executing network's key its only transmitter;
USDC received through the chain's MessageTransmitterV2). The addresses go
into the chain's ``contracts`` in state.json (``CcipRouter``, ``CcipOnRamp``,
``CcipOffRamp``); ``ccip_selector`` is the chain's selector. A v1.5 lane
(``deploy_v1_5_lane``: a Router of its own, an EVM2EVMOnRamp and an
EVM2EVMOffRamp) is deployed by the tests that need one.

The executing network's key ("DON") and the ccip_stranded_reaper's keeper
account are keys of our own in the chains' encrypted keystore
(``keystore/ccip-don.json``, ``keystore/ccip-keeper.json``), funded with ETH
for gas on every chain. ``approve_router`` gives the Router a bounded standing
allowance of the treasury accounts' USDC (``ROUTER_ALLOWANCE``), as a
treasury's setup step: the `ccip` executor signs the send alone (see its
module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from qtg_runner.chains.ccip import KEEPER_KEY, abi_address
from qtg_runner.chains.errors import ChainError
from qtg_world.chains.keys import LocalKey, ensure_treasury_keys
from qtg_world.chains.local import RunningChain, load_artifact, rpc, wait_all

__all__ = [
    "CCIP_CONTRACTS",
    "DON_GAS",
    "DON_KEY",
    "LOCAL_SELECTOR_BASE",
    "PERMISSIONLESS_EXECUTION_S",
    "ROUTER_ALLOWANCE",
    "V15Lane",
    "approve_router",
    "ccip_selector",
    "deploy_ccip",
    "deploy_v1_5_lane",
    "ensure_don_key",
    "with_contracts",
]

CCIP_CONTRACTS = ("CcipRouter", "CcipOnRamp", "CcipOffRamp")

DON_KEY = "ccip-don"
"""The keystore name of the local executing network's transmitter key."""

LOCAL_SELECTOR_BASE = 7_700_000_000_000_000_000
"""A local chain's CCIP selector is this plus its chain id: distinct per chain
(chain ids are), fits a uint64, and far from every real selector (Ethereum's is
5009297550715157269) so a local message is never mistaken for a real one."""

DON_GAS = 1_000 * 10**18
"""ETH (wei) the transmitter key is set to on each chain."""

ROUTER_ALLOWANCE = 10_000_000 * 10**6
"""The Router's standing allowance of each treasury account's USDC: 10M USDC,
topped up again by `qtg chains up` when below half."""

PERMISSIONLESS_EXECUTION_S = 8 * 3600
"""The local OffRamps' permissionLessExecutionThresholdSeconds: a message the
DON never executed may be executed by anyone this long after its commit."""


def ccip_selector(chain: RunningChain) -> int:
    """The CCIP chain selector ``chain`` is deployed with."""
    return LOCAL_SELECTOR_BASE + chain.chain_id


# -- deployment ------------------------------------------------------------------


def ensure_don_key(state_dir: Path, kdf_iterations: int | None = None) -> LocalKey:
    """The executing network's transmitter key (made where missing, reused where there)."""
    return ensure_treasury_keys(state_dir, (DON_KEY,), kdf_iterations=kdf_iterations)[0]


def deploy_ccip(
    state_dir: Path, chains: Sequence[RunningChain], kdf_iterations: int | None = None
) -> None:
    """Deploy and wire the CCIP v1.6 double on ``chains`` (each already has
    MockUSDC and the CCTP double): each round's transactions go out on every
    chain before any is awaited. The addresses go into each ``chain.contracts``."""
    from web3 import HTTPProvider, Web3

    from qtg_world.chains.cctp import cctp_domain

    don = ensure_don_key(state_dir, kdf_iterations=kdf_iterations)
    keeper = ensure_treasury_keys(state_dir, (KEEPER_KEY,), kdf_iterations=kdf_iterations)[0]
    w3s = [Web3(HTTPProvider(c.rpc_url, request_kwargs={"timeout": 10})) for c in chains]
    owners = [c.deployer or w3.eth.accounts[0] for c, w3 in zip(chains, w3s, strict=True)]
    arts = {name: load_artifact(name) for name in CCIP_CONTRACTS}
    cs = Web3.to_checksum_address

    def deploy_round(name: str, args: Any) -> None:
        sent = [
            w3.eth.contract(abi=arts[name]["abi"], bytecode=arts[name]["bytecode"])
            .constructor(*args(c))
            .transact({"from": owner})
            for c, w3, owner in zip(chains, w3s, owners, strict=True)
        ]
        for chain, r in zip(chains, wait_all(w3s, chains, sent, f"deploying {name}"), strict=True):
            chain.contracts[name] = str(r["contractAddress"])

    deploy_round("CcipRouter", lambda c: (ccip_selector(c),))
    deploy_round(
        "CcipOnRamp",
        lambda c: (
            ccip_selector(c),
            cs(c.contracts["CcipRouter"]),
            cs(c.contracts["MockUSDC"]),
            cs(c.contracts["TokenMessengerV2"]),
            cctp_domain(c),
        ),
    )
    deploy_round(
        "CcipOffRamp",
        lambda c: (
            ccip_selector(c),
            cs(c.contracts["MockUSDC"]),
            cs(c.contracts["MessageTransmitterV2"]),
            cctp_domain(c),
            PERMISSIONLESS_EXECUTION_S,
        ),
    )

    pending: list[tuple[Any, RunningChain, Any]] = []
    for chain, w3, owner in zip(chains, w3s, owners, strict=True):
        tx: Any = {"from": owner, "gas": 500_000}

        def contract(name: str, c: RunningChain = chain, w: Any = w3) -> Any:
            return w.eth.contract(address=cs(c.contracts[name]), abi=arts[name]["abi"])

        router, onramp, offramp = (contract(n) for n in CCIP_CONTRACTS)
        others = [other for other in chains if other is not chain]
        calls = [
            offramp.functions.setTransmitter(cs(don.address), True),
            router.functions.applyRampUpdates(
                [(ccip_selector(o), onramp.address) for o in others],
                [],
                [(ccip_selector(o), offramp.address) for o in others],
            ),
            offramp.functions.applySourceChainConfigUpdates(
                [
                    (
                        router.address,
                        ccip_selector(o),
                        True,
                        True,
                        abi_address(o.contracts["CcipOnRamp"]),
                    )
                    for o in others
                ]
            ),
        ]
        calls.extend(
            onramp.functions.setDestChain(
                ccip_selector(o),
                cs(o.contracts["MockUSDC"]),
                cctp_domain(o),
                cs(o.contracts["CcipOffRamp"]),
            )
            for o in others
        )
        pending.extend((w3, chain, call.transact(tx)) for call in calls)
        for funded in (don, keeper):
            rpc(chain.rpc_url, "anvil_setBalance", [cs(funded.address), hex(DON_GAS)])
    wait_all(
        [p[0] for p in pending], [p[1] for p in pending], [p[2] for p in pending], "wiring CCIP"
    )


@dataclass(frozen=True)
class V15Lane:
    """A v1.5 lane deployed by ``deploy_v1_5_lane``."""

    router: str
    onramp: str
    offramp: str


def deploy_v1_5_lane(source: RunningChain, dest: RunningChain, transmitter: str) -> V15Lane:
    """Deploy a CCIP v1.5 lane from ``source`` to ``dest`` (each with MockUSDC):
    a Router of its own on the source (the chain's v1.6 Router keeps its
    lanes) routing to a new EVM2EVMOnRamp, and an EVM2EVMOffRamp on the
    destination that ``transmitter`` executes; the ramps are minters of their
    chain's MockUSDC (the lane burns and mints). Sent from each chain's deployer."""
    from web3 import HTTPProvider, Web3

    cs = Web3.to_checksum_address
    src = Web3(HTTPProvider(source.rpc_url, request_kwargs={"timeout": 10}))
    dst = Web3(HTTPProvider(dest.rpc_url, request_kwargs={"timeout": 10}))
    src_owner = source.deployer or src.eth.accounts[0]
    dst_owner = dest.deployer or dst.eth.accounts[0]
    usdc_abi = load_artifact("MockUSDC")["abi"]

    def deployed(w3: Any, chain: RunningChain, owner: str, name: str, *args: Any) -> Any:
        art = load_artifact(name)
        tx_hash = (
            w3.eth.contract(abi=art["abi"], bytecode=art["bytecode"])
            .constructor(*args)
            .transact({"from": owner})
        )
        (receipt,) = wait_all([w3], [chain], [tx_hash], f"deploying {name}")
        return w3.eth.contract(address=receipt["contractAddress"], abi=art["abi"])

    def done(w3: Any, chain: RunningChain, call: Any, owner: str, what: str) -> None:
        wait_all([w3], [chain], [call.transact({"from": owner, "gas": 300_000})], what)

    router = deployed(src, source, src_owner, "CcipRouter", ccip_selector(source))
    onramp = deployed(
        src, source, src_owner, "CcipEvm2EvmOnRamp", ccip_selector(source), ccip_selector(dest),
        router.address, cs(source.contracts["MockUSDC"]), cs(dest.contracts["MockUSDC"]),
    )  # fmt: skip
    offramp = deployed(
        dst, dest, dst_owner, "CcipEvm2EvmOffRamp", ccip_selector(source), ccip_selector(dest),
        onramp.address, cs(dest.contracts["MockUSDC"]),
    )  # fmt: skip
    done(
        src, source,
        router.functions.applyRampUpdates([(ccip_selector(dest), onramp.address)], [], []),
        src_owner, "routing the v1.5 lane",
    )  # fmt: skip
    src_usdc = src.eth.contract(address=cs(source.contracts["MockUSDC"]), abi=usdc_abi)
    dst_usdc = dst.eth.contract(address=cs(dest.contracts["MockUSDC"]), abi=usdc_abi)
    any_amount = 2**256 - 1
    ramp_minter = "making the v1.5 ramp a minter"
    make_onramp_minter = src_usdc.functions.configureMinter(onramp.address, any_amount)
    make_offramp_minter = dst_usdc.functions.configureMinter(offramp.address, any_amount)
    done(src, source, make_onramp_minter, src_owner, ramp_minter)
    done(dst, dest, make_offramp_minter, dst_owner, ramp_minter)
    done(dst, dest, offramp.functions.setTransmitter(cs(transmitter), True), dst_owner, "DON")
    return V15Lane(
        str(router.address).lower(), str(onramp.address).lower(), str(offramp.address).lower()
    )


def approve_router(
    chain: RunningChain, treasury: Sequence[LocalKey], router: str | None = None
) -> None:
    """Each treasury account's standing allowance of USDC to ``chain``'s Router
    (or ``router``), set to ROUTER_ALLOWANCE where below half of it: bounded,
    never unlimited. Sent as the account through anvil's impersonation (a
    local chain's setup step, before the engine signs for the account, its gas
    given back so the account's ETH is as it was; on a real chain the
    treasury signs this approval once through its own change process)."""
    from web3 import HTTPProvider, Web3

    if router is None and "CcipRouter" not in chain.contracts:
        return
    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    spender = Web3.to_checksum_address(router or chain.contracts["CcipRouter"])
    pending = []
    balances: dict[str, int] = {}
    for account in treasury:
        address = Web3.to_checksum_address(account.address)
        if int(usdc.functions.allowance(address, spender).call()) >= ROUTER_ALLOWANCE // 2:
            continue
        balances[address] = int(w3.eth.get_balance(address))
        if balances[address] < DON_GAS // 1000:
            rpc(chain.rpc_url, "anvil_setBalance", [address, hex(DON_GAS // 1000)])
        rpc(chain.rpc_url, "anvil_impersonateAccount", [address])
        try:
            pending.append(
                usdc.functions.approve(spender, ROUTER_ALLOWANCE).transact(
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


def with_contracts(chain: RunningChain, **contracts: str) -> RunningChain:
    """``chain`` with some contracts replaced (a v1.5 lane's Router, say)."""
    return replace(chain, contracts={**chain.contracts, **contracts})
