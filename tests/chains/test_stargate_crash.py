"""Crash tests of the stargate executor: real `qtg run` processes as a runner
login against the real local chains, with the Stargate relayer beside them,
SIGKILLed at the three places a crash can leave a send half done; then a fresh
`qtg run` finishes the work from the chain's evidence alone (the recorded
hashes, the OFTSent and BusDriven on the source, the guid's OFTReceived on the
destination).

  * after_intent: signed, bytes and nonce recorded, nothing broadcast;
  * after_submit: broadcast, complete_submit never called;
  * during observation: nodes OBSERVING when the runner dies.

Each case runs a taxi from test-a to test-b and a bus from test-b to test-a
(treasury 1 -> treasury 2), each with its own amount. The chains are asked,
not the engine: exactly one OFTSent per movement from the sender on its
source, exactly one OFTReceived of its amount to the recipient on its
destination, the balances moved by exactly that. The figures print one line
per case (`pytest -s`)."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from chain_support import LocalChainSet
from evm_support import head, mine, superuser
from runner_helpers import Runners, node_rows, register_runner_sim, runner_env, runners, wait_until
from stargate_support import (
    SCALE,
    Side,
    oft_received_by,
    oft_sent_from,
    register_stargate,
    start_send,
)

from qtg_world import stargate as relayer
from qtg_world.chains.stargate import stargate_fee

pytestmark = [pytest.mark.chain, pytest.mark.slow]


@pytest.fixture(scope="module")
def relay(local_chain_set: LocalChainSet) -> Iterator[relayer.RelayerHandle]:
    handle = relayer.serve(
        local_chain_set.chains, relayer.RelayerConfig(bus_wait_s=100.0, time_scale=SCALE)
    )
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Runners]:
    with runners(tmp_path) as r:
        yield r


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet, relay: relayer.RelayerHandle) -> Any:
    conn = superuser(db)
    register_runner_sim(conn)
    register_stargate(conn, local_chain_set)
    return conn


def run_env(db: Any, chain_set: LocalChainSet, **extra: str) -> dict[str, str]:
    return runner_env(db.runner_dsn("testnet"), **chain_set.runner_env(), **extra)


def intent_states(conn: Any) -> Counter[str]:
    return Counter(r[0] for r in conn.execute("SELECT intent_state FROM node_intents").fetchall())


CASES = ("after_intent", "after_submit", "during_observation")


@pytest.mark.parametrize("case", CASES)
def test_a_runner_killed_mid_send_leaves_each_send_done_once(
    db: Any, world: Any, local_chain_set: LocalChainSet, processes: Runners, case: str
) -> None:
    a, b = (Side(c) for c in local_chain_set.chains)
    sender, recipient = (k.address for k in local_chain_set.treasury)
    number = CASES.index(case) + 1
    sends = [  # (source, destination, mode, amount in base units)
        (a, b, "taxi", 1_000_000 + number * 10_000 + 1),
        (b, a, "bus", 1_000_000 + number * 10_000 + 2),
    ]
    start = {s.chain.key: head(s.chain) + 1 for s in (a, b)}
    before = {(s.chain.key, who): s.balance(who) for s in (a, b) for who in (sender, recipient)}
    for src, dst, mode, amount in sends:
        start_send(
            world, src.chain.key, dst.chain.key, sender, recipient,
            Decimal(amount) / 10**6, f"crash-{case}-{mode}", mode,
        )  # fmt: skip

    if case == "during_observation":
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
    else:
        crashing = processes.start("run", env=run_env(db, local_chain_set, QTG_FAILPOINTS=case))
        assert crashing.wait(timeout=60) == -signal.SIGKILL, crashing.describe()
    at_kill = Counter(node_rows(world).values())
    for side in (a, b):
        mine(side.chain)  # whatever was broadcast is mined now
    sent_at_kill = sum(
        len(oft_sent_from(src, sender, start[src.chain.key])) for src, _, _, _ in sends
    )
    if case == "after_intent":
        assert sent_at_kill == 0 and intent_states(world)["PREPARED"] >= 1
    if case == "after_submit":
        assert at_kill["SUBMITTING"] >= 1 and sent_at_kill >= 1, "nothing was broadcast"

    fresh = processes.start("run", env=run_env(db, local_chain_set))

    def all_completed() -> bool:
        for side in (a, b):
            mine(side.chain)
        return set(node_rows(world).values()) == {"COMPLETED"}

    wait_until(all_completed, 120, "every node COMPLETED", every=0.5, alive=[fresh])
    assert fresh.stop(timeout=20) == 0, fresh.describe()

    on_chain = delivered = 0
    for src, dst, _mode, amount in sends:
        received = amount - stargate_fee(amount)
        sent = oft_sent_from(src, sender, start[src.chain.key])
        got = [
            e
            for e in oft_received_by(dst, recipient, start[dst.chain.key])
            if e["amountReceivedLD"] == received
        ]
        assert [e["amountSentLD"] for e in sent] == [amount], sent
        assert len(got) == 1, got
        on_chain += len(sent)
        delivered += len(got)
    # sender on a paid the taxi, on b the bus; the recipient got each less the fee
    taxi, bus = sends[0][3], sends[1][3]
    assert a.balance(sender) == before[(a.chain.key, sender)] - taxi
    assert b.balance(sender) == before[(b.chain.key, sender)] - bus
    assert b.balance(recipient) == before[(b.chain.key, recipient)] + taxi - stargate_fee(taxi)
    assert a.balance(recipient) == before[(a.chain.key, recipient)] + bus - stargate_fee(bus)
    print(
        f"\nstargate crash {case}: at the kill {dict(at_kill)}, {sent_at_kill} sent;"
        f" sends attempted {len(sends)}, on chain {on_chain}, delivered {delivered},"
        f" duplicates {on_chain - len(sends)}"
    )
    assert intent_states(world) == {"SUBMITTED": len(sends)}, intent_states(world)
