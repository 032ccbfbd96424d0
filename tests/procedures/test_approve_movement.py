"""approve_movement: PENDING_APPROVAL -> APPROVED, by someone other than the creator.

Pins: the approver and the time are recorded, the nodes stay PENDING, the
transition is audited and announced (movement.approved) in its transaction;
refused with QT022 for the creator, QT020 from any other state or once the
expiry is reached (even before the expiration checker ran), QT010 for an
unknown movement and QT002 without an approver.

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

from engine import (
    assert_rejected,
    create,
    in_one_transaction,
    node_states,
    pin_clock,
    request_state,
)
from rows import ONE, Conn, iso_at, movement_in, request_row, time_at


def test_approve_moves_pending_approval_to_approved(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", actor="alice")
    written = in_one_transaction(conn, "SELECT approve_movement(%s, 'bob')::text", (movement_id,))
    assert written.rows == [("APPROVED",)]
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["approved_by"], request["approved_at"]) == (
        "APPROVED",
        "bob",
        time_at(0),
    )
    assert node_states(conn, movement_id) == {"a": "PENDING"}
    assert written.audit == [
        ("request", str(movement_id), "state_changed", "PENDING_APPROVAL", "APPROVED")
    ]
    assert written.callbacks == [(movement_id, "movement.approved")]


def test_the_creator_cannot_approve(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", actor="alice")
    assert_rejected(conn, "QT022", "SELECT approve_movement(%s, 'alice')", (movement_id,))


def test_an_expired_movement_cannot_be_approved(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", expires_at=iso_at(3600))
    pin_clock(conn, iso_at(3600))  # expiry reached; the expiration checker has not run yet
    assert_rejected(conn, "QT020", "SELECT approve_movement(%s, 'bob')", (movement_id,))
    pin_clock(conn, iso_at(3599))
    conn.execute("SELECT approve_movement(%s, 'bob')", (movement_id,))
    assert request_state(conn, movement_id) == "APPROVED"


def test_approve_is_only_from_pending_approval(conn: Conn) -> None:
    # built in this order so that no claim takes another movement's READY node,
    # and EXPIRED last, as it moves the clock
    states = ["COMPLETED", "FAILED", "CANCELLED", "EXECUTING", "APPROVED", "EXPIRED"]
    movements = {state: movement_in(conn, state, external_id=state) for state in states}
    for movement_id in movements.values():
        assert_rejected(conn, "QT020", "SELECT approve_movement(%s, 'dave')", (movement_id,))


def test_approve_unknown_movement_or_without_approver(conn: Conn) -> None:
    assert_rejected(conn, "QT010", "SELECT approve_movement(424242, 'bob')")
    movement_id = create(conn, ONE, "m1")
    for approver in ("", "  "):
        assert_rejected(conn, "QT002", "SELECT approve_movement(%s, %s)", (movement_id, approver))
    # no approver named: the session's login approves
    conn.execute("SELECT approve_movement(%s, NULL)", (movement_id,))
    assert conn.execute(
        "SELECT actor = session_user FROM audit_outbox"
        " WHERE request_id = %s AND to_state = 'APPROVED'",
        (movement_id,),
    ).fetchone() == (True,)
