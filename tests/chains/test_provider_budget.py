"""A provider's rate limit met by the runner's request budget (issue 44): the
core workers (node_dispatcher, node_observer, node_recovery) of one runner,
in this process as a runner login (Runtime.open, supervise), run many
movements approved at once while a chain's RPC, or Iris, sits behind the
throttling double (qtg_world.throttle) that answers 429 beyond its rate.

What a treasury relies on: a provider's limit slows the movements down and
fails none. With the budget (``<URL_VARIABLE>_RATE``) below the provider's
limit, every movement completes and, after a warm-up, the provider refuses
nothing; with a budget set above it, the provider's 429s slow the endpoint
down (no node spends its attempts on them) and every movement completes
still; with Iris blocking a client that asked too fast (as Circle's does,
for five minutes), every burn and mint completes. (Iris's limit, its block
and the budget are scaled down: see SCALE.)

Each run prints its figures: requests admitted and refused by the double,
the refusals after the warm-up, the run's length, the most attempts a node
spent."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from chain_support import LocalChainSet
from engine import approve, as_person
from evm_support import (
    LANE,
    NETWORK,
    head,
    register_world,
    settled,
    superuser,
    transfer_plan,
    transfers_from,
)

from qtg_runner.chains.cctp_client import DEPOSIT_FOR_BURN_TOPIC
from qtg_runner.db import procs
from qtg_runner.executors.cctp_burn import IRIS_URL_ENV, CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.executors.registry import SHIPPED, registration
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.workers import BY_NAME
from qtg_world.chains.cctp import load_attesters
from qtg_world.chains.local import RunningChain, rpc, rpc_url_env
from qtg_world.iris import IrisConfig
from qtg_world.iris import serve as serve_iris
from qtg_world.throttle import ThrottleCounts, ThrottleHandle
from qtg_world.throttle import serve as serve_throttle

pytestmark = [pytest.mark.chain, pytest.mark.slow]

PROVIDER_RATE = 25
"""The provider's limit in issue 44: 25 requests a second."""
MOVEMENTS = 30
WARM_UP_S = 5.0
"""The first seconds of a run, when a budget may still meet the provider's
limit (its first burst); no 429 is expected after them."""
RUN_TIMEOUT_S = 240.0
TIMELINE_S = 5.0
MAX_ATTEMPTS = 10
"""fail_submit's limit: a node whose submit fails so often is FAILED."""
LANE_BASELINE_S = 10
"""The evm lane's expected latency here: a first observation 7 s after the
submit (first_poll_fraction 0.7), then every second (poll_fraction 0.1), the
node UNKNOWN only past 100 s (fatal_factor 10)."""
CORE = ("node_dispatcher", "node_observer", "node_recovery")
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED")
AMOUNT = Decimal("0.01")


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet) -> Iterator[psycopg.Connection[Any]]:
    """The local chains' registry and every shipped executor registered (a
    runtime refuses to start otherwise), the evm lane paced for a test."""
    conn = superuser(db)
    register_world(conn, local_chain_set)
    for executor in SHIPPED:
        registration(executor).one(conn)
    procs.upsert_lane_baseline(LANE, LANE_BASELINE_S, min_poll_seconds=1).one(conn)
    chain, sender = local_chain_set.chains[0], local_chain_set.treasury[0].address
    settled(chain, sender)
    yield conn  # a failed run's sends left in the pool: dropped after the test (chain_support)
    conn.close()


def ours(transfers: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The run's own transfers (of AMOUNT), not another test's sent meanwhile
    from the same treasury account of the session's chain."""
    return [t for t in transfers if t[1] == int(AMOUNT * 10**6)]


@pytest.fixture
def provider(local_chain_set: LocalChainSet) -> Iterator[ThrottleHandle]:
    """The first chain's RPC behind a provider of PROVIDER_RATE requests a second."""
    handle = serve_throttle(local_chain_set.chains[0].rpc_url, PROVIDER_RATE, apart=True)
    yield handle
    handle.stop()


def approve_transfers(
    conn: psycopg.Connection[Any], chain_set: LocalChainSet, count: int, tag: str
) -> list[int]:
    """``count`` one-transfer movements on the first chain, from the first
    treasury account to the second, created by alice and approved by bob,
    all before a runner starts any."""
    chain = chain_set.chains[0]
    sender, recipient = (k.address for k in chain_set.treasury)
    ids = []
    for i in range(count):
        with as_person(conn, "alice"):
            created = procs.create_movement(
                f"{tag}-{i}", AMOUNT, plan=transfer_plan(chain.key, sender, recipient)
            ).one(conn)
        assert approve(conn, created.movement_id) == "APPROVED"
        ids.append(created.movement_id)
    return ids


@dataclass(frozen=True)
class Run:
    """What one run of the core workers left: each movement's state, and the
    provider's counts from the run's start (``started``, time.monotonic())."""

    started: float
    seconds: float
    states: dict[int, str]
    counts: ThrottleCounts

    def refused_after_warm_up(self) -> int:
        return self.counts.refused_since(self.started + WARM_UP_S)

    def timeline(self) -> str:
        """The requests admitted/refused in each TIMELINE_S of the run."""
        slots = int(self.seconds // TIMELINE_S) + 1
        admitted, refused = [0] * slots, [0] * slots
        for times, counted in ((self.counts.admitted, admitted), (self.counts.refused, refused)):
            for t in times:
                counted[min(slots - 1, max(0, int((t - self.started) // TIMELINE_S)))] += 1
        return " ".join(f"{a}/{r}" for a, r in zip(admitted, refused, strict=True))


def run_core_workers(
    db: Any,
    env: Mapping[str, str],
    movements: list[int],
    provider: ThrottleHandle,
    concurrency: int = 8,
    timeout_s: float = RUN_TIMEOUT_S,
) -> Run:
    """The runner's core workers, in this process as its runner login with
    ``env`` and ``concurrency`` (`qtg run --concurrency`), from now until
    every movement is finished (or ``timeout_s``)."""
    provider.reset_counts()

    async def scenario() -> Run:
        runtime = await Runtime.open(
            db.runner_dsn(NETWORK), NETWORK, name="budget", max_concurrency=concurrency, env=env
        )
        ctx = runtime.context(concurrency)
        started = time.monotonic()
        supervisor = asyncio.create_task(
            supervise(ctx, [BY_NAME[name] for name in CORE], install_signal_handlers=False)
        )
        states: dict[int, str] = {}
        try:
            async with await psycopg.AsyncConnection.connect(
                runtime.conninfo, autocommit=True
            ) as conn:
                while time.monotonic() < started + timeout_s and not supervisor.done():
                    cur = await conn.execute(
                        "SELECT movement_id, request_state::text FROM movement_progress"
                        " WHERE movement_id = ANY(%s)",
                        (movements,),
                    )
                    states = {int(m): str(s) for m, s in await cur.fetchall()}
                    if len(states) == len(movements) and all(
                        s in FINISHED for s in states.values()
                    ):
                        break
                    await asyncio.sleep(0.2)
            seconds = time.monotonic() - started
        finally:
            ctx.stopping.set()
            await supervisor
            await runtime.close()
        return Run(started, seconds, states, provider.counts())

    return asyncio.run(scenario())


@dataclass(frozen=True)
class NodeRow:
    state: str
    submit_attempts: int
    problem: str
    """The node's last error, else its evidence's problem (an UNKNOWN node's)."""


def nodes_of(conn: psycopg.Connection[Any], movements: list[int]) -> list[NodeRow]:
    rows = conn.execute(
        "SELECT node_state::text, submit_attempts,"
        "       coalesce(last_error, evidence->>'problem', '')"
        "  FROM movement_request_nodes WHERE request_id = ANY(%s)",
        (movements,),
    ).fetchall()
    return [NodeRow(str(s), int(a), str(p)) for s, a, p in rows]


def tally(values: Iterable[str]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for value in values:
        counted[value] = counted.get(value, 0) + 1
    return counted


def report(name: str, run: Run, nodes: list[NodeRow]) -> str:
    """One paragraph of the run's figures (printed: pytest -s shows it)."""
    counts = run.counts
    problems = tally(f"{n.state}: {n.problem[:100]}" for n in nodes if n.state != "COMPLETED")
    return (
        f"\n{name}: {len(run.states)} movements in {run.seconds:.1f} s: "
        f"{tally(run.states.values())}, their nodes {tally(n.state for n in nodes)}; "
        f"the provider admitted {len(counts.admitted)} requests "
        f"(at most {counts.most_admitted_in_a_window()} in a second), refused "
        f"{len(counts.refused)} ({run.refused_after_warm_up()} after the first "
        f"{WARM_UP_S:g} s); most submit attempts of a node "
        f"{max((n.submit_attempts for n in nodes), default=0)}; admitted/refused each "
        f"{TIMELINE_S:g} s: {run.timeline()}; the first refusals at (s) "
        f"{' '.join(f'{t - run.started:.2f}' for t in counts.refused[:40])}"
        + "".join(
            f"; admitted in the second before the refusal at {r - run.started:.2f}: "
            + " ".join(f"{t - run.started:.3f}" for t in counts.admitted if r - 1.0 < t <= r)
            for r in counts.refused[:2]
        )
        + (f"; the unfinished nodes: {problems}" if problems else "")
    )


@pytest.mark.parametrize(
    "budget",
    [
        pytest.param(20, id="budget-below-the-limit"),
        pytest.param(200, id="budget-above-the-limit"),
    ],
)
def test_movements_through_a_limited_rpc_all_complete(
    db: Any,
    world: psycopg.Connection[Any],
    local_chain_set: LocalChainSet,
    provider: ThrottleHandle,
    budget: int,
) -> None:
    """Below the provider's limit the provider refuses nothing after the
    warm-up; above it, its 429s slow the endpoint down and no node spends its
    attempts on them. Either way every movement completes, each transfer once."""
    chain = local_chain_set.chains[0]
    sender = local_chain_set.treasury[0].address
    first_block = head(chain)
    movements = approve_transfers(world, local_chain_set, MOVEMENTS, f"budget-{budget}")
    url_variable = rpc_url_env(chain.key)
    env = local_chain_set.runner_env() | {
        url_variable: provider.url,
        f"{url_variable}_RATE": str(budget),
    }

    run = run_core_workers(db, env, movements, provider)
    nodes = nodes_of(world, movements)
    print(report(f"budget {budget}/s, provider {PROVIDER_RATE}/s", run, nodes))

    if budget < PROVIDER_RATE:
        assert run.refused_after_warm_up() == 0
    else:
        assert run.counts.refused, "the provider never refused: the test asked too little"
    assert set(run.states.values()) == {"COMPLETED"}, run.states
    assert [n for n in nodes if n.state == "FAILED"] == []
    assert max(n.submit_attempts for n in nodes) < MAX_ATTEMPTS
    assert len(ours(transfers_from(chain, sender, first_block))) == MOVEMENTS


# -- Iris ---------------------------------------------------------------------------

IRIS_BURNS = int(os.environ.get("QTG_PROVIDER_IRIS_BURNS", "0"))
"""Set (issue 44's 500): that many burns against Circle's own figures,
unscaled (35 requests a second, then blocked for five minutes; the budget
at its default 30), at the concurrency one runner login serves; and no
refusal after the warm-up. Unset: the suite's scaled run below. (500 here:
all COMPLETED in 152 s, Iris asked 576 times, at most 12 in a second, 0
refused.)"""
SCALE = 1 if IRIS_BURNS else 5
"""40 burns ask Iris at most about 9 times a second here (their observations
paced by their lanes), far from Circle's limit: the limit and the budget are
both divided by SCALE, so that the burns ask beyond the limit."""
IRIS_RATE = 35 // SCALE
"""Circle's limit, 35 requests a second beyond which a client is blocked, scaled."""
IRIS_BUDGET = 30 // SCALE
"""The runner's default Iris budget (30 a second), scaled."""
IRIS_BLOCK_S = 300.0 if IRIS_BURNS else 3.0
"""Circle blocks for five minutes; scaled down a hundredfold."""
BURNS = IRIS_BURNS or 40
FAST_LANE, MINT_LANE = "cctp-fast", "cctp-mint"
IRIS_CONCURRENCY = 32
"""The runner's concurrency: the observer asks about 32 burns at once (its
most), as a runner serving many burns would."""
LANE_BASELINES_S = {FAST_LANE: 10, MINT_LANE: 10}
"""Both lanes polled every second once 7 s old, as the evm lane here."""
ATTESTATION_S = 20.0
"""The fake Iris's fast attestation, as Circle's at its slowest (8-20 s):
each burn asks Iris every second for some 10 s, 40 of them some 30 times a
second at their peak, beyond Iris's limit."""


@pytest.fixture
def iris(local_chain_set: LocalChainSet) -> Iterator[ThrottleHandle]:
    """The fake Iris (no limit of its own) behind a provider that admits
    IRIS_RATE requests a second and blocks for IRIS_BLOCK_S beyond."""
    fake = serve_iris(
        local_chain_set.chains,
        load_attesters(local_chain_set.state_dir),
        IrisConfig(fast_delay_s=ATTESTATION_S, rate_limit_per_s=1_000_000),
    )
    handle = serve_throttle(fake.url, IRIS_RATE, block_s=IRIS_BLOCK_S)
    yield handle
    handle.stop()
    fake.stop()


def approve_burns(conn: psycopg.Connection[Any], chain_set: LocalChainSet, count: int) -> list[int]:
    """``count`` fast burn -> mint movements from the first treasury account on
    the first chain to the second on the second chain, all approved at once."""
    (a, b), (sender, recipient) = chain_set.chains, (k.address for k in chain_set.treasury)
    for lane, baseline_s in LANE_BASELINES_S.items():
        procs.upsert_lane_baseline(lane, baseline_s, min_poll_seconds=1).one(conn)
    plan = {
        "nodes": [
            {
                "key": "burn",
                "executor": CctpBurnExecutor.key,
                "config": {
                    "lane": FAST_LANE,
                    "chain": a.key,
                    "destination_chain": b.key,
                    "from": sender,
                    "to": recipient,
                    "finality": "fast",
                },
                "depends_on": [],
            },
            {
                "key": "mint",
                "executor": CctpMintExecutor.key,
                "config": {
                    "lane": MINT_LANE,
                    "chain": b.key,
                    "source_chain": a.key,
                    "from": sender,
                    "to": recipient,
                },
                "depends_on": ["burn"],
            },
        ]
    }
    ids = []
    for i in range(count):
        with as_person(conn, "alice"):
            created = procs.create_movement(f"burn-{i}", AMOUNT, plan=plan).one(conn)
        assert approve(conn, created.movement_id) == "APPROVED"
        ids.append(created.movement_id)
    return ids


def burns_from(chain: RunningChain, sender: str, from_block: int) -> int:
    """DepositForBurn logs of ``sender`` on ``chain`` since ``from_block``."""
    logs = rpc(
        chain.rpc_url,
        "eth_getLogs",
        [
            {
                "address": chain.contracts["TokenMessengerV2"],
                "fromBlock": hex(from_block),
                "toBlock": "latest",
                "topics": [DEPOSIT_FOR_BURN_TOPIC, None, "0x" + "00" * 12 + sender[2:].lower()],
            }
        ],
    )
    return len(logs)


def test_burns_attested_through_a_blocking_iris_all_complete(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: ThrottleHandle
) -> None:
    chain = local_chain_set.chains[0]
    sender = local_chain_set.treasury[0].address
    first_block = head(chain)
    movements = approve_burns(world, local_chain_set, BURNS)
    # Iris's default budget named (scaled): the double is on this machine,
    # whose endpoints the budget would otherwise leave unpaced
    rate = {f"{IRIS_URL_ENV}_RATE": str(IRIS_BUDGET)}
    env = local_chain_set.runner_env() | {IRIS_URL_ENV: iris.url} | rate

    run = run_core_workers(
        db, env, movements, iris,
        concurrency=RUNNER_LOGIN_CONCURRENCY if IRIS_BURNS else IRIS_CONCURRENCY,
        timeout_s=max(RUN_TIMEOUT_S, 2.0 * BURNS),
    )  # fmt: skip
    nodes = nodes_of(world, movements)
    name = f"{BURNS} burns, Iris budget {IRIS_BUDGET}/s, Iris {IRIS_RATE}/s blocking"
    print(report(f"{name} {IRIS_BLOCK_S:g} s", run, nodes))

    assert set(run.states.values()) == {"COMPLETED"}, run.states
    assert [n for n in nodes if n.state == "FAILED"] == []
    assert burns_from(chain, sender, first_block) == BURNS
    if IRIS_BURNS:
        assert run.refused_after_warm_up() == 0


# -- burns through a limited RPC ----------------------------------------------------

PROVIDER_BURNS = int(os.environ.get("QTG_PROVIDER_BURNS", "20"))
"""Burn -> mint movements in the limited-RPC run: 20 in the suite; issue 44's
500 with QTG_PROVIDER_BURNS=500 (here: all 500 COMPLETED in 178 s, 1,932
requests, at most 20 in any second, 0 refused, no node spent an attempt;
before the observer's THROTTLED outcome and the budget's places, 182
COMPLETED after 1,000 s and 275 UNKNOWN)."""


RUNNER_LOGIN_CONCURRENCY = 11
"""The most one runner login's 30 connections serve: the runtime's two pools
(11 + 4, 11 + 2), its listener and the test's own connection."""


@pytest.fixture
def quick_iris(local_chain_set: LocalChainSet) -> Iterator[str]:
    """The fake Iris, attesting a fast burn after 2 s, with no limit of its own:
    the run is bound by the chain's provider, not by Iris."""
    fake = serve_iris(
        local_chain_set.chains,
        load_attesters(local_chain_set.state_dir),
        IrisConfig(fast_delay_s=2.0, rate_limit_per_s=1_000_000),
    )
    yield fake.url
    fake.stop()


def test_burns_through_a_limited_rpc_all_complete_with_no_429_after_warm_up(
    db: Any,
    world: Any,
    local_chain_set: LocalChainSet,
    provider: ThrottleHandle,
    quick_iris: str,
) -> None:
    """Issue 44's run: burns approved at once, the source chain's RPC behind a
    provider of 25 requests a second, the budget at 20: every burn and mint
    completes, each burn once, and the provider refuses nothing after the
    warm-up (before the budget, 489 of 500 FAILED)."""
    chain = local_chain_set.chains[0]
    sender = local_chain_set.treasury[0].address
    first_block = head(chain)
    movements = approve_burns(world, local_chain_set, PROVIDER_BURNS)
    url_variable = rpc_url_env(chain.key)
    env = local_chain_set.runner_env() | {
        url_variable: provider.url,
        f"{url_variable}_RATE": "20",
        IRIS_URL_ENV: quick_iris,
    }

    run = run_core_workers(
        db, env, movements, provider, concurrency=RUNNER_LOGIN_CONCURRENCY,
        timeout_s=max(RUN_TIMEOUT_S, 2.0 * PROVIDER_BURNS),
    )  # fmt: skip
    nodes = nodes_of(world, movements)
    print(report(f"{PROVIDER_BURNS} burns, budget 20/s, provider {PROVIDER_RATE}/s", run, nodes))
    print(f"the provider was asked: {dict(run.counts.asked)}")

    assert set(run.states.values()) == {"COMPLETED"}, run.states
    assert [n for n in nodes if n.state == "FAILED"] == []
    assert run.refused_after_warm_up() == 0
    assert burns_from(chain, sender, first_block) == PROVIDER_BURNS
