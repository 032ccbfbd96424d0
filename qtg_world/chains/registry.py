"""Recording the local chains in a network's chain registry (migration
0017_chain_registry), as the admin: `qtg chains up` does it after deploying.

Each chain is registered with the NAME of the environment variable that holds
its RPC URL (QTG_RPC_<KEY>), never the URL; its MockUSDC as the token USDC (6
decimals); and the local treasury accounts (qtg_world.chains.keys: keys of
our own in an encrypted keystore, the same on every chain) with their signer
ids ``keystore:local-treasury-1`` / ``keystore:local-treasury-2``, each funded
first (``fund_treasury``) with ETH for gas and with mocked USDC by the deployer
(anvil's account 0, the token's owner); and the bridge doubles deployed on it
(chain_protocols: the CCTP domain and contracts, the Stargate endpoint id and
pool, the CCIP selector and Router/OnRamp/OffRamp; ccip_lanes: the v1.6 CCIP
lanes between the chains, USDC over CCTP). `qtg world up` also records the
local exchange (``record_venue``): the venue ``bybit`` with the NAMES of the
variables of its URL and key file, its name for each chain (the chain's key, as
the double names it) and its deposit address there for USDC. No key is read,
stored or logged here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from qtg_runner.chains.errors import ChainError
from qtg_runner.db import procs
from qtg_world.chains.ccip import CCIP_CONTRACTS, approve_router, ccip_selector
from qtg_world.chains.cctp import CCTP_CONTRACTS, cctp_domain
from qtg_world.chains.keys import LocalKey, ensure_treasury_keys
from qtg_world.chains.local import RunningChain, load_artifact, mined_at_once, rpc, rpc_url_env
from qtg_world.chains.stargate import STARGATE_CONTRACTS, approve_pool, stargate_eid

__all__ = [
    "book_of",
    "fund_treasury",
    "local_protocols",
    "prepare_treasury",
    "record_chains",
    "record_venue",
    "register_ccip_lanes",
    "register_chain",
    "register_venue",
    "rpc_url_env",
]

TREASURY_FUNDING = 1_000_000 * 10**6
"""Mocked USDC (6 decimals) minted to each treasury account when below half of
it: a chain the demo or a drill moved USDC on is not topped up again, since
USDC appearing outside the engine is drift the next balance check reports."""

TREASURY_GAS = 1_000 * 10**18
"""ETH (wei) each treasury account is set to (anvil_setBalance) when below it."""

LOCAL_FINALITY_DEPTH = 2
"""Confirmations before a local chain's receipt counts as final."""


def fund_treasury(chain: RunningChain, treasury: Sequence[LocalKey]) -> None:
    """Give each treasury account of ``chain`` ETH for gas (anvil_setBalance,
    where below TREASURY_GAS) and mocked USDC (minted by the token's owner up to
    TREASURY_FUNDING, where below half of it), and an allowance to the chain's
    Stargate pool (``approve_pool``)."""
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    owner = chain.deployer or w3.eth.accounts[0]
    pending: list[Any] = []
    for account in treasury:
        address = Web3.to_checksum_address(account.address)
        if int(w3.eth.get_balance(address)) < TREASURY_GAS:
            rpc(chain.rpc_url, "anvil_setBalance", [address, hex(TREASURY_GAS)])
        balance = int(usdc.functions.balanceOf(address).call())
        if balance < TREASURY_FUNDING // 2:
            mint = usdc.functions.mint(address, TREASURY_FUNDING - balance)
            pending.append(mint.transact({"from": owner}))
    for tx_hash in pending:
        receipt = w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=max(10.0, chain.block_time * 5.0), poll_latency=0.1
        )
        if receipt["status"] != 1:
            raise ChainError(f"minting mocked USDC on {chain.key} failed: {receipt}")
    # the Stargate pool pulls what it sends: allowed once, up front
    approve_pool(chain, [account.address for account in treasury])


def prepare_treasury(
    state_dir: Path, chains: Sequence[RunningChain], kdf_iterations: int | None = None
) -> list[LocalKey]:
    """The local treasury accounts of ``state_dir`` (their keystore made where
    missing, qtg_world.chains.keys.ensure_treasury_keys), funded on each chain,
    each with its bounded allowance to the chain's CCTP TokenMessengerV2
    (qtg_runner.chains.cctp_allowance) and to its CCIP Router (approve_router)."""
    from qtg_world.chains.cctp import allow_local_burns

    treasury = ensure_treasury_keys(state_dir, kdf_iterations=kdf_iterations)
    with mined_at_once(chains):
        for chain in chains:
            fund_treasury(chain, treasury)
        allow_local_burns(state_dir, chains, treasury)
        for chain in chains:
            approve_router(chain, treasury)
        for chain in chains:  # the approvals' gas topped up again
            fund_treasury(chain, treasury)
    return treasury


def local_protocols(chain: RunningChain) -> list[tuple[str, int, dict[str, str]]]:
    """The bridge protocols deployed on a local chain, as chain_protocols rows
    (protocol, the chain's id in it, its contracts by name): those whose
    contracts are all in the chain's state."""
    rows: list[tuple[str, int, dict[str, str]]] = []
    if all(name in chain.contracts for name in CCTP_CONTRACTS):
        rows.append(("cctp", cctp_domain(chain), {n: chain.contracts[n] for n in CCTP_CONTRACTS}))
    if all(name in chain.contracts for name in STARGATE_CONTRACTS):
        rows.append(
            (
                "stargate",
                stargate_eid(chain),
                {n: chain.contracts[n] for n in STARGATE_CONTRACTS},
            )
        )
    if all(name in chain.contracts for name in CCIP_CONTRACTS):
        rows.append(("ccip", ccip_selector(chain), {n: chain.contracts[n] for n in CCIP_CONTRACTS}))
    return rows


BOOK_SOURCE = "the local world: deployed by `qtg chains up` (qtg_world.chains)"


def _toml(value: object) -> str:
    """A TOML value: a string quoted (JSON's escapes are TOML's), a number as is."""
    return json.dumps(value) if isinstance(value, str) else str(value)


def book_of(
    chains: Sequence[RunningChain],
    network_class: str = "testnet",
    finality_depth: int = LOCAL_FINALITY_DEPTH,
) -> str:
    """An address book (networks/<class>.toml's format, qtg_runner.networks)
    of the local ``chains`` as deployed: what `qtg registry load CLASS --book
    FILE` records as `register_chain` and `register_ccip_lanes` would. The
    Iris entry is a placeholder (the book wants https; the local double is
    served over http and named by the environment, as the real one is)."""
    lines = [
        f"network_class = {_toml(network_class)}",
        "",
        "[iris]",
        'url = "https://iris.local.invalid"',
        'url_env = "QTG_IRIS_URL"',
        f"source = {_toml(BOOK_SOURCE)}",
    ]
    with_ccip = [c for c in chains if all(n in c.contracts for n in CCIP_CONTRACTS)]
    for chain in chains:
        lines += [
            "",
            "[[chains]]",
            f"chain_key = {_toml(chain.key)}",
            f"name = {_toml(chain.key)}",
            f"chain_id = {chain.chain_id}",
            f"rpc_url_env = {_toml(rpc_url_env(chain.key))}",
            'finality_rule = "confirmations"',
            f"finality_depth = {finality_depth}",
            f"block_time_ms = {chain.block_time * 1000}",
            f"source = {_toml(BOOK_SOURCE)}",
        ]
        if "MockUSDC" in chain.contracts:
            lines += [
                "",
                "[[chains.tokens]]",
                'symbol = "USDC"',
                f"address = {_toml(chain.contracts['MockUSDC'])}",
                "decimals = 6",
                f"source = {_toml(BOOK_SOURCE)}",
            ]
        for protocol, remote_id, contracts in local_protocols(chain):
            lines += [
                "",
                f"[chains.protocols.{protocol}]",
                f"remote_id = {_toml(str(remote_id))}",
                f"source = {_toml(BOOK_SOURCE)}",
                f"[chains.protocols.{protocol}.contracts]",
                *(f"{name} = {_toml(address)}" for name, address in sorted(contracts.items())),
            ]
    for source in with_ccip:
        for dest in with_ccip:
            if dest is not source:
                lines += [
                    "",
                    "[[ccip_lanes]]",
                    f"source_chain_key = {_toml(source.key)}",
                    f"dest_chain_key = {_toml(dest.key)}",
                    'version = "1.6"',
                    f"onramp = {_toml(source.contracts['CcipOnRamp'])}",
                    f"offramp = {_toml(dest.contracts['CcipOffRamp'])}",
                    'token_data = "cctp"',
                    f"source = {_toml(BOOK_SOURCE)}",
                ]
    return "\n".join(lines) + "\n"


def register_chain(
    conn: psycopg.Connection[Any],
    chain: RunningChain,
    treasury: Sequence[LocalKey],
    finality_depth: int = LOCAL_FINALITY_DEPTH,
) -> None:
    """The admin's registry steps for one local chain on ``conn`` (bound to a
    network): the chain, its USDC, the ``treasury`` accounts on it and the
    bridge protocols deployed there (``local_protocols``)."""
    procs.upsert_chain(
        chain.key, chain.chain_id, rpc_url_env(chain.key), finality_depth, chain.block_time * 1000
    ).one(conn)
    if "MockUSDC" in chain.contracts:
        procs.upsert_chain_token(chain.key, "USDC", chain.contracts["MockUSDC"], 6).one(conn)
    for account in treasury:
        procs.upsert_treasury_account(chain.key, account.address, account.signer_id).one(conn)
    for protocol, remote_id, contracts in local_protocols(chain):
        procs.upsert_chain_protocol(chain.key, protocol, remote_id, contracts).one(conn)
    register_ccip_lanes(conn, chain)


def register_ccip_lanes(conn: psycopg.Connection[Any], chain: RunningChain) -> None:
    """The CCIP lanes between ``chain`` and every chain registered with a ccip
    row before it, both ways: v1.6 (the chains' OnRamp and OffRamp), their
    USDC over CCTP (token_data 'cctp'), the default fee margin and cap."""
    if not all(name in chain.contracts for name in CCIP_CONTRACTS):
        return
    others = conn.execute(
        "SELECT chain_key FROM chain_protocols WHERE protocol = 'ccip' AND chain_key <> %s "
        "ORDER BY chain_key",
        (chain.key,),
    ).fetchall()
    for (other,) in others:
        for source, dest in ((chain.key, other), (other, chain.key)):
            procs.upsert_ccip_lane(source, dest, "1.6", token_data="cctp").one(conn)


def record_chains(
    admin_dsn: str, network: str, chains: Sequence[RunningChain], treasury: Sequence[LocalKey]
) -> None:
    """Register ``chains`` in ``network``'s chain registry in one transaction, as
    the admin (``register_chain`` for each; the treasury funded by
    ``fund_treasury`` beforehand). Registering the same again changes nothing."""
    conninfo = make_conninfo(admin_dsn, options=f"-c search_path={network},qtg")
    with psycopg.connect(conninfo) as conn, conn.transaction():
        for chain in chains:
            register_chain(conn, chain, treasury)


LOCAL_VENUE = "bybit"
"""The local exchange double's venue key."""


def register_venue(
    conn: psycopg.Connection[Any],
    chains: Sequence[RunningChain],
    deposit_address: str,
    venue_key: str = LOCAL_VENUE,
) -> None:
    """The admin's venue steps for the local exchange on ``conn`` (bound to a
    network, ``chains`` registered): the venue (its URL and key file named by
    QTG_BYBIT_URL and QTG_BYBIT_KEY_FILE), its name for each chain (the chain's
    key) and its USDC deposit address there (which allow-lists it)."""
    from qtg_world.local import BYBIT_KEY_FILE_ENV, BYBIT_URL_ENV

    procs.upsert_exchange_venue(venue_key, "bybit", BYBIT_URL_ENV, BYBIT_KEY_FILE_ENV).one(conn)
    for chain in chains:
        procs.upsert_venue_chain(venue_key, chain.key, chain.key).one(conn)
        procs.upsert_venue_deposit_address(venue_key, chain.key, "USDC", deposit_address).one(conn)


def record_venue(
    admin_dsn: str, network: str, chains: Sequence[RunningChain], deposit_address: str
) -> None:
    """``register_venue`` in one transaction as the admin, after ``record_chains``."""
    conninfo = make_conninfo(admin_dsn, options=f"-c search_path={network},qtg")
    with psycopg.connect(conninfo) as conn, conn.transaction():
        register_venue(conn, chains, deposit_address)
