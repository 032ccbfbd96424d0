"""cancel_movement: CANCELLED at once when nothing is in flight, else a stop that waits.

Pins: before execution (PENDING_APPROVAL, APPROVED), and while executing with
nothing in flight, the movement is CANCELLED at once with every unstarted node
SKIPPED, audited (stop_requested, state_changed) and announced
(movement.cancelled); with a side effect in flight (SUBMITTING, SUBMITTED,
OBSERVING, UNKNOWN) it stays EXECUTING, stop_reason CANCELLED, until that node
settles, then ends CANCELLED (the node completed) or FAILED; cancelling a
cancelled movement changes nothing; a finished or expiring movement is refused
(QT020), an unknown movement (QT010) or a missing operator (QT002) too. How
fail_submit and complete_recovery settle a node under a cancel is in their files;
a cancel racing a dispatcher is in scenarios/test_safety.py.

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from engine import (
    assert_rejected,
    claim,
    create,
    create_started,
    in_one_transaction,
    node,
    node_ids,
    node_states,
    observe,
    pin_clock,
    plan,
    request_state,
    snapshot,
    submit,
)
from rows import (
    CHAIN,
    DIAMOND,
    Conn,
    claim_of,
    fail,
    iso_at,
    movement_in,
    prepare,
    recovery_claims,
    request_row,
    time_at,
)


@pytest.mark.parametrize("state", ["PENDING_APPROVAL", "APPROVED"])
def test_cancel_before_execution_cancels_at_once(conn: Conn, state: str) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    if state == "APPROVED":
        conn.execute("SELECT approve_movement(%s)", (movement_id,))
    ids = node_ids(conn, movement_id)
    written = in_one_transaction(conn, "SELECT cancel_movement(%s, 'typo')::text", (movement_id,))
    assert written.rows == [("CANCELLED",)]
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["stop_reason"], request["stop_detail"]) == (
        "CANCELLED",
        "CANCELLED",
        "typo",
    )
    assert (request["open_nodes"], request["finished_at"]) == (0, time_at(0))
    assert set(node_states(conn, movement_id).values()) == {"SKIPPED"}
    assert set(written.audit) == {
        ("request", str(movement_id), "stop_requested", state, "CANCELLED"),
        ("request", str(movement_id), "state_changed", state, "CANCELLED"),
        *{("node", str(i), "state_changed", "PENDING", "SKIPPED") for i in ids.values()},
    }
    assert written.callbacks == [(movement_id, "movement.cancelled")]
    assert conn.execute("SELECT start_approved_movements()").fetchone() == (0,)


def test_cancel_while_executing_with_nothing_in_flight_cancels_at_once(conn: Conn) -> None:
    movement_id = create_started(conn, CHAIN, "m1")
    written = in_one_transaction(conn, "SELECT cancel_movement(%s)::text", (movement_id,))
    assert written.rows == [("CANCELLED",)]
    assert node_states(conn, movement_id) == {"a": "SKIPPED", "b": "SKIPPED"}
    ids = node_ids(conn, movement_id)
    assert ("node", str(ids["a"]), "state_changed", "READY", "SKIPPED") in written.audit
    assert ("request", str(movement_id), "state_changed", "EXECUTING", "CANCELLED") in written.audit
    assert written.callbacks == [(movement_id, "movement.cancelled")]
    assert claim(conn) == []


def recover(conn: Conn, node_id: int, secret: str, outcome: str, after: float | None = None) -> str:
    row = conn.execute(
        "SELECT complete_recovery(%s, %s, %s, %s::jsonb, p_retry_after_seconds => %s)::text",
        (node_id, secret, outcome, json.dumps({"found": outcome}), after),
    ).fetchone()
    assert row is not None
    return str(row[0])


def put_in_flight(conn: Conn, node_id: int, state: str) -> dict[str, Any]:
    """Drive ``node_id`` (READY, the lowest id) to the in-flight ``state`` alone;
    returns the dispatcher's claim."""
    claimed = claim_of(conn, node_id, max_nodes=1)
    if state == "SUBMITTING":
        return claimed
    if state == "UNKNOWN":
        prepare(conn, claimed)
        fail(conn, claimed, retryable=True)
        return claimed
    submit(conn, claimed)
    if state == "OBSERVING":
        pin_clock(conn, iso_at(42))
        observe(conn, node_id, "PENDING")
    return claimed


def settle_in_flight(
    conn: Conn, claimed: dict[str, Any], node_id: int, state: str, outcome: str
) -> None:
    """Bring an in-flight node to ``outcome`` (COMPLETED or FAILED) by its proper path
    (``claimed``: its dispatcher's claim)."""
    secret = claimed["claim_secret"]
    if state == "SUBMITTING":
        if outcome == "COMPLETED":
            conn.execute(
                "SELECT complete_submit(%s, %s, 'r', p_settled => true)", (node_id, secret)
            )
        else:
            conn.execute("SELECT fail_submit(%s, %s, 'no', false)", (node_id, secret))
    elif state == "UNKNOWN":
        recover(conn, node_id, recovery_claims(conn)[node_id]["claim_secret"], outcome)
    else:
        pin_clock(conn, iso_at(100))
        assert observe(conn, node_id, outcome) is not None


@pytest.mark.parametrize(
    ("in_flight", "outcome"),
    [
        ("SUBMITTING", "COMPLETED"),
        ("SUBMITTED", "FAILED"),
        ("OBSERVING", "COMPLETED"),
        ("UNKNOWN", "FAILED"),
    ],
)
def test_cancel_while_a_side_effect_is_in_flight_waits_for_it_to_settle(
    conn: Conn, in_flight: str, outcome: str
) -> None:
    movement_id = create_started(conn, plan(node("a"), node("b"), node("c", ["a"])), "m1")
    ids = node_ids(conn, movement_id)
    claimed = put_in_flight(conn, ids["a"], in_flight)

    written = in_one_transaction(conn, "SELECT cancel_movement(%s)::text", (movement_id,))
    assert written.rows == [("EXECUTING",)]
    assert node_states(conn, movement_id) == {"a": in_flight, "b": "SKIPPED", "c": "SKIPPED"}
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["stop_reason"], request["open_nodes"]) == (
        "EXECUTING",
        "CANCELLED",
        1,
    )
    assert (
        "request",
        str(movement_id),
        "stop_requested",
        "EXECUTING",
        "CANCELLED",
    ) in written.audit
    assert written.callbacks == []  # the request has not changed state yet

    # cancelling again changes nothing
    before = snapshot(conn)
    again = conn.execute("SELECT cancel_movement(%s)::text", (movement_id,)).fetchall()
    assert again == [("EXECUTING",)]
    assert snapshot(conn) == before

    settle_in_flight(conn, claimed, ids["a"], in_flight, outcome)
    final = "CANCELLED" if outcome == "COMPLETED" else "FAILED"
    assert node_states(conn, movement_id) == {"a": outcome, "b": "SKIPPED", "c": "SKIPPED"}
    assert request_state(conn, movement_id) == final
    events = [
        e
        for _, e in conn.execute(
            "SELECT id, event_type FROM callback_outbox WHERE request_id = %s ORDER BY id",
            (movement_id,),
        )
    ]
    assert events[-1] == f"movement.{final.lower()}"


def test_cancel_of_a_finished_movement_is_refused(conn: Conn) -> None:
    for state in ("COMPLETED", "FAILED", "EXPIRED"):
        movement_id = movement_in(conn, state, external_id=state)
        error = assert_rejected(conn, "QT020", "SELECT cancel_movement(%s)", (movement_id,))
        assert state in str(error)


def test_cancel_of_a_cancelled_movement_changes_nothing(conn: Conn) -> None:
    movement_id = movement_in(conn, "CANCELLED")
    before = snapshot(conn)
    again = conn.execute("SELECT cancel_movement(%s)::text", (movement_id,)).fetchall()
    assert again == [("CANCELLED",)]
    assert snapshot(conn) == before


@pytest.mark.usefixtures("nosfx_executor")
def test_cancel_of_an_expiring_movement_is_refused(conn: Conn) -> None:
    movement_id = create_started(
        conn, plan(node("a", executor="nosfx")), "m1", expires_at=iso_at(60)
    )
    claim_of(conn, node_ids(conn, movement_id)["a"])
    pin_clock(conn, iso_at(60))
    assert conn.execute("SELECT expire_movements()").fetchone() == (1,)
    assert request_row(conn, movement_id)["stop_reason"] == "EXPIRED"
    assert_rejected(conn, "QT020", "SELECT cancel_movement(%s)", (movement_id,))


def test_cancel_unknown_movement(conn: Conn) -> None:
    assert_rejected(conn, "QT010", "SELECT cancel_movement(424242)")
