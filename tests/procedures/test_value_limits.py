"""Value limits and breakers inside the claim (migration 0027_value_limits).

What a treasury relies on: what the dispatcher claims never takes a lane, a
venue (executor) or the network past its USDC in flight, its daily cap or its
per-movement limit, even with two dispatchers claiming at once; a held node
stays READY with its attempts untouched and the reason visible
(limit_held_nodes); repeated failures trip a breaker that stops the
scope's claims until two different operators reset it (one operator's
pause: tests/procedures/test_pauses.py); no runner login can change a
limit or a breaker.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    add_lanes,
    approve,
    as_person,
    bind,
    claim,
    create_started,
    fingerprint,
    node,
    node_ids,
    pin_clock,
    plan,
    submit,
    wait_until_blocked_on_a_lock,
)
from rows import T0, Conn, node_row, set_clock

from qtg_runner.db import procs


def movement(conn: Conn, name: str, amount: str = "100", lane: str = "x") -> int:
    return node_ids(conn, create_started(conn, plan(node("a", lane=lane)), name, amount=amount))[
        "a"
    ]


def held(conn: Conn) -> dict[int, str]:
    with as_person(conn, "alice"):
        return {h.node_id: h.reason for h in procs.limit_held_nodes().all(conn)}


@pytest.fixture
def lane(conn: Conn) -> str:
    add_lanes(conn, "x", "y")
    return "x"


def test_a_lanes_in_flight_limit_holds_what_would_pass_it(conn: Conn, lane: str) -> None:
    procs.set_value_limit("lane", lane, 250, None, None).one(conn)
    nodes = [movement(conn, f"m{i}") for i in range(4)]
    other = movement(conn, "other-lane", lane="y")
    claimed = claim(conn)
    assert sorted(c["node_id"] for c in claimed) == sorted([nodes[0], nodes[1], other])
    reasons = held(conn)
    assert set(reasons) == {nodes[2], nodes[3]}
    assert "lane x: 200 USDC in flight, 100 more would pass its limit of 250" in reasons[nodes[2]]
    for held_node in nodes[2:]:
        row = node_row(conn, held_node)
        assert (row["node_state"], row["submit_attempts"], row["claim_token"]) == ("READY", 0, 0)
    # one settles: room for one more
    first = next(c for c in claimed if c["node_id"] == nodes[0])
    submit(conn, first, settled=True)
    assert [c["node_id"] for c in claim(conn)] == [nodes[2]]
    assert claim(conn) == []


def test_two_dispatchers_never_spend_the_same_room(db: TestDatabase, conn: Conn, lane: str) -> None:
    """The second claim waits on the limit rows the first holds, then sees what
    the first took: one node of 100 in a limit of 150, never two."""
    procs.set_value_limit("lane", lane, 150, None, None).one(conn)
    first_node, second_node = movement(conn, "m1"), movement(conn, "m2")
    first = bind(db.connect(db.runner_dsn("testnet"), autocommit=False))
    second = bind(db.connect(db.runner_dsn("testnet")))
    for other in (first, second):
        pin_clock(other, T0.isoformat())
    first.commit()
    [taken] = procs.claim_ready_nodes("w1", 10).all(first)  # uncommitted: holds the limits
    outcome: dict[str, Any] = {}

    def second_dispatcher() -> None:
        outcome["claimed"] = procs.claim_ready_nodes("w2", 10).all(second)

    thread = threading.Thread(target=second_dispatcher)
    thread.start()
    wait_until_blocked_on_a_lock(conn, second.info.backend_pid)
    first.commit()
    thread.join(timeout=10)
    assert outcome == {"claimed": []}
    assert taken.node_id == first_node
    assert node_row(conn, second_node)["node_state"] == "READY"
    first.close()


def test_a_daily_cap_counts_what_started_today(conn: Conn, lane: str) -> None:
    procs.set_value_limit("venue", "sim", None, 150, None).one(conn)
    a = movement(conn, "m1")
    [claimed] = claim(conn)
    submit(conn, claimed, settled=True)  # done: no longer in flight, still started today
    b = movement(conn, "m2")
    assert claim(conn) == []
    assert (
        "venue sim: 100 USDC started today (UTC), 100 more would pass its daily cap of 150"
        in held(conn)[b]
    )
    set_clock(conn, 86_400)
    assert [c["node_id"] for c in claim(conn)] == [b]
    assert a != b


def test_a_movement_its_per_movement_limit_never_lets_pass_is_refused_at_approval(
    conn: Conn, lane: str
) -> None:
    procs.set_value_limit("lane", lane, None, None, 50).one(conn)
    with as_person(conn, "alice"):
        big = procs.create_movement("big", 100, plan=plan(node("a", lane=lane))).one(conn)
    before = fingerprint(conn)
    with as_person(conn, "bob"), pytest.raises(psycopg.Error) as refused:
        procs.approve_movement(big.movement_id).one(conn)
    assert refused.value.sqlstate == "QT062"
    assert "100 USDC pass the per-movement limit of 50 of lane x" in str(refused.value)
    assert fingerprint(conn) == before


def test_a_per_movement_limit_counts_the_amount_once_for_each_step_that_pays_it(
    conn: Conn, lane: str
) -> None:
    """Three parallel steps each pay the movement's 100: 300 against the limit of
    150, refused; a step after another (a mint after its burn) moves the same
    money on and is not counted again by the network; a lane counts each of
    its steps."""
    procs.set_value_limit("network", "*", None, None, 150).one(conn)
    with as_person(conn, "alice"):
        parallel = procs.create_movement(
            "parallel", 100, plan=plan(node("a", lane=lane), node("b", lane=lane), node("c"))
        ).one(conn)
        chained = procs.create_movement(
            "chained", 100, plan=plan(node("a"), node("b", ["a"]), node("c", ["b"]))
        ).one(conn)
    before = fingerprint(conn)
    with as_person(conn, "bob"), pytest.raises(psycopg.Error) as refused:
        procs.approve_movement(parallel.movement_id).one(conn)
    assert refused.value.sqlstate == "QT062"
    assert (
        "its 100 USDC, paid by 3 steps (300 USDC in all), pass the per-movement limit of 150"
        " of network *" in str(refused.value)
    )
    assert fingerprint(conn) == before
    assert approve(conn, chained.movement_id) == "APPROVED"

    procs.set_value_limit("network", "*", None, None, None).one(conn)
    procs.set_value_limit("lane", lane, None, None, 150).one(conn)
    with as_person(conn, "bob"), pytest.raises(psycopg.Error) as refused:
        procs.approve_movement(parallel.movement_id).one(conn)
    assert "paid by 2 steps (200 USDC in all), pass the per-movement limit of 150 of lane x" in (
        str(refused.value)
    )


def test_a_per_movement_limit_lowered_after_approval_holds_the_larger_movement_alone(
    conn: Conn, lane: str
) -> None:
    """A limit lowered after approval holds the larger movement for good; it
    takes no room from the smaller ones behind it (here of a daily cap)."""
    big = movement(conn, "big", amount="100")
    small = movement(conn, "small", amount="40")
    procs.set_value_limit("network", "*", None, None, 50).one(conn)
    procs.set_value_limit("venue", "sim", None, 120, None).one(conn)
    assert [c["node_id"] for c in claim(conn)] == [small]
    assert "network *: the movement's 100 USDC pass its per-movement limit of 50" in held(conn)[big]


@pytest.mark.parametrize("how", ["released", "failed before its intent"])
def test_a_claim_that_started_nothing_gives_the_days_cap_back(
    conn: Conn, lane: str, how: str
) -> None:
    procs.set_value_limit("venue", "sim", None, 150, None).one(conn)
    first = movement(conn, "m1")
    [claimed] = claim(conn)
    if how == "released":
        procs.release_nodes([first], [claimed["claim_secret"]], "not this runner's").all(conn)
    else:
        procs.fail_submit(first, claimed["claim_secret"], "the venue is busy", True).one(conn)
    usage = conn.execute("SELECT started FROM value_usage WHERE scope = 'venue'").fetchone()
    assert usage is not None and usage[0] == 0
    second = movement(conn, "m2")
    conn.execute("UPDATE movement_request_nodes SET not_before = NULL")
    # the day's room is the cap's whole 150: one of the two, never both (100 + 100)
    assert len(claim(conn)) == 1
    assert {first, second} & set(held(conn))


def test_a_claim_gives_back_only_to_the_caps_it_counted(
    db: TestDatabase, conn: Conn, lane: str
) -> None:
    """A lane cap added after a claim was never counted by it: releasing that
    claim gives nothing back to the lane, so the lane's day still holds what
    started under the cap, and no other movement of the lane starts that day
    (150: 100 + 100 would pass it)."""
    procs.set_value_limit("network", "*", None, 10_000, None).one(conn)
    first = movement(conn, "m1")
    [counted_network] = claim(conn)
    procs.set_value_limit("lane", lane, None, 150, None).one(conn)
    second = movement(conn, "m2")
    [counted_both] = claim(conn)
    assert counted_both["node_id"] == second
    runner = bind(db.connect(db.runner_dsn("testnet")))  # the release, as the runner login
    pin_clock(runner, T0.isoformat())
    procs.release_nodes([first], [counted_network["claim_secret"]], "not this runner's").all(runner)
    usage = dict(conn.execute("SELECT scope, started FROM value_usage").fetchall())
    assert usage == {"network": 100, "lane": 100}
    third = movement(conn, "m3")
    conn.execute("UPDATE movement_request_nodes SET not_before = NULL")
    assert claim(conn) == []  # either would take the lane's day to 200
    assert {first, third} <= set(held(conn))


def test_repeated_failures_trip_a_breaker_that_two_operators_reset(conn: Conn, lane: str) -> None:
    procs.set_value_limit("lane", lane, None, None, None, 2, 600).one(conn)
    for i in range(2):
        movement(conn, f"fail{i}")
    for claimed in claim(conn):
        procs.fail_submit(claimed["node_id"], claimed["claim_secret"], "rejected", False).one(conn)
    tripped = conn.execute("SELECT reason, tripped_by FROM breakers").fetchall()
    assert tripped == [("2 failed nodes within 600 s", "w1")]
    waiting = movement(conn, "after")
    assert claim(conn) == []
    assert "the lane breaker of x is tripped" in held(conn)[waiting]

    with as_person(conn, "alice"):
        assert procs.reset_breaker("lane", lane).one(conn) == "RESET_REQUESTED"
        with pytest.raises(procs.Refused) as refused:
            procs.reset_breaker("lane", lane).one(conn)
        assert refused.value.sqlstate == "QT022"
    assert claim(conn) == []
    with as_person(conn, "bob"):
        assert procs.reset_breaker("lane", lane).one(conn) == "CLOSED"
    assert [c["node_id"] for c in claim(conn)] == [waiting]
    query = "SELECT action FROM audit_outbox WHERE entity = 'breaker' ORDER BY id"
    actions = [r[0] for r in conn.execute(query).fetchall()]
    assert actions == [
        "breaker_tripped",
        "breaker_reset_requested",
        "breaker_reset_refused",
        "breaker_reset",
    ]
    with as_person(conn, "bob"), pytest.raises(psycopg.Error) as missing:
        procs.reset_breaker("lane", lane).one(conn)
    assert missing.value.sqlstate == "QT061"


def test_a_pull_while_a_reset_is_asked_withdraws_the_request(conn: Conn, lane: str) -> None:
    """Anyone may pull the brake; a pull while a reset of a tripped breaker is
    asked withdraws the request, so the two who close it have seen the last
    pull. (A pause an operator made is resumed by another one at once:
    tests/procedures/test_pauses.py.)"""
    procs.set_value_limit("lane", lane, None, None, None, 1, 600).one(conn)
    movement(conn, "fails")
    for claimed in claim(conn):
        procs.fail_submit(claimed["node_id"], claimed["claim_secret"], "rejected", False).one(conn)
    waiting = movement(conn, "held")
    assert "the lane breaker of x is tripped (1 failed nodes" in held(conn)[waiting]
    with as_person(conn, "bob"):
        assert procs.reset_breaker("lane", lane).one(conn) == "RESET_REQUESTED"
    with as_person(conn, "carol"):
        again = procs.trip_breaker("lane", lane, "and the fees doubled").one(conn)
    assert again == procs.TrippedBreaker("TRIPPED", False)
    assert conn.execute(
        "SELECT tripped_by, reason, reset_requested_by FROM breakers"
    ).fetchall() == [("w1", "1 failed nodes within 600 s", None)]
    with as_person(conn, "alice"):
        assert procs.reset_breaker("lane", lane).one(conn) == "RESET_REQUESTED"
    assert claim(conn) == []
    with as_person(conn, "bob"):
        assert procs.reset_breaker("lane", lane).one(conn) == "CLOSED"
    assert [c["node_id"] for c in claim(conn)] == [waiting]
    audit = conn.execute(
        "SELECT actor, action, detail->>'reason', detail->>'withdrawn_reset_request_by'"
        " FROM audit_outbox WHERE entity = 'breaker' ORDER BY id"
    ).fetchall()
    assert audit == [
        ("w1", "breaker_tripped", "1 failed nodes within 600 s", None),
        ("bob", "breaker_reset_requested", None, None),
        ("carol", "breaker_tripped", "and the fees doubled", "bob"),
        ("alice", "breaker_reset_requested", None, None),
        ("bob", "breaker_reset", "1 failed nodes within 600 s", None),
    ]


def test_a_breaker_is_tripped_only_on_a_lane_or_venue_the_network_has(
    conn: Conn, lane: str
) -> None:
    """A lane of lane_baselines or an executor's key (a node naming no lane runs
    in its executor's); a venue is an executor with a side effect (limit_holds
    holds no other node)."""
    procs.register_executor("quiet", False, {}, "no side effect").one(conn)
    for scope, name in (("lane", lane), ("lane", "sim"), ("venue", "sim"), ("network", "*")):
        with conn.transaction(force_rollback=True), as_person(conn, "alice"):
            assert procs.trip_breaker(scope, name, "why").one(conn).tripped
    refusals = {
        ("pipeline", "*"): "scope must be movement, lane, venue, chain or network",
        ("lane", "nowhere"): "is no lane",
        ("venue", "nowhere"): "is no venue",
        ("venue", lane): "is no venue",
        ("venue", "quiet"): "is no venue",
    }
    for (scope, name), message in refusals.items():
        with as_person(conn, "alice"), pytest.raises(psycopg.Error) as refused:
            procs.trip_breaker(scope, name, "why").one(conn)
        assert (refused.value.sqlstate, message in str(refused.value)) == ("QT002", True)
    assert conn.execute("SELECT count(*) FROM breakers").fetchone() == (0,)


def test_a_runner_login_cannot_move_a_limit_or_a_breaker(
    db: TestDatabase, conn: Conn, lane: str
) -> None:
    procs.set_value_limit("lane", lane, 100, None, None, 1).one(conn)
    conn.execute("INSERT INTO breakers VALUES ('venue', 'sim', now(), 'w', 'test', NULL, NULL)")
    runner = bind(db.connect(db.runner_dsn("testnet")))
    before = fingerprint(conn)
    for attack in (
        lambda: procs.set_value_limit("lane", lane, 10**9, None, None).one(runner),
        lambda: runner.execute("UPDATE value_limits SET max_in_flight = 1e9"),
        lambda: runner.execute("DELETE FROM breakers"),
        lambda: runner.execute("DELETE FROM value_usage"),
        lambda: procs.reset_breaker("venue", "sim").one(runner),
        lambda: procs.trip_breaker("lane", lane, "a runner's word").one(runner),
    ):
        with pytest.raises(psycopg.Error) as refused:
            attack()
        assert refused.value.sqlstate == "42501"
    assert fingerprint(conn) == before
