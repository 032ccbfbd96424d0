"""The executor_health sidecar as a runner login: it calls health() of each
executor it carries and records the answer; an evm_transfer whose every chain
is out of reach is DOWN, and from then on its READY nodes are not claimed
(their attempts untouched) while the sim's are; a health() that raises is DOWN
with the reason, and one that never answers is DOWN after HEALTH_TIMEOUT_S."""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import TestDatabase
from engine import claim, create_started, node, node_ids, plan
from rows import Conn, node_row

from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.executors.sim import SimExecutor
from qtg_runner.loop import WorkerContext
from qtg_runner.ports import free_port
from qtg_runner.workers import executor_health

SENDER, RECIPIENT = "0x" + "a1" * 20, "0x" + "b2" * 20


class Broken(SimExecutor):
    async def health(self) -> Any:
        raise ConnectionError("the exchange answered 502")


class Silent(SimExecutor):
    async def health(self) -> Any:
        await asyncio.Event().wait()  # a venue that takes the call and never answers


def run(db: TestDatabase, make: Any) -> int:
    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn("testnet"), "testnet", "health-test")
        async with open_pool(conninfo, name="health-test") as pool:
            executors = make(pool)
            ctx = WorkerContext("testnet", pool, executors, "health-test:1")
            try:
                return await executor_health.batch(ctx, "executor_health@health-test:1")
            finally:
                await executors[EvmTransferExecutor.key].aclose()

    return asyncio.run(scenario())


def status(conn: Conn) -> dict[str, tuple[str, str]]:
    rows = conn.execute("SELECT executor_key, status, detail::text FROM executor_status").fetchall()
    return {key: (state, detail) for key, state, detail in rows}


def test_an_unreachable_executor_is_down_and_its_nodes_wait(db: TestDatabase, conn: Conn) -> None:
    evm = EvmTransferExecutor
    procs.register_executor(evm.key, True, evm.node_config_schema, evm.description).one(conn)
    procs.upsert_chain("dead-a", 990001, "QTG_RPC_DEAD_A", 2, 1000).one(conn)
    procs.upsert_chain_token("dead-a", "USDC", "0x" + "70" * 20, 6).one(conn)
    procs.upsert_treasury_account("dead-a", SENDER, "env:DEAD_KEY").one(conn)
    procs.upsert_treasury_account("dead-a", RECIPIENT, "env:DEAD_KEY_2").one(conn)
    transfer = node("t", [], evm.key, chain="dead-a", **{"from": SENDER, "to": RECIPIENT})
    t = node_ids(conn, create_started(conn, plan(transfer), "transfer"))["t"]
    s = node_ids(conn, create_started(conn, plan(node("s")), "sim"))["s"]
    env = {"QTG_RPC_DEAD_A": f"http://127.0.0.1:{free_port()}"}

    checked = run(
        db,
        lambda pool: {
            evm.key: EvmTransferExecutor(pool, "testnet", env=env, rpc_timeout=1),
            SimExecutor.key: SimExecutor(pool, "testnet"),
        },
    )
    assert checked == 2
    seen = status(conn)
    assert seen[evm.key][0] == "DOWN" and "dead-a" in seen[evm.key][1]
    assert seen[SimExecutor.key][0] == "HEALTHY"
    assert [c["node_id"] for c in claim(conn)] == [s]
    assert (node_row(conn, t)["node_state"], node_row(conn, t)["submit_attempts"]) == ("READY", 0)

    run(
        db,
        lambda pool: {
            evm.key: EvmTransferExecutor(pool, "testnet", env=env, rpc_timeout=1),
            SimExecutor.key: Broken(pool, "testnet"),
        },
    )
    state, detail = status(conn)[SimExecutor.key]
    assert state == "DOWN" and "ConnectionError: the exchange answered 502" in detail


def test_a_health_that_never_answers_is_down_at_the_timeout(
    db: TestDatabase, conn: Conn, monkeypatch: Any
) -> None:
    evm = EvmTransferExecutor
    procs.register_executor(evm.key, True, evm.node_config_schema, evm.description).one(conn)
    monkeypatch.setattr(executor_health, "HEALTH_TIMEOUT_S", 1.0)

    checked = run(
        db,
        lambda pool: {
            evm.key: EvmTransferExecutor(pool, "testnet", env={}, rpc_timeout=1),
            SimExecutor.key: Silent(pool, "testnet"),
        },
    )

    assert checked == 2
    seen = status(conn)
    assert seen[SimExecutor.key] == ("DOWN", '{"reason": "health() gave no answer in 1 s"}')
    assert seen[evm.key][0] == "HEALTHY"  # no chain to reach: checked beside it, not after it
