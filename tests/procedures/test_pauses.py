"""Pause and resume (migration 0060_pauses): a breaker an operator trips
pauses a movement, a lane, a venue (an executor), a chain or the whole
network, with a reason and, if given, an end.

What a treasury relies on: a paused scope gets no new claims (its READY
nodes stay READY, attempts untouched, the reason in limit_held_nodes) while
the other scopes run; what is in flight keeps being observed and completes;
anyone may pause, and another operator resumes (the pauser is refused,
QT022, and nothing changes); a pause with an end lets its nodes go at that
time on the database's clock; bad input is refused and changes nothing; no
runner login may pause or resume.
"""

from __future__ import annotations

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    add_lanes,
    as_person,
    bind,
    claim,
    create_started,
    fingerprint,
    node,
    node_ids,
    observe,
    plan,
    submit,
)
from rows import Conn, node_row, set_clock

from qtg_runner.db import procs
from qtg_runner.executors.base import config_schema


@pytest.fixture
def lanes(conn: Conn) -> None:
    add_lanes(conn, "x", "y")


def started(conn: Conn, name: str, lane: str = "x", **config: str) -> int:
    """A started one-node movement: its node's id."""
    return node_ids(conn, create_started(conn, plan(node("a", lane=lane, **config)), name))["a"]


def held(conn: Conn) -> dict[int, str]:
    with as_person(conn, "alice"):
        return {h.node_id: h.reason for h in procs.limit_held_nodes().all(conn)}


def claimed_ids(conn: Conn) -> list[int]:
    return sorted(c["node_id"] for c in claim(conn))


def test_a_paused_lane_holds_its_ready_nodes_while_another_lane_runs(
    conn: Conn, lanes: None
) -> None:
    paused, other = started(conn, "on-x"), started(conn, "on-y", lane="y")
    with as_person(conn, "alice"):
        assert procs.trip_breaker("lane", "x", "the bridge is halted").one(conn).tripped

    assert claimed_ids(conn) == [other]
    row = node_row(conn, paused)
    assert (row["node_state"], row["submit_attempts"]) == ("READY", 0)
    assert "the lane x is paused by alice (the bridge is halted" in held(conn)[paused]

    with as_person(conn, "bob"):
        assert procs.reset_breaker("lane", "x").one(conn) == "CLOSED"
    assert claimed_ids(conn) == [paused]


def test_a_node_in_flight_on_a_paused_lane_still_completes(conn: Conn, lanes: None) -> None:
    node_id = started(conn, "in-flight")
    (claimed,) = claim(conn)
    assert submit(conn, claimed) == "SUBMITTED"
    with as_person(conn, "alice"):
        procs.trip_breaker("lane", "x", "pause while it lands").one(conn)

    set_clock(conn, 120)  # past the node's first observation
    outcome = observe(conn, node_id, "COMPLETED")
    assert outcome is not None and outcome["node_state"] == "COMPLETED"


@pytest.mark.parametrize(
    ("scope", "name_of"),
    [
        ("movement", lambda movement_id: str(movement_id)),
        ("venue", lambda _: "on_chain"),
        ("chain", lambda _: "test-chain"),
        ("network", lambda _: "*"),
    ],
)
def test_each_scope_holds_its_nodes(conn: Conn, lanes: None, scope: str, name_of: object) -> None:
    procs.upsert_chain("test-chain", 31337, "QTG_RPC_TEST_CHAIN", 2, 1000).one(conn)
    procs.register_executor("on_chain", True, config_schema(("chain",)), "a chain's").one(conn)
    movement_id = create_started(
        conn, plan(node("a", executor="on_chain", lane="x", chain="test-chain")), "paused"
    )
    node_id = node_ids(conn, movement_id)["a"]
    assert callable(name_of)
    with as_person(conn, "alice"):
        procs.trip_breaker(scope, name_of(movement_id), "hold it").one(conn)
    assert claimed_ids(conn) == []
    assert "is paused by alice (hold it" in held(conn)[node_id]


def test_the_pauser_cannot_resume_and_another_operator_does(conn: Conn, lanes: None) -> None:
    node_id = started(conn, "held")
    with as_person(conn, "alice"):
        procs.trip_breaker("network", "*", "an incident").one(conn)
    before = fingerprint(conn)
    with as_person(conn, "alice"), pytest.raises(procs.Refused) as refused:
        procs.reset_breaker("network", "*").one(conn)
    assert refused.value.sqlstate == "QT022"
    audited = ("testnet.audit_outbox", "testnet.audit_batches")  # the refusal, audited
    assert {k: v for k, v in fingerprint(conn).items() if k not in audited} == {
        k: v for k, v in before.items() if k not in audited
    }
    assert claimed_ids(conn) == []
    with as_person(conn, "carol"):  # a second pull keeps the first pause, audited
        assert procs.trip_breaker("network", "*", "still on").one(conn).tripped is False
    with as_person(conn, "bob"):
        assert procs.reset_breaker("network", "*").one(conn) == "CLOSED"
    assert claimed_ids(conn) == [node_id]
    audit = conn.execute(
        "SELECT actor, action, from_state, to_state FROM audit_outbox"
        " WHERE entity = 'breaker' ORDER BY id"
    ).fetchall()
    assert audit == [
        ("alice", "breaker_tripped", "CLOSED", "TRIPPED"),
        ("alice", "breaker_reset_refused", "TRIPPED", "TRIPPED"),
        ("carol", "breaker_tripped", "TRIPPED", "TRIPPED"),
        ("bob", "breaker_reset", "TRIPPED", "CLOSED"),
    ]


def test_a_pause_with_an_end_lets_its_nodes_go_then(conn: Conn, lanes: None) -> None:
    node_id = started(conn, "until")
    with as_person(conn, "alice"):
        procs.trip_breaker("lane", "x", "a maintenance window", 600).one(conn)
    set_clock(conn, 599)
    assert claimed_ids(conn) == []
    assert "until" in held(conn)[node_id]
    set_clock(conn, 600)
    assert claimed_ids(conn) == [node_id]
    # an ended pause gives way to a new one, the end recorded first
    with as_person(conn, "alice"):
        assert procs.trip_breaker("lane", "x", "again").one(conn).tripped
    actions = [
        r[0]
        for r in conn.execute(
            "SELECT action FROM audit_outbox WHERE entity = 'breaker' ORDER BY id"
        ).fetchall()
    ]
    assert actions == ["breaker_tripped", "breaker_expired", "breaker_tripped"]


@pytest.mark.parametrize(
    ("scope", "name", "seconds", "code", "message"),
    [
        ("everything", "*", None, "QT002", "scope must be movement, lane, venue, chain or network"),
        ("network", "all", None, "QT002", "the network's scope is named *"),
        ("chain", "nowhere", None, "QT002", "is no chain"),
        ("movement", "1; DROP TABLE", None, "QT002", "is not a movement id"),
        ("movement", "999999", None, "QT010", "does not exist"),
        ("lane", "x", 0, "QT002", "from 1 second to 30 days"),
        ("lane", "x", 2_592_001, "QT002", "from 1 second to 30 days"),
        ("lane", "x", float("nan"), "QT002", "from 1 second to 30 days"),
    ],
)
def test_bad_pauses_are_refused_and_change_nothing(
    conn: Conn,
    lanes: None,
    scope: str,
    name: str,
    seconds: float | None,
    code: str,
    message: str,
) -> None:
    before = fingerprint(conn)
    with as_person(conn, "alice"), pytest.raises(psycopg.Error) as refused:
        procs.trip_breaker(scope, name, "why", seconds).one(conn)
    assert refused.value.sqlstate == code and message in str(refused.value)
    assert fingerprint(conn) == before


def test_a_finished_movement_cannot_be_paused(conn: Conn, lanes: None) -> None:
    node_id = started(conn, "done")
    (claimed,) = claim(conn)
    procs.complete_submit(node_id, claimed["claim_secret"], "ref", settled=True).one(conn)
    movement_id = node_row(conn, node_id)["request_id"]
    with as_person(conn, "alice"), pytest.raises(psycopg.Error) as refused:
        procs.trip_breaker("movement", str(movement_id), "too late").one(conn)
    assert refused.value.sqlstate == "QT021"


def test_a_runner_login_cannot_pause_or_resume(db: TestDatabase, conn: Conn, lanes: None) -> None:
    with as_person(conn, "alice"):
        procs.trip_breaker("lane", "x", "held").one(conn)
    runner = bind(db.connect(db.runner_dsn("testnet")))
    before = fingerprint(conn)
    for attack in (
        lambda: procs.reset_breaker("lane", "x").one(runner),
        lambda: procs.trip_breaker("network", "*", "a runner's word").one(runner),
        lambda: runner.execute("UPDATE breakers SET expires_at = now()"),
    ):
        with pytest.raises(psycopg.Error) as refused:
            attack()
        assert refused.value.sqlstate == "42501"
    assert fingerprint(conn) == before


def test_resuming_a_pause_past_its_end_closes_it_as_ended(conn: Conn, lanes: None) -> None:
    """Its end has come: nothing is left to resume, whoever asks (its pauser
    too); the audit says it ended, not that someone resumed it."""
    with as_person(conn, "alice"):
        procs.trip_breaker("lane", "y", "ten seconds", 10).one(conn)
    set_clock(conn, 11)
    with as_person(conn, "alice"):
        assert procs.reset_breaker("lane", "y").one(conn) == "CLOSED"
    assert conn.execute("SELECT count(*) FROM breakers").fetchone() == (0,)
    last = conn.execute(
        "SELECT actor, action FROM audit_outbox WHERE entity = 'breaker' ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert last == ("alice", "breaker_expired")
