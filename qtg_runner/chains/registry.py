"""Recording the local chains in a network's chain registry (migration
0017_chain_registry), as the admin: `qtg chains up` does it after deploying.

Each chain is registered with the NAME of the environment variable that holds
its RPC URL (QTG_RPC_<KEY>), never the URL; its MockUSDC as the token USDC (6
decimals); and anvil's accounts 1 and 2 as treasury accounts, each funded with
mocked USDC by the deployer (anvil's account 0, the token's owner), with the
signer ids ``anvil:1`` / ``anvil:2`` (anvil's well-known development accounts:
no key is stored or logged here)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from qtg_runner.chains.local import ChainError, RunningChain, load_artifact
from qtg_runner.db import procs

TREASURY_ACCOUNTS = (1, 2)
"""Indexes of the anvil accounts recorded as treasury accounts."""

TREASURY_FUNDING = 1_000_000 * 10**6
"""Mocked USDC (6 decimals) minted to each treasury account when below it."""

LOCAL_FINALITY_DEPTH = 2
"""Confirmations before a local chain's receipt counts as final."""


def rpc_url_env(chain_key: str) -> str:
    """The environment variable that holds a chain's RPC URL: QTG_RPC_<KEY>."""
    return "QTG_RPC_" + re.sub(r"[^A-Z0-9]", "_", chain_key.upper())


@dataclass(frozen=True)
class TreasuryAccount:
    chain_key: str
    address: str
    signer_id: str


def fund_treasury(chain: RunningChain) -> list[TreasuryAccount]:
    """Mint mocked USDC to anvil's treasury accounts of ``chain`` (those below
    TREASURY_FUNDING), from the token's owner; the accounts, with their signer ids."""
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    accounts = w3.eth.accounts
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    owner = chain.deployer or accounts[0]
    pending: list[Any] = []
    treasury: list[TreasuryAccount] = []
    for index in TREASURY_ACCOUNTS:
        address = accounts[index]
        balance = int(usdc.functions.balanceOf(address).call())
        if balance < TREASURY_FUNDING:
            mint = usdc.functions.mint(address, TREASURY_FUNDING - balance)
            pending.append(mint.transact({"from": owner}))
        treasury.append(TreasuryAccount(chain.key, str(address), f"anvil:{index}"))
    for tx_hash in pending:
        receipt = w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=max(10.0, chain.block_time * 5.0), poll_latency=0.1
        )
        if receipt["status"] != 1:
            raise ChainError(f"minting mocked USDC on {chain.key} failed: {receipt}")
    return treasury


def record_chains(
    admin_dsn: str, network: str, chains: Sequence[RunningChain], fund: bool = True
) -> None:
    """Register ``chains`` in ``network``'s chain registry in one transaction, as
    the admin: the chain, its USDC and (funded first when ``fund``) its treasury
    accounts. Registering the same again changes nothing."""
    treasury = {c.key: fund_treasury(c) if fund else [] for c in chains}
    conninfo = make_conninfo(admin_dsn, options=f"-c search_path={network},qtg")
    with psycopg.connect(conninfo) as conn, conn.transaction():
        for c in chains:
            procs.upsert_chain(
                c.key, c.chain_id, rpc_url_env(c.key), LOCAL_FINALITY_DEPTH, c.block_time * 1000
            ).one(conn)
            if "MockUSDC" in c.contracts:
                procs.upsert_chain_token(c.key, "USDC", c.contracts["MockUSDC"], 6).one(conn)
            for account in treasury[c.key]:
                procs.upsert_treasury_account(c.key, account.address, account.signer_id).one(conn)
