"""Pacing that learns each lane's latency: refresh_lane_pacing and what
observe_pacing does with its schedule.

complete_observe leaves a latency sample per node it sees COMPLETED (done
after the node's last look, by the look that saw it); refresh_lane_pacing
draws each lane's schedule from its newest samples once it has 100 (polls at
the lane's quantiles, never earlier than the phases' poll of the same rank);
observe_pacing polls by it while it lasts, by the phases after it and before
it exists. All on the pinned clock; the expected times come from the rule in
refresh_lane_pacing's header and the lane's settings (baseline 60 s: the
phases poll at 42, 48, 54, ... 120 s, then every tenth of the time elapsed).
"""

from __future__ import annotations

import asyncio
import itertools
from decimal import Decimal
from typing import Any

import psycopg
from conftest import TestDatabase
from engine import claim, create_started, node, observe, plan, submit
from rows import T0, set_clock, time_at
from test_complete_observe_pacing import pacing_of, step, submitted_node, upsert_lane

from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.loop import WorkerContext
from qtg_runner.workers import lane_pacing_refresh

# the learned schedule of a lane whose nodes finish at 50 s (half) or 70 s
# (half), with the default settings: the quantiles are 50, 50, 70, 70, ...;
# each poll at least min_poll (1 s) after the one before and no earlier than
# the phases' poll of the same rank (42 + 6 (k - 1) up to 120, then x 1.1)
TWO_PEAKS = [
    50,
    51,
    70,
    71,
    72,
    73,
    78,
    84,
    90,
    96,
    102,
    108,
    114,
    120,
    132,
    145.2,
    159.72,
    175.692,
]


def plant_samples(
    conn: psycopg.Connection[Any], lane: str, *intervals: tuple[float, float, int]
) -> None:
    """``count`` samples done after ``after`` and by ``by`` seconds, per (after, by, count)."""
    for after, by, count in intervals:
        conn.execute(
            "INSERT INTO lane_latency_samples (lane, after_seconds, by_seconds, finished_at)"
            " SELECT %s, %s, %s, clock() FROM generate_series(1, %s)",
            (lane, after, by, count),
        )


def refresh(conn: psycopg.Connection[Any]) -> dict[str, procs.LanePacing]:
    return {row.lane: row for row in procs.refresh_lane_pacing().all(conn)}


def poll_times(
    conn: psycopg.Connection[Any], node_id: int, outcome: str = "PENDING"
) -> list[float]:
    """Observe ``node_id`` at each next_observe_at until it leaves OBSERVING;
    the seconds since T0 of every poll."""
    times = []
    while True:
        state, _, due = pacing_of(conn, node_id)
        if state not in ("SUBMITTED", "OBSERVING") or due is None:
            return times
        seconds = (due - T0).total_seconds()
        times.append(seconds)
        step(conn, node_id, seconds, outcome)


def test_complete_observe_leaves_a_sample_per_completed_node(conn: psycopg.Connection[Any]) -> None:
    upsert_lane(conn, "chain_l2", 60)
    at_first = submitted_node(conn, "chain_l2", "m-1")["node_id"]
    later = submitted_node(conn, "chain_l2", "m-2")["node_id"]
    failed = submitted_node(conn, "chain_l2", "m-3")["node_id"]
    step(conn, at_first, 42, "COMPLETED")  # done by its first look
    step(conn, later, 42)
    step(conn, later, 48, "COMPLETED")  # done after 42 s, by 48 s
    step(conn, failed, 42, "FAILED")  # not a latency: no sample
    rows = conn.execute(
        "SELECT lane, after_seconds, by_seconds, finished_at FROM lane_latency_samples ORDER BY id"
    ).fetchall()
    assert rows == [("chain_l2", 0, 42, time_at(42)), ("chain_l2", 42, 48, time_at(48))]


def test_before_100_samples_the_lane_paces_by_its_phases(conn: psycopg.Connection[Any]) -> None:
    upsert_lane(conn, "chain_l2", 60)
    plant_samples(conn, "chain_l2", (50, 50, 50), (70, 70, 49))
    lanes = refresh(conn)
    assert (lanes["chain_l2"].samples, lanes["chain_l2"].learned, lanes["chain_l2"].poll_at) == (
        99,
        False,
        None,
    )
    assert conn.execute("SELECT count(*) FROM lane_pacing_learned").fetchone() == (0,)
    node_id = submitted_node(conn, "chain_l2")["node_id"]
    assert pacing_of(conn, node_id) == ("SUBMITTED", "pre_baseline", time_at(42))

    plant_samples(conn, "chain_l2", (70, 70, 1))  # the 100th
    lanes = refresh(conn)
    assert lanes["chain_l2"].learned
    assert lanes["chain_l2"].poll_at == [Decimal(str(x)) for x in TWO_PEAKS]


def test_with_enough_samples_the_lane_polls_at_its_learned_schedule(
    conn: psycopg.Connection[Any],
) -> None:
    upsert_lane(conn, "chain_l2", 60)
    plant_samples(conn, "chain_l2", (50, 50, 50), (70, 70, 50))
    assert refresh(conn)["chain_l2"].learned
    row = conn.execute(
        "SELECT samples, quantile_seconds[1:4], poll_at, lane_updated_at, refreshed_at"
        " FROM lane_pacing_learned WHERE lane = 'chain_l2'"
    ).fetchone()
    assert row is not None
    assert row[:2] == (100, [50, 50, 70, 70])
    assert row[2] == [Decimal(str(x)) for x in TWO_PEAKS]
    assert row[3:] == (T0, T0)

    node_id = submitted_node(conn, "chain_l2")["node_id"]
    # the first look at the first learned time (complete_submit), the phase as before
    assert pacing_of(conn, node_id) == ("SUBMITTED", "pre_baseline", time_at(50))
    assert step(conn, node_id, 50) == {
        "node_state": "OBSERVING",
        "observe_phase": "pre_baseline",
        "next_observe_at": time_at(51),
    }
    assert step(conn, node_id, 51)["next_observe_at"] == time_at(70)
    # a late look takes the next learned time after it (74.5 s: 78 s) ...
    assert step(conn, node_id, 74.5)["next_observe_at"] == time_at(78)
    # ... at least min_poll (1 s) away (83.5 s: 84 s is too close)
    assert step(conn, node_id, 83.5)["next_observe_at"] == time_at(84.5)
    assert step(conn, node_id, 84.5, "COMPLETED")["node_state"] == "COMPLETED"
    # the node's own sample: done after 83.5 s, by 84.5 s
    assert conn.execute(
        "SELECT after_seconds, by_seconds FROM lane_latency_samples ORDER BY id DESC LIMIT 1"
    ).fetchone() == (Decimal("83.5"), Decimal("84.5"))


def test_a_degraded_node_is_never_polled_more_than_by_the_phases(
    conn: psycopg.Connection[Any],
) -> None:
    """A node slower than everything the lane learned: at each of its polls it
    has had no more polls than a node of a twin lane that learned nothing, and
    it reaches fatal (UNKNOWN, for recovery) as that one does."""
    upsert_lane(conn, "chain_l2", 60)
    upsert_lane(conn, "twin", 60)
    plant_samples(conn, "chain_l2", (50, 50, 50), (70, 70, 50))
    assert refresh(conn)["chain_l2"].learned
    assert not refresh(conn)["twin"].learned
    learned = submitted_node(conn, "chain_l2", "m-learned")["node_id"]
    phases = submitted_node(conn, "twin", "m-phases")["node_id"]

    learned_polls = poll_times(conn, learned)
    set_clock(conn, 0)
    phases_polls = poll_times(conn, phases)

    assert learned_polls[:6] == TWO_PEAKS[:6]
    assert phases_polls[:3] == [42, 48, 54]
    assert len(learned_polls) <= len(phases_polls)
    # the k-th poll of the learned lane comes no earlier than the phases' k-th
    assert all(a >= b for a, b in zip(learned_polls, phases_polls, strict=False))
    # past the learned schedule, the phases' poll times exactly (never late here)
    tail = [t for t in learned_polls if t > TWO_PEAKS[-1]]
    assert tail and set(tail) <= set(phases_polls)
    for node_id in (learned, phases):
        state, phase, due = pacing_of(conn, node_id)
        assert (state, phase, due) == ("UNKNOWN", "fatal", None)
    assert learned_polls[-1] >= 600 and phases_polls[-1] >= 600


def test_the_learned_schedule_keeps_min_poll(conn: psycopg.Connection[Any]) -> None:
    upsert_lane(conn, "slow_api", 60, min_poll_seconds=5)
    plant_samples(conn, "slow_api", (50, 50, 50), (70, 70, 50))
    poll_at = [float(x) for x in refresh(conn)["slow_api"].poll_at or []]
    assert poll_at[:5] == [50, 55, 70, 75, 80]
    assert all(b - a >= 5 for a, b in itertools.pairwise(poll_at))


def test_a_change_of_the_lane_sets_its_schedule_aside_until_the_next_refresh(
    conn: psycopg.Connection[Any],
) -> None:
    upsert_lane(conn, "chain_l2", 60)
    plant_samples(conn, "chain_l2", (50, 50, 50), (70, 70, 50))
    assert refresh(conn)["chain_l2"].learned
    set_clock(conn, 1)
    upsert_lane(conn, "chain_l2", 100)  # updated_at moves on
    first = submitted_node(conn, "chain_l2", "m-1")["node_id"]
    assert pacing_of(conn, first)[2] == time_at(1 + 70)  # the phases: 0.7 x 100

    refresh(conn)
    second = submitted_node(conn, "chain_l2", "m-2")["node_id"]
    # learned again for the new settings: the phases' first poll (70 s) comes first
    assert pacing_of(conn, second)[2] == time_at(1 + 70)
    assert step(conn, second, 71)["next_observe_at"] == time_at(1 + 80)  # max(70, 70 + 10)


def test_refresh_keeps_the_newest_2000_samples_of_each_lane(
    conn: psycopg.Connection[Any],
) -> None:
    upsert_lane(conn, "chain_l2", 60)
    plant_samples(conn, "chain_l2", (10, 10, 5), (50, 50, 1000), (70, 70, 1000))
    plant_samples(conn, "gone", (50, 50, 200))  # a lane without a row
    assert refresh(conn)["chain_l2"].samples == 2000
    rows = conn.execute(
        "SELECT lane, min(after_seconds), count(*) FROM lane_latency_samples GROUP BY lane"
    ).fetchall()
    assert rows == [("chain_l2", 50, 2000)]


def test_a_lane_without_its_own_row_does_not_take_the_default_lanes_schedule(
    conn: psycopg.Connection[Any],
) -> None:
    plant_samples(conn, "default", (50, 50, 50), (70, 70, 50))
    assert refresh(conn)["default"].learned
    node_id = submitted_node(conn, "default")["node_id"]
    assert pacing_of(conn, node_id)[2] == time_at(50)
    upsert_lane(conn, "retired", 60)
    create_started(conn, plan(node("transfer", lane="retired")), "m-retired")
    conn.execute("DELETE FROM lane_baselines WHERE lane = 'retired'")
    (claimed,) = claim(conn)
    assert submit(conn, claimed) == "SUBMITTED"
    assert pacing_of(conn, claimed["node_id"])[2] == time_at(42)  # the default's phases


def test_a_lane_with_no_samples_paces_as_before(conn: psycopg.Connection[Any]) -> None:
    upsert_lane(conn, "chain_l2", 60)
    assert not refresh(conn)["chain_l2"].learned
    node_id = submitted_node(conn, "chain_l2")["node_id"]
    assert observe(conn, node_id, "PENDING") is None  # not due before 42 s
    assert step(conn, node_id, 42)["next_observe_at"] == time_at(48)


def test_the_sidecar_refreshes_as_the_runner_login(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    upsert_lane(conn, "chain_l2", 60)
    plant_samples(conn, "chain_l2", (50, 50, 50), (70, 70, 50))
    conninfo = bound_conninfo(db.runner_dsn("testnet"), "testnet", "pacing")

    async def tick() -> int:
        async with open_pool(conninfo, name="pacing") as pool:
            ctx = WorkerContext("testnet", pool, {}, "pacing:1")
            return await lane_pacing_refresh.batch(ctx, ctx.worker_id("lane_pacing_refresh"))

    assert asyncio.run(tick()) == 1  # one lane learned its schedule
    assert conn.execute(
        "SELECT poll_at[1:3] FROM lane_pacing_learned WHERE lane = 'chain_l2'"
    ).fetchone() == ([50, 51, 70],)
