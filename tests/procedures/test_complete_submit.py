"""complete_submit and complete_submit_batch: SUBMITTING -> SUBMITTED, or COMPLETED
when the submit itself settled the work.

The single call: a submitted node records its external reference, drops its
lease and gets its first observation from its lane's pacing; a settled one
completes, readies the children whose last parent it was, and completes the
request with its last node; the intent becomes SUBMITTED. Each transition is
audited, and a request state change announced, in the call's transaction
(``in_one_transaction``). A stale or forged claim secret is refused (QT030), a
missing one as malformed (QT002), changing nothing (``assert_rejected``).

complete_submit_batch: complete_submit for many nodes in one call and one
transaction (complete_submit is its one-node form). One batch that reports
every shape of submit (a chain, a lone node, one left to observe, a diamond,
two roots, a join completed by both its parents in the same call, a stop, a
cancel) leaves each movement as its DAG says, with the audit events and
callbacks each step means, all the claimer's; a node it refuses is reported in
its own row and left as it was while the rest of the batch goes on, and so is
a node whose report breaks a rule inside the engine (QT050: 30 nodes applied
beside it), while an error that says nothing about the nodes (a serialization
failure) fails the call whole; a malformed call is refused whole (QT002)
without changing anything.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    assert_rejected,
    bind,
    claim,
    create_started,
    forged_secret,
    in_one_transaction,
    node,
    node_ids,
    node_states,
    pin_clock,
    plan,
    request_state,
    snapshot,
    submit,
)
from rows import (
    DIAMOND,
    ONE,
    T0,
    Conn,
    claim_of,
    fail,
    intent_row,
    node_row,
    plant_rule,
    request_row,
    state_changes,
    time_at,
)

# --- complete_submit -------------------------------------------------------------------------


def test_submit_moves_submitting_to_submitted_with_its_first_observation(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    node_id = claimed["node_id"]
    written = in_one_transaction(
        conn, "SELECT complete_submit(%s, %s, '0xfeed')::text", (node_id, claimed["claim_secret"])
    )
    assert written.rows == [("SUBMITTED",)]
    row = node_row(conn, node_id)
    assert (row["node_state"], row["external_ref"], row["lease_until"]) == (
        "SUBMITTED",
        "0xfeed",
        None,
    )
    # default lane: baseline 60 s, first poll at 0.7 of it
    assert (row["submitted_at"], row["observe_started_at"]) == (time_at(0), time_at(0))
    assert (row["next_observe_at"], row["observe_phase"]) == (time_at(42), "pre_baseline")
    intent = intent_row(conn, node_id, 1)
    assert (intent["intent_state"], intent["external_ref"]) == ("SUBMITTED", "0xfeed")
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTING", "SUBMITTED")]
    assert written.callbacks == []
    assert request_state(conn, movement_id) == "EXECUTING"


def test_settled_submit_completes_the_node_and_readies_its_children(conn: Conn) -> None:
    movement_id = create_started(conn, DIAMOND, "m1")
    ids = node_ids(conn, movement_id)
    a = claim_of(conn, ids["a"])
    written = in_one_transaction(
        conn,
        "SELECT complete_submit(%s, %s, 'r', p_settled => true)::text",
        (a["node_id"], a["claim_secret"]),
    )
    assert written.rows == [("COMPLETED",)]
    assert state_changes(written.audit) == {
        ("node", str(ids["a"]), "state_changed", "SUBMITTING", "COMPLETED"),
        ("node", str(ids["b"]), "state_changed", "PENDING", "READY"),
        ("node", str(ids["c"]), "state_changed", "PENDING", "READY"),
    }
    assert node_row(conn, ids["a"])["finished_at"] == time_at(0)
    assert node_row(conn, ids["a"])["next_observe_at"] is None
    claims = {c["node_key"]: c for c in claim(conn)}
    assert set(claims) == {"b", "c"}
    submit(conn, claims["b"], settled=True)
    assert node_row(conn, ids["d"])["pending_parents"] == 1
    assert node_states(conn, movement_id)["d"] == "PENDING"  # c is not done yet
    submit(conn, claims["c"], settled=True)
    assert node_states(conn, movement_id)["d"] == "READY"
    assert request_row(conn, movement_id)["open_nodes"] == 1

    d = claim_of(conn, ids["d"])
    written = in_one_transaction(
        conn,
        "SELECT complete_submit(%s, %s, 'r', p_settled => true)",
        (d["node_id"], d["claim_secret"]),
    )
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["open_nodes"], request["finished_at"]) == (
        "COMPLETED",
        0,
        time_at(0),
    )
    assert ("request", str(movement_id), "state_changed", "EXECUTING", "COMPLETED") in written.audit
    assert written.callbacks == [(movement_id, "movement.completed")]


def test_a_stale_or_forged_claim_secret_changes_nothing(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    first = claim_of(conn, node_id)
    assert fail(conn, first, retryable=True, after=0) == "READY"
    claim_of(conn, node_id)  # the second claim: the first one's secret is stale
    for secret in (first["claim_secret"], forged_secret()):
        assert_rejected(conn, "QT030", "SELECT complete_submit(%s, %s, 'r')", (node_id, secret))
    assert_rejected(conn, "QT002", "SELECT complete_submit(%s, NULL, 'r')", (node_id,))


# --- complete_submit_batch -------------------------------------------------------------------

BATCH = (
    "SELECT node_id, node_state::text, error_code, error_message FROM complete_submit_batch("
    "%s::bigint[], %s::text[], %s::text[], %s::jsonb[], %s::boolean[])"
)

# every shape of a submit's report: a chain readies its child, a diamond two
# children, a lone node settles its movement, an unsettled one starts observing,
# two roots settle their movement once, a cancelled movement ends CANCELLED
SCENARIOS: list[tuple[str, dict[str, Any], dict[str, bool]]] = [
    ("chain", plan(node("a"), node("b", ["a"])), {"a": True}),
    ("lone", plan(node("a")), {"a": True}),
    ("observed", plan(node("a", lane="slow")), {"a": False}),
    (
        "diamond",
        plan(node("a"), node("b", ["a"]), node("c", ["a"]), node("d", ["b", "c"])),
        {"a": True},
    ),
    ("two-roots", plan(node("x"), node("y")), {"x": True, "y": True}),
    ("mixed-roots", plan(node("x"), node("y"), node("z", ["x", "y"])), {"x": True, "y": False}),
    ("joined", plan(node("x"), node("y"), node("z", ["x", "y"])), {"x": True, "y": True}),
    # a stop recorded while a child still waits (no procedure leaves one: cancel
    # and expiry skip waiting nodes; set by hand) skips the child, as finish_node does
    ("stopping", plan(node("a"), node("b", ["a"])), {"a": True}),
    ("cancelled", plan(node("a"), node("b", ["a"])), {"a": True}),
]


@pytest.fixture
def slow_lane(conn: Conn) -> str:
    """A lane of 600 s, for the scenario whose node must stay SUBMITTED."""
    conn.execute("SELECT upsert_lane_baseline('slow', 600)")
    return "slow"


def _claimed(conn: Conn) -> dict[int, str]:
    """Claim every READY node; node id -> claim secret."""
    return {c["node_id"]: c["claim_secret"] for c in claim(conn, "dispatcher-1", 1000)}


# what each scenario's batch report must leave: the nodes' states, the
# pending parents of the nodes still waiting, the movement's state, and the
# events the call wrote (node key or "movement", from, to, the node whose
# completion moved it) with the callbacks it enqueued
EXPECTED: dict[str, dict[str, Any]] = {
    "chain": {
        "nodes": {"a": "COMPLETED", "b": "READY"},
        "waiting": {},
        "movement": "EXECUTING",
        "events": [("a", "SUBMITTING", "COMPLETED", None), ("b", "PENDING", "READY", "a")],
        "callbacks": [],
    },
    "lone": {
        "nodes": {"a": "COMPLETED"},
        "waiting": {},
        "movement": "COMPLETED",
        "events": [
            ("a", "SUBMITTING", "COMPLETED", None),
            ("movement", "EXECUTING", "COMPLETED", None),
        ],
        "callbacks": [("movement.completed", "PENDING")],
    },
    "observed": {
        "nodes": {"a": "SUBMITTED"},
        "waiting": {},
        "movement": "EXECUTING",
        "events": [("a", "SUBMITTING", "SUBMITTED", None)],
        "callbacks": [],
    },
    "diamond": {
        "nodes": {"a": "COMPLETED", "b": "READY", "c": "READY", "d": "PENDING"},
        "waiting": {"d": 2},
        "movement": "EXECUTING",
        "events": [
            ("a", "SUBMITTING", "COMPLETED", None),
            ("b", "PENDING", "READY", "a"),
            ("c", "PENDING", "READY", "a"),
        ],
        "callbacks": [],
    },
    "two-roots": {
        "nodes": {"x": "COMPLETED", "y": "COMPLETED"},
        "waiting": {},
        "movement": "COMPLETED",
        "events": [
            ("x", "SUBMITTING", "COMPLETED", None),
            ("y", "SUBMITTING", "COMPLETED", None),
            ("movement", "EXECUTING", "COMPLETED", None),
        ],
        "callbacks": [("movement.completed", "PENDING")],
    },
    "mixed-roots": {
        "nodes": {"x": "COMPLETED", "y": "SUBMITTED", "z": "PENDING"},
        "waiting": {"z": 1},
        "movement": "EXECUTING",
        "events": [("x", "SUBMITTING", "COMPLETED", None), ("y", "SUBMITTING", "SUBMITTED", None)],
        "callbacks": [],
    },
    "joined": {
        "nodes": {"x": "COMPLETED", "y": "COMPLETED", "z": "READY"},
        "waiting": {},
        "movement": "EXECUTING",
        "events": [
            ("x", "SUBMITTING", "COMPLETED", None),
            ("y", "SUBMITTING", "COMPLETED", None),
            ("z", "PENDING", "READY", "y"),  # moved by the last of its parents (by id)
        ],
        "callbacks": [],
    },
    "stopping": {
        "nodes": {"a": "COMPLETED", "b": "SKIPPED"},
        "waiting": {},
        "movement": "EXPIRED",
        "events": [
            ("a", "SUBMITTING", "COMPLETED", None),
            ("b", "PENDING", "SKIPPED", "a"),
            ("movement", "EXECUTING", "EXPIRED", None),
        ],
        "callbacks": [("movement.expired", "PENDING")],
    },
    "cancelled": {
        "nodes": {"a": "COMPLETED", "b": "SKIPPED"},
        "waiting": {},
        "movement": "CANCELLED",
        "events": [
            ("a", "SUBMITTING", "COMPLETED", None),
            ("movement", "EXECUTING", "CANCELLED", None),
        ],
        "callbacks": [("movement.cancelled", "PENDING")],
    },
}


def _started(conn: Conn) -> tuple[list[int], dict[int, str]]:
    """Each scenario started, every READY node claimed, stops and callback URLs set."""
    movements = [create_started(conn, p, f"batch-{name}") for name, p, _ in SCENARIOS]
    secrets = _claimed(conn)
    pin_clock(conn, (T0 + timedelta(seconds=5)).isoformat())
    for (name, _, _), movement in zip(SCENARIOS, movements, strict=True):
        # some report to a callback URL (a callback is then PENDING delivery)
        if name in ("lone", "two-roots", "cancelled"):
            conn.execute(
                "UPDATE movement_requests SET callback_url = 'https://treasury.example/cb'"
                " WHERE id = %s",
                (movement,),
            )
        if name == "cancelled":
            conn.execute("SELECT cancel_movement(%s)", (movement,))
        if name == "stopping":
            conn.execute(
                "UPDATE movement_requests SET stop_reason = 'EXPIRED' WHERE id = %s", (movement,)
            )
    pin_clock(conn, (T0 + timedelta(seconds=10)).isoformat())
    return movements, secrets


@pytest.mark.usefixtures("slow_lane")
def test_one_batch_reports_every_shape_of_submit_as_its_dag_says(conn: Conn) -> None:
    movements, secrets = _started(conn)
    todo = [
        (node_ids(conn, movement)[key], key, settled)
        for (_, _, settle), movement in zip(SCENARIOS, movements, strict=True)
        for key, settled in settle.items()
    ]
    marks = conn.execute(
        "SELECT (SELECT max(id) FROM audit_outbox),"
        " (SELECT coalesce(max(id), 0) FROM callback_outbox)"
    ).fetchone()
    assert marks is not None
    rows = conn.execute(
        BATCH,
        (
            [n for n, _, _ in todo],
            [secrets[n] for n, _, _ in todo],
            [f"ref-{k}" for _, k, _ in todo],
            [json.dumps({"key": k}) for _, k, _ in todo],
            [s for _, _, s in todo],
        ),
    ).fetchall()

    assert [(r[0], r[2]) for r in rows] == [(n, None) for n, _, _ in todo]
    assert [r[1] for r in rows] == ["COMPLETED" if s else "SUBMITTED" for _, _, s in todo]
    for (name, _, _), movement in zip(SCENARIOS, movements, strict=True):
        expected = EXPECTED[name]
        keys = {str(v): k for k, v in node_ids(conn, movement).items()}
        waiting = conn.execute(
            "SELECT node_key, pending_parents FROM movement_request_nodes"
            " WHERE request_id = %s AND node_state = 'PENDING'",
            (movement,),
        ).fetchall()
        events = conn.execute(
            """SELECT entity, entity_id, from_state, to_state, detail->>'parent_completed', actor
                 FROM audit_outbox
                WHERE request_id = %s AND id > %s AND action = 'state_changed'
                ORDER BY id""",
            (movement, marks[0]),
        ).fetchall()
        callbacks = conn.execute(
            "SELECT event_type, delivery_state FROM callback_outbox"
            " WHERE request_id = %s AND id > %s ORDER BY id",
            (movement, marks[1]),
        ).fetchall()
        got = {
            "nodes": node_states(conn, movement),
            "waiting": dict(waiting),
            "movement": request_state(conn, movement),
            "events": [
                (keys[i] if e == "node" else "movement", f, t, keys.get(parent or ""))
                for e, i, f, t, parent, _ in events
            ],
            "callbacks": callbacks,
        }
        assert got == expected, name
        # every event of the call is the claimer's: the dispatcher that reported
        assert {actor for *_, actor in events} == {"dispatcher-1"}, name


def test_a_refused_node_is_reported_and_left_as_it_was_while_the_rest_completes(conn: Conn) -> None:
    movements = [create_started(conn, plan(node("a")), f"m{i}") for i in range(4)]
    secrets = _claimed(conn)
    ok, stale, done, also_ok = (node_ids(conn, m)["a"] for m in movements)
    conn.execute("SELECT complete_submit(%s, %s, 'ref-done')", (done, secrets[done]))
    missing = 10**9
    before = snapshot(conn, ["node_intents"])

    rows = conn.execute(
        BATCH,
        (
            [ok, stale, done, missing, also_ok],
            [secrets[ok], forged_secret(), secrets[done], forged_secret(), secrets[also_ok]],
            ["r1", "r2", "r3", "r4", "r5"],
            None,
            [True, True, True, True, True],
        ),
    ).fetchall()

    assert [(r[0], r[1], r[2]) for r in rows] == [
        (ok, "COMPLETED", None),
        (stale, None, "QT030"),
        (done, None, "QT021"),
        (missing, None, "QT011"),
        (also_ok, "COMPLETED", None),
    ]
    assert "stale claim" in rows[1][3]
    assert node_states(conn, movements[1]) == {"a": "SUBMITTING"}
    assert node_states(conn, movements[2]) == {"a": "SUBMITTED"}
    assert [request_state(conn, m) for m in movements] == [
        "COMPLETED",
        "EXECUTING",
        "EXECUTING",
        "COMPLETED",
    ]
    intents = dict(conn.execute("SELECT node_id, intent_state FROM node_intents").fetchall())
    assert intents[stale] == "CLAIMED" and intents[done] == "SUBMITTED"
    assert before != snapshot(conn, ["node_intents"])  # the good ones moved


def test_a_node_the_engine_cannot_apply_is_refused_alone_while_the_other_30_are_applied(
    conn: Conn,
) -> None:
    # the side effects of all 31 went out; only the poison node breaks a rule
    plant_rule(
        conn, "movement_request_nodes", "NEW.node_key = 'poison' AND NEW.node_state = 'SUBMITTED'"
    )
    keys = [f"n{i:02d}" for i in range(30)] + ["poison"]
    movement = create_started(conn, plan(*(node(k) for k in keys)), "busy")
    ids = node_ids(conn, movement)
    secrets = _claimed(conn)
    order = [ids[k] for k in keys]

    written = in_one_transaction(
        conn, BATCH, (order, [secrets[n] for n in order], [f"ref-{n}" for n in order], None, None)
    )

    assert [(r[0], r[1], r[2]) for r in written.rows] == [
        *((ids[k], "SUBMITTED", None) for k in keys[:30]),
        (ids["poison"], None, "QT050"),
    ]
    message = written.rows[-1][3]
    assert f"node {ids['poison']}" in message and "planted rule" in message and "23514" in message
    assert len(state_changes(written.audit)) == 30
    states = node_states(conn, movement)
    assert states.pop("poison") == "SUBMITTING"
    assert set(states.values()) == {"SUBMITTED"}
    assert intent_row(conn, ids["poison"])["intent_state"] == "CLAIMED"
    # the one-node call refuses it with the same code, and nothing changes
    error = assert_rejected(
        conn,
        "QT050",
        "SELECT complete_submit(%s, %s, 'ref')",
        (ids["poison"], secrets[ids["poison"]]),
    )
    assert "planted rule" in str(error)


def test_an_error_that_says_nothing_about_the_nodes_fails_the_whole_batch(conn: Conn) -> None:
    plant_rule(
        conn,
        "movement_request_nodes",
        "NEW.node_key = 'b' AND NEW.node_state = 'SUBMITTED'",
        sqlstate="40001",  # a serialization failure: the call is made again, as it was
    )
    movement = create_started(conn, plan(node("a"), node("b")), "transient")
    ids = node_ids(conn, movement)
    secrets = _claimed(conn)
    order = [ids["a"], ids["b"]]

    assert_rejected(
        conn, "40001", BATCH, (order, [secrets[n] for n in order], ["r1", "r2"], None, None)
    )


@pytest.mark.parametrize(
    ("why", "ids", "secrets", "refs", "settled"),
    [
        ("arrays of different lengths", [1, 2], [1], ["r", "r"], None),
        ("a settled flag too many", [1], [1], ["r"], [True, False]),
        ("a node twice", [1, 1], [1, 1], ["r", "r"], None),
        ("a NULL node id", [None], [1], ["r"], None),
        ("more than 1000 nodes", list(range(1, 1002)), [1] * 1001, ["r"] * 1001, None),
    ],
)
def test_a_malformed_batch_is_refused_whole(
    conn: Conn, why: str, ids: list[Any], secrets: list[int], refs: list[str], settled: Any
) -> None:
    movement = create_started(conn, plan(node("a")), "m")
    node_id = node_ids(conn, movement)["a"]
    secret = _claimed(conn)[node_id]
    ids = [node_id if i == 1 else i for i in ids]

    assert_rejected(conn, "QT002", BATCH, (ids, [secret for _ in secrets], refs, None, settled))
    assert node_states(conn, movement) == {"a": "SUBMITTING"}, why


def test_an_empty_batch_returns_nothing(conn: Conn) -> None:
    assert conn.execute(BATCH, ([], [], [], None, None)).fetchall() == []


def test_a_runner_may_call_it_and_an_operator_may_not(db: TestDatabase, conn: Conn) -> None:
    movement = create_started(conn, plan(node("a")), "m")
    node_id = node_ids(conn, movement)["a"]
    secret = _claimed(conn)[node_id]

    operator = bind(db.connect(db.operator_dsn("testnet")))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        operator.execute(BATCH, ([node_id], [secret], ["r"], None, [True]))
    runner = bind(db.connect(db.runner_dsn("testnet")))
    rows = runner.execute(BATCH, ([node_id], [secret], ["r"], None, [True])).fetchall()
    assert rows == [(node_id, "COMPLETED", None, None)]
    assert request_state(conn, movement) == "COMPLETED"
