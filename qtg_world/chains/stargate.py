"""Stargate v2 on the local chains: Stargate's own published contracts (npm
@stargatefinance/stg-evm-v2, their bytecode and ABI read from node_modules
when deployed) over LayerZero's own EndpointV2 (qtg_world.chains.layerzero),
deployed and configured on every chain by `start_chains` as a real deployment
is, so `qtg chains up` and the test fixtures get the same.

On each chain, owned by the deployer:

- LayerZero's endpoint with the chain's endpoint id (``LOCAL_STARGATE_EIDS``,
  else ``STARGATE_EID_BASE`` + the chain id) and its SimpleMessageLib;
- ``StargatePoolUSDC`` over the chain's MockUSDC (asset id 1, 6 shared
  decimals, as Stargate's USDC), its ``FeeLibV1`` charging ``FEE_MILLIONTH``
  on every path (rounded up by a base unit, as the fee library does),
  ``TokenMessaging`` (the taxi and the bus: queue capacity 512, at most 20
  passengers a bus, Stargate's default gas limits as enforced options) and
  ``CreditMessaging``, wired to each other (``setAddressConfig``, asset id 1
  on both messagings) and peered with the other chains' messagings;
- the planner (anvil's unlocked account ``RELAYER_ACCOUNT_INDEX``, the same
  account the relayer uses: no key of ours) sets each bus's fares from
  ``quoteFares`` for ``PLANNED_PASSENGERS`` riders, as Stargate's planner
  does; the treasurer is the deployer;
- ``POOL_LIQUIDITY`` of mocked USDC deposited into the pool for every other
  chain, and the planner sends each other chain that much credit for its
  path here through CreditMessaging (a LayerZero message, delivered at once:
  ``layerzero.deliver_now``). A pool may send to a chain up to the credit
  that chain sent it (``quoteOFT``'s limit).

The addresses go into the chain's ``contracts`` in state.json
(``EndpointV2``, ``SimpleMessageLib``, ``StargatePool``, ``TokenMessaging``,
``CreditMessaging``, ``FeeLibV1``); the registry's ``stargate`` row names
``STARGATE_CONTRACTS``: the pool (what a send is signed to; it emits
``OFTSent`` and ``OFTReceived``) and TokenMessaging (it emits ``BusRode`` and
``BusDriven``). The pool pulls what it sends from the sender: ``approve_pool``
gives it an unlimited allowance from the local treasury accounts (sent as the
account through anvil's impersonation, so no key is read), called where the
treasury is funded. The relayer (qtg_world.stargate) delivers the
messages and drives the buses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qtg_runner.chains.errors import ChainError
from qtg_world.chains import layerzero
from qtg_world.chains.local import RunningChain, load_artifact, rpc

__all__ = [
    "ASSET_ID",
    "BUS_OFT_CMD",
    "FEE_MILLIONTH",
    "LOCAL_STARGATE_EIDS",
    "MAX_PASSENGERS",
    "PLANNED_PASSENGERS",
    "POOL_LIQUIDITY",
    "RELAYER_ACCOUNT_INDEX",
    "STARGATE_CONTRACTS",
    "STARGATE_DEPLOYED",
    "approve_pool",
    "credit_messaging_abi",
    "deploy_stargate",
    "fee_lib_abi",
    "pool_abi",
    "relayer_address",
    "stargate_eid",
    "stargate_fee",
    "token_messaging_abi",
]

STARGATE_PACKAGE = "@stargatefinance/stg-evm-v2"
POOL_ARTIFACT = "artifacts/src/usdc/StargatePoolUSDC.sol/StargatePoolUSDC.json"
TOKEN_MESSAGING_ARTIFACT = "artifacts/src/messaging/TokenMessaging.sol/TokenMessaging.json"
CREDIT_MESSAGING_ARTIFACT = "artifacts/src/messaging/CreditMessaging.sol/CreditMessaging.json"
FEE_LIB_ARTIFACT = "artifacts/src/feelibs/FeeLibV1.sol/FeeLibV1.json"

STARGATE_CONTRACTS = ("StargatePool", "TokenMessaging")
"""What the registry's ``stargate`` row names on each chain."""

STARGATE_DEPLOYED = (
    *layerzero.LAYERZERO_CONTRACTS,
    "StargatePool",
    "TokenMessaging",
    "CreditMessaging",
    "FeeLibV1",
)
"""Every contract ``deploy_stargate`` leaves in a chain's ``contracts``."""

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
"""anvil's unlocked account that verifies and executes LayerZero messages and
is Stargate's planner (fares, credits, driving buses)."""

POOL_LIQUIDITY = 1_000_000 * 10**6
"""Mocked USDC (6 decimals) deposited into each pool per other chain, and the
credit each path gets."""

BUS_OFT_CMD = b"\x00"
"""``oftCmd`` of a bus ride (``new bytes(1)``); a taxi's is empty."""

ASSET_ID = 1
"""Stargate's asset id of USDC (stg-definitions-v2)."""
SHARED_DECIMALS = 6

FEE_MILLIONTH = 100
"""The fee library's fee on every path, in millionths (1 basis point); it
charges ``amount * 100 // 10**6 + 1`` base units (``stargate_fee``)."""

QUEUE_CAPACITY = 512
MAX_PASSENGERS = 20
"""TokenMessaging's queue capacity and the most passengers one bus carries
(stg-definitions-v2's DEFAULT_TOKEN_MESSAGING_NETWORK_CONFIG)."""

PLANNED_PASSENGERS = 10
"""How many riders the planner prices a bus for (``quoteFares``), and drives
at once when that many wait (qtg_world.stargate)."""

TAXI_GAS = 150_000
BUS_GAS = 38_000
BUS_RIDE_GAS = 60_000
NATIVE_DROP_GAS = 25_000
CREDIT_GAS = 40_000
"""Stargate's default gas limits (stg-definitions-v2): the taxi's and the
bus's enforced lzReceive options, the gas per passenger and per native drop,
and CreditMessaging's per credit."""

MSG_TYPE_TAXI, MSG_TYPE_BUS = 1, 2
MAX_UINT256 = 2**256 - 1


def stargate_eid(chain: RunningChain) -> int:
    """The LayerZero endpoint id of ``chain``'s endpoint (and so of its pool)."""
    return LOCAL_STARGATE_EIDS.get(chain.key, STARGATE_EID_BASE + chain.chain_id)


def stargate_fee(amount_units: int) -> int:
    """The pool's fee on a send of ``amount_units`` (6 decimals, no reward)."""
    return amount_units * FEE_MILLIONTH // 10**6 + 1


def pool_abi() -> list[Any]:
    return list(layerzero.npm_artifact(STARGATE_PACKAGE, POOL_ARTIFACT)["abi"])


def token_messaging_abi() -> list[Any]:
    return list(layerzero.npm_artifact(STARGATE_PACKAGE, TOKEN_MESSAGING_ARTIFACT)["abi"])


def credit_messaging_abi() -> list[Any]:
    return list(layerzero.npm_artifact(STARGATE_PACKAGE, CREDIT_MESSAGING_ARTIFACT)["abi"])


def fee_lib_abi() -> list[Any]:
    return list(layerzero.npm_artifact(STARGATE_PACKAGE, FEE_LIB_ARTIFACT)["abi"])


def _w3(chain: RunningChain) -> Any:
    from web3 import HTTPProvider, Web3

    return Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))


@dataclass(frozen=True)
class Bus:
    """The bus a driveBus to ``eid`` would drive now: the tickets from
    ``first`` at the head of the queue (as many as a bus takes, ``count``),
    their bytes joined (``passengers``), and the quoted native fee."""

    eid: int
    first: int
    count: int
    waiting: int
    passengers: bytes
    fee: int


def bus_at_head(
    token_messaging: Any, eid: int, passenger: Callable[[int], bytes | None]
) -> Bus | None:
    """The next bus of ``token_messaging`` (a web3 contract) to ``eid``, the
    bytes of each ticket from ``passenger`` (None: not known yet); None when
    the queue is empty or a ticket's bytes are not known."""
    most, _fare, _drop_fare, waiting, first = token_messaging.functions.busQueues(eid).call()
    count = min(int(waiting), int(most))
    if count == 0:
        return None
    rides = [passenger(t) for t in range(int(first), int(first) + count)]
    if any(r is None for r in rides):
        return None
    passengers = b"".join(r for r in rides if r is not None)
    fee = int(token_messaging.functions.quoteDriveBus(eid, passengers).call()[0])
    return Bus(eid, int(first), count, int(waiting), passengers, fee)


def relayer_address(chain: RunningChain) -> str:
    """The relayer's (and planner's) account on ``chain`` (anvil's unlocked account)."""
    return str(_w3(chain).eth.accounts[RELAYER_ACCOUNT_INDEX])


def _lz_receive_option(gas: int) -> bytes:
    """Type-3 options with one executor lzReceive option of ``gas`` (no value)."""
    return b"\x00\x03" + b"\x01" + (17).to_bytes(2, "big") + b"\x01" + gas.to_bytes(16, "big")


def _deploy_round(
    chains: Sequence[RunningChain],
    w3s: Sequence[Any],
    owners: Sequence[str],
    name: str,
    artifact: str,
    args: Any,
) -> None:
    """Deploy ``artifact`` on every chain (``args(chain)`` its constructor's
    arguments), then wait for all: the addresses go in as ``name``."""
    art = layerzero.npm_artifact(STARGATE_PACKAGE, artifact)
    sent = [
        w3.eth.contract(abi=art["abi"], bytecode=art["bytecode"])
        .constructor(*args(chain))
        .transact({"from": owner})
        for chain, w3, owner in zip(chains, w3s, owners, strict=True)
    ]
    for chain, w3, tx_hash in zip(chains, w3s, sent, strict=True):
        receipt = layerzero.wait_mined(w3, chain, tx_hash, f"deploying Stargate's {name}")
        chain.contracts[name] = str(receipt["contractAddress"])


def _send_all(pending: list[tuple[Any, RunningChain, Any]], what: str) -> None:
    for w3, chain, tx_hash in pending:
        layerzero.wait_mined(w3, chain, tx_hash, what)


def deploy_stargate(chains: Sequence[RunningChain]) -> None:
    """LayerZero and Stargate on each of ``chains`` (each already has MockUSDC),
    configured as the module says: each step sent on every chain before any is
    awaited. The addresses go into each ``chain.contracts``."""
    from web3 import Web3

    w3s = [_w3(c) for c in chains]
    owners = [str(c.deployer or w3.eth.accounts[0]) for c, w3 in zip(chains, w3s, strict=True)]
    planners = [str(w3.eth.accounts[RELAYER_ACCOUNT_INDEX]) for w3 in w3s]
    eids = {c.key: stargate_eid(c) for c in chains}
    layerzero.deploy_endpoints(
        chains, eids, {c.key: p for c, p in zip(chains, planners, strict=True)}
    )

    def endpoint(chain: RunningChain) -> str:
        return str(Web3.to_checksum_address(chain.contracts["EndpointV2"]))

    _deploy_round(
        chains,
        w3s,
        owners,
        "TokenMessaging",
        TOKEN_MESSAGING_ARTIFACT,
        lambda c: (endpoint(c), owners[chains.index(c)], QUEUE_CAPACITY),
    )
    _deploy_round(
        chains,
        w3s,
        owners,
        "CreditMessaging",
        CREDIT_MESSAGING_ARTIFACT,
        lambda c: (endpoint(c), owners[chains.index(c)]),
    )
    _deploy_round(
        chains,
        w3s,
        owners,
        "StargatePool",
        POOL_ARTIFACT,
        lambda c: (
            "Stargate USDC LP",
            "S*USDC",
            Web3.to_checksum_address(c.contracts["MockUSDC"]),
            6,
            SHARED_DECIMALS,
            endpoint(c),
            owners[chains.index(c)],
        ),
    )
    _deploy_round(
        chains,
        w3s,
        owners,
        "FeeLibV1",
        FEE_LIB_ARTIFACT,
        lambda c: (Web3.to_checksum_address(c.contracts["StargatePool"]),),
    )
    others = len(chains) - 1
    contracts = [_contracts(w3, c) for c, w3 in zip(chains, w3s, strict=True)]

    # the owner's configuration
    pending: list[tuple[Any, RunningChain, Any]] = []
    for chain, w3, owner, planner, k in zip(chains, w3s, owners, planners, contracts, strict=True):
        pool, tm, cm, fee_lib, usdc = k["pool"], k["tm"], k["cm"], k["fee_lib"], k["usdc"]
        calls = [
            pool.functions.setAddressConfig(
                (
                    fee_lib.address,
                    planner,
                    owner,  # the treasurer
                    tm.address,
                    cm.address,
                    "0x" + "00" * 20,  # no LZ token
                )
            ),
            tm.functions.setAssetId(pool.address, ASSET_ID),
            tm.functions.setPlanner(planner),
            cm.functions.setAssetId(pool.address, ASSET_ID),
            cm.functions.setPlanner(planner),
            usdc.functions.mint(owner, POOL_LIQUIDITY * others),
            usdc.functions.approve(pool.address, POOL_LIQUIDITY * others),
        ]
        for other, ok in zip(chains, contracts, strict=True):
            if other is chain:
                continue
            eid = eids[other.key]
            calls += [
                tm.functions.setPeer(eid, layerzero.address_word(ok["tm"].address)),
                cm.functions.setPeer(eid, layerzero.address_word(ok["cm"].address)),
                tm.functions.setGasLimit(eid, BUS_RIDE_GAS, NATIVE_DROP_GAS),
                tm.functions.setMaxNumPassengers(eid, MAX_PASSENGERS),
                tm.functions.setEnforcedOptions(
                    [
                        (eid, MSG_TYPE_TAXI, _lz_receive_option(TAXI_GAS)),
                        (eid, MSG_TYPE_BUS, _lz_receive_option(BUS_GAS)),
                    ]
                ),
                cm.functions.setGasLimit(eid, CREDIT_GAS),
                fee_lib.functions.setFeeConfig(
                    eid, 0, 0, FEE_MILLIONTH, FEE_MILLIONTH, FEE_MILLIONTH, 0
                ),
            ]
        pending.extend((w3, chain, c.transact({"from": owner, "gas": 1_000_000})) for c in calls)
    _send_all(pending, "configuring Stargate")

    # the liquidity, and the planner's fares
    pending = []
    for chain, w3, owner, planner, k in zip(chains, w3s, owners, planners, contracts, strict=True):
        pool, tm = k["pool"], k["tm"]
        tx_hash = pool.functions.deposit(owner, POOL_LIQUIDITY * others).transact(
            {"from": owner, "gas": 1_000_000}
        )
        pending.append((w3, chain, tx_hash))
        for other in chains:
            if other is not chain:
                eid = eids[other.key]
                bus_fare, drop_fare = tm.functions.quoteFares(eid, PLANNED_PASSENGERS).call()
                tx_hash = tm.functions.setFares(eid, bus_fare, drop_fare).transact(
                    {"from": planner, "gas": 300_000}
                )
                pending.append((w3, chain, tx_hash))
    _send_all(pending, "funding Stargate's pool")

    # the planner sends each other chain the credit of its path here
    pending = []
    for chain, w3, planner, k in zip(chains, w3s, planners, contracts, strict=True):
        cm = k["cm"]
        for other in chains:
            if other is chain:
                continue
            batch = [(ASSET_ID, [(eids[chain.key], POOL_LIQUIDITY, 0)])]
            fee = cm.functions.quoteSendCredits(eids[other.key], batch).call()[0]
            tx_hash = cm.functions.sendCredits(eids[other.key], batch).transact(
                {"from": planner, "value": fee, "gas": 1_000_000}
            )
            pending.append((w3, chain, tx_hash))
    _send_all(pending, "sending Stargate credits")
    by_eid = {eids[c.key]: (c, p) for c, p in zip(chains, planners, strict=True)}
    for chain, w3 in zip(chains, w3s, strict=True):
        head = int(w3.eth.block_number)
        for packet in layerzero.packets_sent(w3, chain.contracts["EndpointV2"], 0, head):
            dst, relayer = by_eid[packet.dst_eid]
            layerzero.deliver_now(packet, dst, relayer)
    for chain, k in zip(chains, contracts, strict=True):
        for other in chains:
            if other is not chain:
                credit = int(k["pool"].functions.paths(eids[other.key]).call())
                if credit < POOL_LIQUIDITY:
                    raise ChainError(
                        f"Stargate's path {chain.key} -> {other.key} has {credit} credit, "
                        f"not {POOL_LIQUIDITY}"
                    )


def _contracts(w3: Any, chain: RunningChain) -> dict[str, Any]:
    from web3 import Web3

    def at(name: str, abi: list[Any]) -> Any:
        return w3.eth.contract(address=Web3.to_checksum_address(chain.contracts[name]), abi=abi)

    return {
        "pool": at("StargatePool", pool_abi()),
        "tm": at("TokenMessaging", token_messaging_abi()),
        "cm": at("CreditMessaging", credit_messaging_abi()),
        "fee_lib": at("FeeLibV1", fee_lib_abi()),
        "usdc": at("MockUSDC", load_artifact("MockUSDC")["abi"]),
    }


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
            layerzero.wait_mined(w3, chain, tx_hash, f"approving the pool for {address}")
        finally:
            rpc(chain.rpc_url, "anvil_stopImpersonatingAccount", [address])
