"""What the EVM tests share (tests/chains): a test database's chain registry
filled from the session's local chains, evm_transfer movements between the
local treasury accounts, one worker batch run as a runner carrying the real
evm_transfer executor, and what the chain says (balances, Transfer logs).

The database side is the test's own (``db``); the chains are the session's
(chain_support.local_chain_set), shared by every chain test: a test reads
balances and logs relative to where it started, never absolute."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from chain_support import LocalChainSet, in_pool
from engine import approve, as_person, bind
from web3 import HTTPProvider, Web3

from qtg_runner.chains.evm import TRANSFER_TOPIC
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.loop import WorkerContext
from qtg_world.chains.local import RunningChain, load_artifact, rpc
from qtg_world.chains.registry import register_chain

NETWORK = "testnet"
LANE = "evm"
FINALITY_DEPTH = 2


def register_world(conn: psycopg.Connection[Any], chain_set: LocalChainSet) -> None:
    """The admin's deploy steps for the local chains on ``conn`` (a superuser
    connection bound to testnet): each chain, its USDC, the treasury accounts
    and its bridge doubles (register_chain); the evm_transfer executor; the
    lane its movements run on."""
    for chain in chain_set.chains:
        register_chain(conn, chain, chain_set.treasury, FINALITY_DEPTH)
    procs.register_executor(
        EvmTransferExecutor.key,
        EvmTransferExecutor.has_side_effect,
        EvmTransferExecutor.node_config_schema,
        EvmTransferExecutor.description,
    ).one(conn)
    procs.upsert_lane_baseline(LANE, 30, min_poll_seconds=1).one(conn)


def transfer_plan(chain: str, sender: str, recipient: str, key: str = "pay") -> dict[str, Any]:
    return {
        "nodes": [
            {
                "key": key,
                "executor": EvmTransferExecutor.key,
                "config": {"lane": LANE, "chain": chain, "from": sender, "to": recipient},
                "depends_on": [],
            }
        ]
    }


def start_transfer(
    conn: psycopg.Connection[Any],
    chain: str,
    sender: str,
    recipient: str,
    amount: Decimal,
    external_id: str,
) -> tuple[int, int]:
    """alice creates a one-transfer movement, bob approves it, it starts: its
    id and its node's id."""
    with as_person(conn, "alice"):
        created = procs.create_movement(
            external_id, amount, plan=transfer_plan(chain, sender, recipient)
        ).one(conn)
    approve(conn, created.movement_id)
    procs.start_approved_movements(1000).one(conn)
    row = conn.execute(
        "SELECT id FROM movement_request_nodes WHERE request_id = %s", (created.movement_id,)
    ).fetchone()
    assert row is not None
    return created.movement_id, int(row[0])


def run_batch(
    db: Any,
    batch: Callable[[WorkerContext, str], Awaitable[int]],
    chain_set: LocalChainSet,
    executor_hook: Callable[[EvmTransferExecutor], None] | None = None,
) -> int:
    """One batch of a worker, as a runner login carrying the real evm_transfer
    executor with the local chains' environment (RPC URLs, keystore)."""

    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "evm-test")
        async with open_pool(conninfo, name="evm-test") as pool:
            executor = EvmTransferExecutor(pool, NETWORK, env=chain_set.runner_env())
            if executor_hook is not None:
                executor_hook(executor)
            ctx = WorkerContext(NETWORK, pool, {executor.key: executor}, "evm-test:1")
            try:
                return await batch(ctx, "worker@evm-test:1")
            finally:
                await executor.aclose()

    return asyncio.run(scenario())


def make_due(conn: psycopg.Connection[Any], node_id: int) -> None:
    """Make a node due for observation now (the test stands in for the time the
    pacing would wait: the observer's claim reads it, nothing else does)."""
    conn.execute(
        "UPDATE movement_request_nodes SET next_observe_at = now() - interval '1 second'"
        " WHERE id = %s",
        (node_id,),
    )


def node_state(conn: psycopg.Connection[Any], node_id: int) -> str:
    row = conn.execute(
        "SELECT node_state::text FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def web3_of(chain: RunningChain) -> Web3:
    return Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))


def usdc_balance(chain: RunningChain, address: str) -> int:
    usdc = web3_of(chain).eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    return int(usdc.functions.balanceOf(Web3.to_checksum_address(address)).call())


def head(chain: RunningChain) -> int:
    return int(rpc(chain.rpc_url, "eth_blockNumber"), 16)


def mine(chain: RunningChain, blocks: int = 1) -> None:
    rpc(chain.rpc_url, "anvil_mine", [hex(blocks)])


def manual_mining(chain: RunningChain) -> Callable[[], None]:
    """Stop the chain's interval mining for the test (blocks only by anvil_mine);
    returns a function that starts it again."""
    rpc(chain.rpc_url, "evm_setIntervalMining", [0])
    return lambda: rpc(chain.rpc_url, "evm_setIntervalMining", [chain.block_time])


def transfers_from(chain: RunningChain, sender: str, from_block: int) -> list[tuple[str, int]]:
    """The USDC Transfer logs from ``sender`` since ``from_block`` on the
    canonical chain now: (recipient, value) each."""
    topic_from = "0x" + "00" * 12 + sender[2:].lower()
    logs = rpc(
        chain.rpc_url,
        "eth_getLogs",
        [
            {
                "address": chain.contracts["MockUSDC"],
                "fromBlock": hex(from_block),
                "toBlock": "latest",
                "topics": [TRANSFER_TOPIC, topic_from],
            }
        ],
    )
    return [("0x" + log["topics"][2][-40:], int(log["data"], 16)) for log in logs]


def superuser(db: Any) -> psycopg.Connection[Any]:
    """A superuser connection on the real clock (the runners' clock), bound to testnet."""
    return bind(db.connect())


def settled(chain: RunningChain, sender: str, timeout: float = 15.0) -> None:
    """Wait until no transaction of ``sender`` is in the chain's pool (the
    runs count on the account's nonces from the chain's)."""
    deadline = time.monotonic() + timeout
    while left := in_pool(chain, sender):
        if time.monotonic() > deadline:
            pytest.fail(f"{len(left)} transactions of {sender} stay in {chain.key}'s pool")
        time.sleep(0.2)
