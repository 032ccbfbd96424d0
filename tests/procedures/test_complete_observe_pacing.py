"""Observation pacing lives in the data: lane_baselines rows and the pinned clock.

complete_observe sets each observation's phase and next_observe_at from the
node's lane (observe_pacing's rule: pre_baseline, at_baseline, over_baseline,
fatal), an executor's retry hint replaces the computed delay, a lane's row is
set by upsert_lane_baseline (a node whose lane lost its row paces as the
default lane; a plan naming a lane without one is refused),
and observe_candidates lists a node only once its next_observe_at is reached,
the longest overdue first.

Every expected time is computed from the pinned timestamps and the lane's
parameters, so a change in the pacing rules shows up as an exact mismatch.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import bind, claim, create_started, node, observe, plan, submit
from rows import set_clock, time_at

from qtg_runner.db import procs

LANE_PARAMS = (
    "min_poll_seconds",
    "max_poll_seconds",
    "first_poll_fraction",
    "poll_fraction",
    "over_factor",
    "fatal_factor",
)


def upsert_lane(
    conn: psycopg.Connection[Any], lane: str, baseline: float, **params: float
) -> dict[str, Any]:
    """upsert_lane_baseline; parameters not given are NULL, i.e. keep their default."""
    assert set(params) <= set(LANE_PARAMS)
    cur = conn.execute(
        "SELECT * FROM upsert_lane_baseline(%s, %s::numeric,"
        " p_min_poll_seconds => %s::numeric, p_max_poll_seconds => %s::numeric,"
        " p_first_poll_fraction => %s::numeric, p_poll_fraction => %s::numeric,"
        " p_over_factor => %s::numeric, p_fatal_factor => %s::numeric)",
        (lane, baseline, *(params.get(name) for name in LANE_PARAMS)),
    )
    row = cur.fetchone()
    assert row is not None
    return dict(zip([c.name for c in cur.description or ()], row, strict=True))


def submitted_node(
    conn: psycopg.Connection[Any], lane: str, external_id: str = "m"
) -> dict[str, Any]:
    """A one-node movement on ``lane``, submitted at the current pinned time."""
    create_started(conn, plan(node("transfer", lane=lane)), external_id)
    (claimed,) = claim(conn)
    assert submit(conn, claimed) == "SUBMITTED"
    return claimed


def pacing_of(
    conn: psycopg.Connection[Any], node_id: int
) -> tuple[str, str | None, datetime | None]:
    row = conn.execute(
        "SELECT node_state::text, observe_phase::text, next_observe_at"
        " FROM movement_request_nodes WHERE id = %s",
        (node_id,),
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def step(
    conn: psycopg.Connection[Any],
    node_id: int,
    seconds: float,
    outcome: str = "PENDING",
    hint: float | None = None,
) -> dict[str, Any]:
    """One observation at T0 + seconds."""
    set_clock(conn, seconds)
    result = observe(conn, node_id, outcome, retry_after=hint)
    assert result is not None, f"node {node_id} was not claimable at +{seconds}s"
    return result


def test_a_60s_lane_walks_through_every_phase_to_fatal(conn: psycopg.Connection[Any]) -> None:
    lane = upsert_lane(conn, "chain_l2", 60)
    assert (
        lane["first_poll_fraction"],
        lane["poll_fraction"],
        lane["over_factor"],
        lane["fatal_factor"],
        lane["min_poll_seconds"],
        lane["max_poll_seconds"],
    ) == (Decimal("0.7"), Decimal("0.1"), 2, 10, 1, 300)

    claimed = submitted_node(conn, "chain_l2")
    node_id = claimed["node_id"]
    # first look at first_poll_fraction x baseline = 42 s after submit
    assert pacing_of(conn, node_id) == ("SUBMITTED", "pre_baseline", time_at(42))

    # 45 s: still under the baseline; the first-poll target has passed, so the
    # floor poll_fraction x baseline = 6 s applies
    assert step(conn, node_id, 45) == {
        "node_state": "OBSERVING",
        "observe_phase": "pre_baseline",
        "next_observe_at": time_at(51),
    }
    # 61 s: past the baseline, poll every 6 s
    assert step(conn, node_id, 61) == {
        "node_state": "OBSERVING",
        "observe_phase": "at_baseline",
        "next_observe_at": time_at(67),
    }
    # 150 s: past over_factor x baseline (120 s): back off to 0.1 x elapsed = 15 s
    assert step(conn, node_id, 150) == {
        "node_state": "OBSERVING",
        "observe_phase": "over_baseline",
        "next_observe_at": time_at(165),
    }
    # 601 s: past fatal_factor x baseline (600 s): UNKNOWN, for recovery at once
    assert step(conn, node_id, 601) == {
        "node_state": "UNKNOWN",
        "observe_phase": "fatal",
        "next_observe_at": None,
    }
    row = conn.execute(
        "SELECT lease_until, observe_count FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row == (time_at(601), 4)
    recovered = conn.execute("SELECT node_id FROM claim_recovery_nodes('rec')").fetchall()
    assert recovered == [(node_id,)]


def test_observe_candidates_waits_for_next_observe_at(conn: psycopg.Connection[Any]) -> None:
    upsert_lane(conn, "chain_l2", 60)
    node_id = submitted_node(conn, "chain_l2")["node_id"]

    def due() -> list[int]:
        return [r[0] for r in conn.execute("SELECT * FROM observe_candidates(50)").fetchall()]

    set_clock(conn, 41.999)
    assert due() == []
    assert observe(conn, node_id, "PENDING") is None  # the locked claim agrees
    set_clock(conn, 42)
    assert due() == [node_id]
    assert step(conn, node_id, 42)["next_observe_at"] == time_at(48)
    set_clock(conn, 47.5)
    assert due() == []
    set_clock(conn, 48)
    assert due() == [node_id]


def test_observe_candidates_lists_the_longest_overdue_first(
    conn: psycopg.Connection[Any],
) -> None:
    # the older movement's node is due later than the newer movement's: the
    # list follows next_observe_at, not the movements' age, and stops at p_max
    upsert_lane(conn, "slow_lane", 600)
    upsert_lane(conn, "chain_l2", 60)
    older = submitted_node(conn, "slow_lane", "older")["node_id"]  # due at 420
    newer = submitted_node(conn, "chain_l2", "newer")["node_id"]  # due at 42
    set_clock(conn, 420)
    rows = conn.execute("SELECT * FROM observe_candidates(50)").fetchall()
    assert [r[0] for r in rows] == [newer, older]
    assert [r[0] for r in conn.execute("SELECT * FROM observe_candidates(1)")] == [newer]
    scoped = conn.execute("SELECT * FROM observe_candidates(50, %s)", (movement_of(conn, older),))
    assert [r[0] for r in scoped] == [older]


def movement_of(conn: psycopg.Connection[Any], node_id: int) -> int:
    row = conn.execute(
        "SELECT request_id FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_retry_hint_replaces_the_computed_delay(conn: psycopg.Connection[Any]) -> None:
    upsert_lane(conn, "chain_l2", 60, min_poll_seconds=2, max_poll_seconds=30, fatal_factor=100)
    node_id = submitted_node(conn, "chain_l2")["node_id"]
    # a hint beyond max_poll is respected (a rate limit must be): not capped at 30
    assert step(conn, node_id, 45, hint=1000)["next_observe_at"] == time_at(1045)
    # a hint under min_poll is floored at min_poll
    assert step(conn, node_id, 1045, hint=0.5)["next_observe_at"] == time_at(1047)
    # without a hint the computed delay is back: over_baseline, 0.1 x 1047 capped at 30
    result = step(conn, node_id, 1047)
    assert result["observe_phase"] == "over_baseline"
    assert result["next_observe_at"] == time_at(1077)


def test_unknown_outcome_with_a_hint_keeps_observing(conn: psycopg.Connection[Any]) -> None:
    node_id = submitted_node(conn, "default")["node_id"]
    assert step(conn, node_id, 42, outcome="UNKNOWN", hint=20) == {
        "node_state": "OBSERVING",
        "observe_phase": "pre_baseline",
        "next_observe_at": time_at(62),
    }
    assert step(conn, node_id, 62, outcome="UNKNOWN") == {
        "node_state": "UNKNOWN",
        "observe_phase": "at_baseline",
        "next_observe_at": None,
    }
    row = conn.execute(
        "SELECT lease_until FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row == (time_at(62),)


def test_unknown_outcome_with_a_hint_in_the_fatal_phase_goes_unknown(
    conn: psycopg.Connection[Any],
) -> None:
    node_id = submitted_node(conn, "default")["node_id"]
    assert step(conn, node_id, 600, outcome="UNKNOWN", hint=5)["node_state"] == "UNKNOWN"


@pytest.mark.parametrize(
    ("params", "observe_at", "phase", "delay"),
    [
        # baseline 5: pre_baseline delay max(3.5 - 4, 0.5) = 0.5, raised to min_poll 2
        pytest.param({"baseline": 5, "min_poll_seconds": 2}, 4, "pre_baseline", 2, id="min-pre"),
        # at_baseline every 0.5 s, raised to min_poll 2
        pytest.param({"baseline": 5, "min_poll_seconds": 2}, 6, "at_baseline", 2, id="min-at"),
        # baseline 10000: max(7000 - 300, 1000) = 6700 s, capped at max_poll 300
        pytest.param({"baseline": 10000}, 300, "pre_baseline", 300, id="max-pre"),
        # over_baseline 0.1 x 5000 = 500, capped at max_poll 120
        pytest.param(
            {"baseline": 1000, "max_poll_seconds": 120}, 5000, "over_baseline", 120, id="max-over"
        ),
    ],
)
def test_delay_is_clamped_to_min_and_max_poll(
    conn: psycopg.Connection[Any],
    params: dict[str, float],
    observe_at: float,
    phase: str,
    delay: float,
) -> None:
    params = dict(params)
    upsert_lane(conn, "lane", params.pop("baseline"), **params)
    node_id = submitted_node(conn, "lane")["node_id"]
    # the first observation time is clamped too; observe once it has come
    first_due = pacing_of(conn, node_id)[2]
    assert first_due is not None and first_due <= time_at(observe_at)
    result = step(conn, node_id, observe_at)
    assert (result["observe_phase"], result["next_observe_at"]) == (
        phase,
        time_at(observe_at + delay),
    )


def test_first_observation_is_clamped(conn: psycopg.Connection[Any]) -> None:
    upsert_lane(conn, "slow", 10000)
    upsert_lane(conn, "fast", 1, min_poll_seconds=3)
    slow = submitted_node(conn, "slow", "m-slow")["node_id"]
    fast = submitted_node(conn, "fast", "m-fast")["node_id"]
    assert pacing_of(conn, slow) == ("SUBMITTED", "pre_baseline", time_at(300))  # 7000 s capped
    assert pacing_of(conn, fast) == ("SUBMITTED", "pre_baseline", time_at(3))  # 0.7 s floored


def test_a_node_whose_lane_lost_its_row_paces_as_the_default_lane(
    conn: psycopg.Connection[Any],
) -> None:
    """A plan names only lanes that have a row (create_movement refuses another,
    test_bad_input); a node whose lane's row the admin deleted since paces as
    the default lane."""
    conn.execute("UPDATE lane_baselines SET baseline_seconds = 100 WHERE lane = 'default'")
    upsert_lane(conn, "retired", 30)
    create_started(conn, plan(node("transfer", lane="retired")), "m")
    conn.execute("DELETE FROM lane_baselines WHERE lane = 'retired'")
    (claimed,) = claim(conn)
    assert submit(conn, claimed) == "SUBMITTED"
    node_id = claimed["node_id"]
    assert pacing_of(conn, node_id)[2] == time_at(70)  # 0.7 x 100
    assert step(conn, node_id, 101)["next_observe_at"] == time_at(111)  # at_baseline, 0.1 x 100


def test_updating_lane_baselines_repaces_the_next_observation(
    conn: psycopg.Connection[Any],
) -> None:
    upsert_lane(conn, "chain_l2", 60)
    node_id = submitted_node(conn, "chain_l2")["node_id"]
    assert step(conn, node_id, 45)["next_observe_at"] == time_at(51)

    conn.execute("UPDATE lane_baselines SET baseline_seconds = 200 WHERE lane = 'chain_l2'")
    # 61 s into a 200 s baseline: pre_baseline, max(140 - 61, 20) = 79 s
    assert step(conn, node_id, 61) == {
        "node_state": "OBSERVING",
        "observe_phase": "pre_baseline",
        "next_observe_at": time_at(140),
    }
    conn.execute("UPDATE lane_baselines SET poll_fraction = 0.25 WHERE lane = 'chain_l2'")
    # 210 s: at_baseline, 0.25 x 200 = 50 s
    assert step(conn, node_id, 210)["next_observe_at"] == time_at(260)
    # and the fatal line moves with the data too: 10 x 200 = 2000 s, not 600
    assert step(conn, node_id, 1999)["observe_phase"] == "over_baseline"


def held_of(conn: psycopg.Connection[Any], node_id: int) -> tuple[Any, ...]:
    """The node's observe_count, evidence, audit rows, and in_flight_nodes'
    held_seconds and held_reason."""
    row = conn.execute(
        "SELECT n.observe_count, n.evidence,"
        "       (SELECT count(*) FROM audit_outbox a"
        "         WHERE a.entity = 'node' AND a.entity_id = n.id::text),"
        "       f.held_seconds, f.held_reason"
        "  FROM movement_request_nodes n LEFT JOIN in_flight_nodes f ON f.node_id = n.id"
        " WHERE n.id = %s",
        (node_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_a_poll_the_budget_held_back_is_not_time_observing(
    conn: psycopg.Connection[Any],
) -> None:
    """THROTTLED (the runner's request budget had no turn, or the provider
    answered 429): nothing was observed, so the node stays as it was and the
    wait, from its due poll to its next turn, is not counted toward its
    lane's fatal wait: a throttled provider never makes a node UNKNOWN."""
    upsert_lane(conn, "chain_l2", 60)  # fatal past 600 s observing
    node_id = submitted_node(conn, "chain_l2")["node_id"]  # due at 42
    before = held_of(conn, node_id)
    assert before[3:] == (0, None)
    throttled = {"throttled": "chain l2: rpc:QTG_RPC_L2 is at its rate; its next turn in 300 s"}

    # at 45, held back for 300 s: SUBMITTED still, its evidence and count kept,
    # no audit row; held from its due poll (42) to its next turn (345)
    held = step(conn, node_id, 45, "THROTTLED", hint=300)
    assert held == {
        "node_state": "SUBMITTED",
        "observe_phase": "pre_baseline",
        "next_observe_at": time_at(345),
    }
    assert held_of(conn, node_id) == (*before[:3], Decimal(303), "throttled")
    set_clock(conn, 345)
    assert observe(conn, node_id, "THROTTLED", 300, evidence=throttled) is not None
    assert held_of(conn, node_id) == (*before[:3], Decimal(603), throttled["throttled"])

    # at 645 the node has been submitted longer than the lane's fatal wait, but
    # observed for 42 s of it: a poll finds it pending, and it goes on
    assert step(conn, node_id, 645) == {
        "node_state": "OBSERVING",
        "observe_phase": "pre_baseline",
        "next_observe_at": time_at(651),
    }
    count, _, audits, held_seconds, reason = held_of(conn, node_id)
    assert (count, audits, held_seconds, reason) == (1, before[2] + 1, 603, None)

    # the fatal wait still counts the time it is observed: 600 s past its holds
    assert step(conn, node_id, 603 + 601)["node_state"] == "UNKNOWN"

    # a recovery's new window starts with nothing held
    (recovery,) = procs.claim_recovery_nodes("rec").all(conn)
    assert procs.complete_recovery(node_id, recovery.claim_secret, "IN_FLIGHT").one(conn) == (
        "OBSERVING"
    )
    assert held_of(conn, node_id)[3:] == (0, None)


def test_a_node_held_back_leaves_its_lane_no_latency_sample(
    conn: psycopg.Connection[Any],
) -> None:
    """Its latency is the budget's, not the lane's."""
    upsert_lane(conn, "chain_l2", 60)
    held = submitted_node(conn, "chain_l2", "held")["node_id"]
    plain = submitted_node(conn, "chain_l2", "plain")["node_id"]
    step(conn, held, 42, "THROTTLED", hint=5)
    step(conn, held, 47, "COMPLETED")
    step(conn, plain, 48, "COMPLETED")
    samples = conn.execute(
        "SELECT by_seconds FROM lane_latency_samples WHERE lane = 'chain_l2'"
    ).fetchall()
    assert samples == [(Decimal(48),)]


def test_throttled_is_an_outcome_a_bad_one_still_refused(conn: psycopg.Connection[Any]) -> None:
    node_id = submitted_node(conn, "default")["node_id"]
    set_clock(conn, 42)
    with pytest.raises(psycopg.Error) as refused:
        observe(conn, node_id, "THROTTLE")
    assert refused.value.sqlstate == "QT002"
    assert "THROTTLED" in str(refused.value)


def test_a_runner_reporting_throttled_forever_cannot_keep_a_node_from_recovery(
    conn: psycopg.Connection[Any], db: TestDatabase
) -> None:
    """A runner login (a compromised or broken runner) that reports THROTTLED
    at every turn holds the node back at most engine_limits'
    max_observe_held_seconds: past that, the lane's fatal wait counts again,
    and the node goes UNKNOWN for recovery like any node observed too long."""
    runner = bind(db.connect(db.runner_dsn("testnet")))
    conn.execute("UPDATE engine_limits SET max_observe_held_seconds = 900")
    upsert_lane(conn, "chain_l2", 60)  # fatal past 600 s observing
    node_id = submitted_node(conn, "chain_l2")["node_id"]  # due at 42
    for at in (45, 345, 645, 945, 1245):
        set_clock(runner, at)
        held = observe(runner, node_id, "THROTTLED", 300)
        assert held is not None and held["node_state"] == "SUBMITTED", at
    # held 303, 603, then no more than 900: observed 1245 - 900 = 345 s
    assert held_of(conn, node_id)[3] == 900
    set_clock(runner, 1545)  # 645 s observing past the 900 held: fatal
    assert observe(runner, node_id, "THROTTLED", 300) == {
        "node_state": "UNKNOWN",
        "observe_phase": "fatal",
        "next_observe_at": None,
    }
    (transition,) = conn.execute(
        "SELECT from_state, to_state, detail ->> 'outcome' FROM audit_outbox"
        " WHERE entity = 'node' AND entity_id = %s AND to_state = 'UNKNOWN'",
        (str(node_id),),
    ).fetchall()
    assert transition == ("SUBMITTED", "UNKNOWN", "THROTTLED")
    set_clock(conn, 1545)
    (recovery,) = procs.claim_recovery_nodes("rec").all(conn)
    assert recovery.node_id == node_id


def test_the_bound_on_time_held_is_a_finite_positive_limit(conn: psycopg.Connection[Any]) -> None:
    for bad in ("0", "-1", "'Infinity'", "'NaN'", "1e300"):
        with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
            conn.execute(f"UPDATE engine_limits SET max_observe_held_seconds = {bad}")
