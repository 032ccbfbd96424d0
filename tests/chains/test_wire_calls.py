"""What an observed CCTP burn asks its providers, counted at the wire (issue
44): the source chain's RPC and Iris each behind a counting double
(qtg_world.throttle, its limit far away), the runner's burn and mint
executors kept across the observer's rounds as a runner process keeps them.

What a treasury relies on: a burn that is final and waits for its
attestation costs one request a poll, Iris's, not four (its receipt, the
head, the receipt's block and Iris): a final receipt is read once, and the
burns of one chain observed in one round read its head once. Burns from one
account dispatched together read the chain's fees, the account's pending
count, balance, USDC balance and allowance, and the messenger's minimum fee
once for all: each costs its gas estimate and its broadcast, and its share
of those reads.

The rounds: ROUNDS observer batches over BURNS burns, all final and none
attested (the Iris double attests after an hour), each round after a block
on each chain. The figures are printed beside the count before the change."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from chain_support import LocalChainSet
from engine import approve, as_person
from evm_support import mine, register_world, superuser

from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.base import Executor
from qtg_runner.executors.cctp_burn import IRIS_URL_ENV, CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.loop import WorkerContext
from qtg_runner.workers import node_dispatcher, node_observer
from qtg_world.chains.cctp import load_attesters
from qtg_world.chains.local import rpc_url_env
from qtg_world.iris import IrisConfig
from qtg_world.iris import serve as serve_iris
from qtg_world.throttle import ThrottleHandle
from qtg_world.throttle import serve as serve_throttle

pytestmark = [pytest.mark.chain, pytest.mark.slow]

NETWORK = "testnet"
BURNS = 8
ROUNDS = 10
FAR_AWAY = 100_000
"""The counting doubles' limit: never reached."""
BEFORE = 4.0
"""Requests a poll of a final, unattested burn cost before (issue 44's count)."""
MOST_A_POLL = 1.25
"""At most this many a poll over ROUNDS rounds: the first reads each final
receipt once (receipt, its block, and Iris; the head once for all), the
others ask Iris alone: (3 * BURNS + 1 + (ROUNDS - 1) * BURNS) / (ROUNDS * BURNS)."""
EXECUTORS = (CctpBurnExecutor, CctpMintExecutor)
SUBMIT_BEFORE = 9.0
"""Requests a burn's submit cost before, at the least (issue 44's count: 9-15)."""
MOST_A_SUBMIT = 4.0
"""At most this many a submit of BURNS burns dispatched together (issue 44's goal)."""


@pytest.fixture
def doubles(local_chain_set: LocalChainSet) -> Iterator[tuple[ThrottleHandle, ThrottleHandle]]:
    """The first chain's RPC and an Iris that attests after an hour, each
    behind a counting double."""
    iris = serve_iris(
        local_chain_set.chains,
        load_attesters(local_chain_set.state_dir),
        IrisConfig(fast_delay_s=3600, rate_limit_per_s=1_000_000),
    )
    chain = serve_throttle(local_chain_set.chains[0].rpc_url, FAR_AWAY)
    iris_counted = serve_throttle(iris.url, FAR_AWAY)
    yield chain, iris_counted
    iris_counted.stop()
    chain.stop()
    iris.stop()


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet) -> Any:
    conn = superuser(db)
    register_world(conn, local_chain_set)
    for executor in EXECUTORS:
        procs.register_executor(
            executor.key, executor.has_side_effect, executor.node_config_schema,
            executor.description,
        ).one(conn)  # fmt: skip
    for lane in ("cctp-fast", "cctp-mint"):
        procs.upsert_lane_baseline(lane, 10, min_poll_seconds=1).one(conn)
    yield conn
    conn.close()


def start_burns(conn: Any, chain_set: LocalChainSet, count: int) -> list[int]:
    """``count`` fast burn -> mint movements started: the burns' node ids."""
    (a, b), (sender, recipient) = chain_set.chains, (k.address for k in chain_set.treasury)
    plan = {
        "nodes": [
            {"key": "burn", "executor": "cctp_burn",
             "config": {"lane": "cctp-fast", "chain": a.key, "destination_chain": b.key,
                        "from": sender, "to": recipient, "finality": "fast"},
             "depends_on": []},
            {"key": "mint", "executor": "cctp_mint",
             "config": {"lane": "cctp-mint", "chain": b.key, "source_chain": a.key,
                        "from": sender, "to": recipient},
             "depends_on": ["burn"]},
        ]
    }  # fmt: skip
    burns = []
    for i in range(count):
        with as_person(conn, "alice"):
            created = procs.create_movement(f"wire-{i}", Decimal("0.01"), plan=plan).one(conn)
        approve(conn, created.movement_id)
        burns.append(created.movement_id)
    procs.start_approved_movements(1000).one(conn)
    rows = conn.execute(
        "SELECT id FROM movement_request_nodes WHERE request_id = ANY(%s) AND node_key = 'burn'",
        (burns,),
    ).fetchall()
    return [int(r[0]) for r in rows]


def observations(conn: Any, burns: list[int]) -> int:
    row = conn.execute(
        "SELECT sum(observe_count) FROM movement_request_nodes WHERE id = ANY(%s)", (burns,)
    ).fetchone()
    return int(row[0] or 0)


def make_all_due(conn: Any, burns: list[int]) -> None:
    conn.execute(
        "UPDATE movement_request_nodes SET next_observe_at = now() - interval '1 second'"
        " WHERE id = ANY(%s)",
        (burns,),
    )


def test_a_final_burn_waiting_for_its_attestation_costs_one_request_a_poll(
    db: Any,
    world: Any,
    local_chain_set: LocalChainSet,
    doubles: tuple[ThrottleHandle, ThrottleHandle],
) -> None:
    chain_double, iris_double = doubles
    burns = start_burns(world, local_chain_set, BURNS)
    env = local_chain_set.runner_env() | {
        rpc_url_env(local_chain_set.chains[0].key): chain_double.url,
        IRIS_URL_ENV: iris_double.url,
    }

    async def scenario() -> tuple[dict[str, int], int, dict[str, int], dict[str, int], int]:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "wire-test")
        async with open_pool(conninfo, name="wire-test") as pool:
            executors: dict[str, Executor] = {e.key: e(pool, NETWORK, env=env) for e in EXECUTORS}
            ctx = WorkerContext(NETWORK, pool, executors, "wire-test:1")
            try:
                chain_double.reset_counts()
                assert await node_dispatcher.batch(ctx, "worker@wire-test:1") == BURNS
                submits = dict(chain_double.counts().asked)
                for chain in local_chain_set.chains:  # every burn final
                    mine(chain, 4)
                chain_double.reset_counts()
                iris_double.reset_counts()
                before = observations(world, burns)
                for _ in range(ROUNDS):
                    make_all_due(world, burns)
                    await node_observer.batch(ctx, "worker@wire-test:1")
                    for chain in local_chain_set.chains:
                        mine(chain)
                polls = observations(world, burns) - before
                chain_counts = chain_double.counts()
                iris_counts = iris_double.counts()
                asked = len(chain_counts.admitted) + len(iris_counts.admitted)
                return submits, polls, dict(chain_counts.asked), dict(iris_counts.asked), asked
            finally:
                for e in executors.values():
                    await e.aclose()  # type: ignore[attr-defined]

    submits, polls, chain_asked, iris_asked, asked = asyncio.run(scenario())
    states = world.execute(
        "SELECT DISTINCT node_state::text FROM movement_request_nodes WHERE id = ANY(%s)",
        (burns,),
    ).fetchall()
    per_poll = asked / polls
    print(
        f"\n{BURNS} final burns waiting for Iris, {ROUNDS} rounds: {polls} polls, "
        f"{asked} requests ({per_poll:.2f} a poll; {BEFORE:g} before): chain {chain_asked}, "
        f"Iris {iris_asked}; their submits {sum(submits.values()) / BURNS:.2f} requests each "
        f"({SUBMIT_BEFORE:g} before): {submits}"
    )
    assert states == [("OBSERVING",)]
    assert polls == BURNS * ROUNDS
    assert sum(iris_asked.values()) == polls  # Iris asked once a poll
    assert chain_asked.get("eth_getTransactionReceipt", 0) == BURNS  # each receipt once
    # the head once for the burns (twice when a loaded machine stretches the
    # first round past half a block time)
    assert chain_asked.get("eth_blockNumber", 0) <= 2
    assert per_poll <= MOST_A_POLL
    assert submits.get("eth_sendRawTransaction", 0) == BURNS
    # the pending count once for the batch (its re-signing included), twice
    # when a loaded machine stretches the batch past half a block time
    assert submits.get("eth_getTransactionCount", 0) <= 2
    # the balances, allowance and minimum fee of the batch: one Multicall3
    # read, the sender's ether in it (its ether read again alone, or the batch
    # twice, when a loaded machine stretches the batch past half a block time)
    assert submits.get("eth_call", 0) + submits.get("eth_getBalance", 0) <= 2
    assert sum(submits.values()) / BURNS <= MOST_A_SUBMIT
