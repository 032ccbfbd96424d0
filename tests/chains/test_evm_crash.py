"""Crash tests of the evm_transfer executor: real `qtg run` processes as a runner
login against the real local chains, SIGKILLed at the three places a crash
can leave a transfer half done, then a fresh `qtg run` finishes the work.

What a treasury relies on: whatever moment the runner dies at, every transfer
happens exactly once on chain and every node ends COMPLETED:

  * after_intent: the transactions are signed, their bytes and nonces recorded,
    nothing broadcast; the fresh runner's recovery broadcasts the recorded bytes;
  * after_submit: broadcast, complete_submit never called; recovery finds the
    recorded hashes on chain (or in the mempool) and reports them in flight,
    never signing a second transaction;
  * during observation: nodes OBSERVING, some below the finality depth; the
    fresh runner's observer takes them up again.

Each case runs five transfers on each of the two local chains, from the first
treasury account to the second, each with its own amount. The chain is asked,
not the engine: the balances of sender and recipient moved by exactly the sum,
and the USDC Transfer logs from the sender since the test began are exactly one
per movement, with its amount. The figures (transfers attempted, on chain,
duplicates) are printed one line per case (`pytest -s` shows them).

The killed runner's claims are taken by the fresh runner's recovery as soon as
the dead runner's heartbeats are two intervals old (claim_recovery_nodes' dead
claimers): no lease has to run out, so the database clock is left alone.
Every wait is a condition with a deadline.
"""

from __future__ import annotations

import signal
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from chain_support import LocalChainSet, in_pool
from evm_support import (
    LANE,
    head,
    mine,
    register_world,
    settled,
    start_transfer,
    superuser,
    transfers_from,
    usdc_balance,
)
from runner_helpers import (
    Runners,
    node_rows,
    register_runner_sim,
    runner_env,
    runners,
    wait_until,
)

from qtg_runner.db import procs
from qtg_world.chains.local import rpc

pytestmark = [pytest.mark.chain, pytest.mark.slow]

PER_CHAIN = 5
UNITS = 10**6  # MockUSDC has 6 decimals


@pytest.fixture
def processes(tmp_path: Path) -> Any:
    with runners(tmp_path) as r:
        yield r


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet) -> Any:
    """The registry filled for the local chains, every shipped executor registered
    (a runner refuses to start without them), and the evm lane paced for a test:
    a first look a second after the submit, then every half second. Each case
    counts on the treasury account's nonces from the chain's: it starts once
    no transaction of the account waits in either chain's pool."""
    for chain in local_chain_set.chains:
        settled(chain, local_chain_set.treasury[0].address)
    conn = superuser(db)
    register_runner_sim(conn)
    register_world(conn, local_chain_set)
    procs.upsert_lane_baseline(
        LANE,
        4,
        min_poll_seconds=Decimal("0.5"),
        first_poll_fraction=Decimal("0.25"),
        poll_fraction=Decimal("0.125"),
        fatal_factor=100,
    ).one(conn)
    return conn


def amount_of(case: int, chain_index: int, i: int) -> Decimal:
    """A distinct amount per movement of a case: 1.CCIIUU USDC, e.g. 1.010203."""
    return Decimal(f"1.{case:02d}{chain_index:02d}{i + 1:02d}")


def start_movements(
    conn: Any, chain_set: LocalChainSet, case: int
) -> dict[str, dict[int, Decimal]]:
    """PER_CHAIN transfers on each chain, treasury 1 -> treasury 2: chain key ->
    node id -> amount."""
    sender, recipient = (k.address for k in chain_set.treasury)
    movements: dict[str, dict[int, Decimal]] = {}
    for c, chain in enumerate(chain_set.chains):
        movements[chain.key] = {}
        for i in range(PER_CHAIN):
            amount = amount_of(case, c, i)
            _, node_id = start_transfer(
                conn, chain.key, sender, recipient, amount, f"crash-{case}-{chain.key}-{i}"
            )
            movements[chain.key][node_id] = amount
    return movements


def run_env(db: Any, chain_set: LocalChainSet, **extra: str) -> dict[str, str]:
    return runner_env(db.runner_dsn("testnet"), **chain_set.runner_env(), **extra)


def intent_states(conn: Any) -> Counter[str]:
    rows = conn.execute("SELECT intent_state FROM node_intents").fetchall()
    return Counter(r[0] for r in rows)


def broadcasts(conn: Any) -> int:
    row = conn.execute("SELECT count(*) FROM evm_transactions").fetchone()
    return int(row[0])


def recover_and_check(
    db: Any,
    conn: Any,
    chain_set: LocalChainSet,
    processes: Runners,
    movements: dict[str, dict[int, Decimal]],
    start: dict[str, tuple[int, int, int]],
    case: str,
) -> None:
    """A fresh `qtg run` (no failpoint) until every node is COMPLETED, then the
    chain's word: each transfer exactly once, the balances moved by the sum."""
    fresh = processes.start("run", env=run_env(db, chain_set))
    # finality depth 2 at 1 s / 2 s blocks; blocks are mined on demand as well
    # so that the wait is bounded by the engine, not by the slower chain

    def all_completed() -> bool:
        for chain in chain_set.chains:
            mine(chain)
        return set(node_rows(conn).values()) == {"COMPLETED"}

    try:
        wait_until(all_completed, 90, "every node COMPLETED", every=0.5, alive=[fresh])
    except AssertionError as exc:
        stands = where_it_stands(conn, chain_set)
        raise AssertionError(f"{exc}\n{stands}\n{fresh.describe()}") from exc
    assert fresh.stop(timeout=20) == 0, fresh.describe()

    sender, recipient = (k.address.lower() for k in chain_set.treasury)
    attempted = on_chain = duplicates = 0
    for chain in chain_set.chains:
        expected = movements[chain.key]
        first_block, sender_before, recipient_before = start[chain.key]
        logs = transfers_from(chain, sender, first_block)
        values = Counter(value for to, value in logs if to.lower() == recipient)
        wanted = Counter(int(a * UNITS) for a in expected.values())
        attempted += len(expected)
        on_chain += sum(values[v] for v in wanted)
        duplicates += sum(max(0, values[v] - 1) for v in wanted)
        assert len(logs) == len(expected), (chain.key, logs)
        assert values == wanted, (chain.key, logs)
        total = sum(wanted.elements())
        assert usdc_balance(chain, sender) == sender_before - total
        assert usdc_balance(chain, recipient) == recipient_before + total
    print(
        f"\nevm crash {case}: transfers attempted {attempted}, on chain {on_chain},"
        f" duplicates {duplicates}, broadcasts recorded {broadcasts(conn)}"
    )
    assert (attempted, on_chain, duplicates) == (attempted, attempted, 0)
    assert intent_states(conn) == {"SUBMITTED": attempted}, intent_states(conn)


def where_it_stands(conn: Any, chain_set: LocalChainSet) -> str:
    """What a failed case needs to be read: each node's state and last error,
    its intent's nonce, and the treasury account's nonces and pool on each chain."""
    rows = conn.execute(
        "SELECT n.id, n.node_state::text, i.intent_state, i.nonce, n.last_error"
        " FROM movement_request_nodes n LEFT JOIN node_intents i ON i.node_id = n.id"
        " ORDER BY n.id"
    ).fetchall()
    sender = chain_set.treasury[0].address
    lines = [f"node {r[0]}: {r[1]}, intent {r[2]} nonce {r[3]}, last error {r[4]!r}" for r in rows]
    for chain in chain_set.chains:
        nonces = [
            int(rpc(chain.rpc_url, "eth_getTransactionCount", [sender, tag]), 16)
            for tag in ("latest", "pending")
        ]
        lines.append(
            f"{chain.key}: head {head(chain)}, {sender} nonce latest/pending {nonces},"
            f" in the pool {in_pool(chain, sender)}"
        )
    return "\n".join(lines)


def chain_start(chain_set: LocalChainSet) -> dict[str, tuple[int, int, int]]:
    """chain key -> (the next block, the sender's and the recipient's USDC)."""
    sender, recipient = (k.address for k in chain_set.treasury)
    return {
        c.key: (head(c) + 1, usdc_balance(c, sender), usdc_balance(c, recipient))
        for c in chain_set.chains
    }


def test_runner_killed_after_its_intents_broadcasts_the_recorded_bytes_once(
    db: Any, world: Any, local_chain_set: LocalChainSet, processes: Runners
) -> None:
    start = chain_start(local_chain_set)
    movements = start_movements(world, local_chain_set, 1)

    crashing = processes.start(
        "run", env=run_env(db, local_chain_set, QTG_FAILPOINTS="after_intent")
    )
    assert crashing.wait(timeout=60) == -signal.SIGKILL, crashing.describe()
    states = Counter(node_rows(world).values())
    # signed and recorded, nothing broadcast: no Transfer from the sender yet
    assert states["SUBMITTING"] >= 1, states
    assert intent_states(world)["PREPARED"] >= 1
    print(
        f"\nevm crash after_intent: at the kill {dict(states)},"
        f" intents {dict(intent_states(world))}"
    )
    sender = local_chain_set.treasury[0].address
    for chain in local_chain_set.chains:
        mine(chain)
        assert transfers_from(chain, sender, start[chain.key][0]) == []

    recover_and_check(db, world, local_chain_set, processes, movements, start, "after_intent")


def test_runner_killed_after_its_broadcast_before_the_report_never_signs_again(
    db: Any, world: Any, local_chain_set: LocalChainSet, processes: Runners
) -> None:
    start = chain_start(local_chain_set)
    movements = start_movements(world, local_chain_set, 2)

    crashing = processes.start(
        "run", env=run_env(db, local_chain_set, QTG_FAILPOINTS="after_submit")
    )
    assert crashing.wait(timeout=60) == -signal.SIGKILL, crashing.describe()
    # broadcast, the submit never reported: the nodes are still SUBMITTING
    assert Counter(node_rows(world).values())["SUBMITTING"] >= 1
    rpc_urls = {chain.key: chain.rpc_url for chain in local_chain_set.chains}
    # some of its sends may wait in a pool behind a nonce it never sent: the
    # chains are asked which recorded transactions they know, mined or pooled
    known = [
        tx_hash
        for chain_key, tx_hash in world.execute("SELECT chain_key, tx_hash FROM evm_transactions")
        if rpc(rpc_urls[chain_key], "eth_getTransactionByHash", [tx_hash]) is not None
    ]
    assert known, (
        "the killed runner broadcast nothing\n"
        + where_it_stands(world, local_chain_set)
        + "\n"
        + crashing.describe()
    )
    sender = local_chain_set.treasury[0].address
    mined = 0
    for chain in local_chain_set.chains:
        mine(chain)
        mined += len(transfers_from(chain, sender, start[chain.key][0]))
    print(
        f"\nevm crash after_submit: at the kill {dict(Counter(node_rows(world).values()))},"
        f" {len(known)} broadcast, {mined} of them mined"
    )

    recover_and_check(db, world, local_chain_set, processes, movements, start, "after_submit")


def test_runner_killed_while_observing_finishes_each_transfer_once(
    db: Any, world: Any, local_chain_set: LocalChainSet, processes: Runners
) -> None:
    start = chain_start(local_chain_set)
    movements = start_movements(world, local_chain_set, 3)

    first = processes.start("run", env=run_env(db, local_chain_set))
    wait_until(
        lambda: "OBSERVING" in node_rows(world).values(),
        60,
        "a node OBSERVING",
        every=0.05,
        alive=[first],
    )
    first.signal(signal.SIGKILL)
    assert first.wait(timeout=10) == -signal.SIGKILL
    states = Counter(node_rows(world).values())
    assert states["COMPLETED"] < 2 * PER_CHAIN, "everything finished before the kill"
    print(f"\nevm crash during_observation: at the kill {dict(states)}")

    recover_and_check(db, world, local_chain_set, processes, movements, start, "during_observation")
