"""approve_movement: PENDING_APPROVAL -> APPROVED, by someone other than the creator.

Pins: the approver and the time are recorded, the nodes stay PENDING, the
transition is audited and announced (movement.approved) in its transaction;
the approver is the calling login (session_user), never a parameter. The
creator's own approval is refused with a QT022 WARNING that leaves the movement
as it was and keeps the refusal in the audit log (an error would roll it back);
QT020 from any other state or once the expiry is reached (even before the
expiration checker ran), except for the login that approved it, which gets
the state as it is (an approval is idempotent), QT010 for an unknown movement. Logins of real people
are played in tests/security/test_identity.py.

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from engine import (
    approve,
    as_person,
    assert_rejected,
    bind,
    create,
    in_one_transaction,
    node_states,
    pin_clock,
    request_state,
    wait_until_blocked_on_a_lock,
)
from rows import ONE, Conn, audit_rows, iso_at, movement_in, request_row, time_at

from qtg_runner.db import procs


def test_approve_moves_pending_approval_to_approved(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", actor="alice")
    with as_person(conn, "bob"):
        written = in_one_transaction(conn, "SELECT approve_movement(%s)::text", (movement_id,))
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


def test_the_creators_approval_is_refused_and_the_refusal_audited(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", actor="alice")
    before = request_row(conn, movement_id)
    with as_person(conn, "alice"), pytest.raises(procs.Refused) as refused:
        procs.approve_movement(movement_id).one(conn)
    assert refused.value.sqlstate == "QT022"
    assert "created by alice" in refused.value.message
    assert request_row(conn, movement_id) == before
    assert node_states(conn, movement_id) == {"a": "PENDING"}
    assert audit_rows(conn, movement_id)[-1] == {
        "actor": "alice",
        "login": "alice",
        "action": "approval_refused",
        "from_state": "PENDING_APPROVAL",
        "to_state": "PENDING_APPROVAL",
    }
    # no callback: nothing changed for the movement's subscribers
    assert conn.execute(
        "SELECT count(*) FROM callback_outbox WHERE request_id = %s", (movement_id,)
    ).fetchone() == (1,)


def test_an_expired_movement_cannot_be_approved(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", expires_at=iso_at(3600))
    pin_clock(conn, iso_at(3600))  # expiry reached; the expiration checker has not run yet
    assert_rejected(conn, "QT020", "SELECT approve_movement(%s)", (movement_id,))
    pin_clock(conn, iso_at(3599))
    conn.execute("SELECT approve_movement(%s)", (movement_id,))
    assert request_state(conn, movement_id) == "APPROVED"


def test_approve_is_only_from_pending_approval(conn: Conn) -> None:
    # built in this order so that no claim takes another movement's READY node,
    # and EXPIRED last, as it moves the clock
    states = ["COMPLETED", "FAILED", "CANCELLED", "EXECUTING", "APPROVED", "EXPIRED"]
    movements = {state: movement_in(conn, state, external_id=state) for state in states}
    with as_person(conn, "carol"):  # not their approver: that one gets the state back
        for movement_id in movements.values():
            assert_rejected(conn, "QT020", "SELECT approve_movement(%s)", (movement_id,))


def test_the_approver_approving_again_gets_the_state_as_it_is(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", actor="alice")
    with as_person(conn, "bob"):
        procs.approve_movement(movement_id).one(conn)
        before = request_row(conn, movement_id)
        audit_before = audit_rows(conn, movement_id)
        again = in_one_transaction(conn, "SELECT approve_movement(%s)::text", (movement_id,))
    assert again.rows == [("APPROVED",)]
    assert (again.audit, again.callbacks) == ([], [])
    assert request_row(conn, movement_id) == before
    assert audit_rows(conn, movement_id) == audit_before
    # another login is still refused, and so is the creator (four eyes unchanged)
    for person in ("carol", "alice"):
        with as_person(conn, person):
            assert_rejected(conn, "QT020", "SELECT approve_movement(%s)", (movement_id,))


def test_approve_unknown_movement(conn: Conn) -> None:
    assert_rejected(conn, "QT010", "SELECT approve_movement(424242)")


def test_an_approval_that_waited_past_the_expiry_is_late(db: Any, conn: Conn) -> None:
    """The decision is taken at its own time, once its locks are held, not at
    its statement's start: an approval that began before the expiry and waited
    on the movement's lock until after it is refused (QT020), and nothing
    changes. (The expiry moved under the waiting approval stands in for the
    time a slow statement takes.)"""
    movement_id = create(conn, ONE, "late")
    holder = db.connect(autocommit=False)
    bind(holder).execute("SELECT 1 FROM movement_requests WHERE id = %s FOR UPDATE", (movement_id,))
    approver = bind(db.connect())
    outcome: dict[str, Any] = {}

    def approve_it() -> None:
        try:
            with as_person(approver, "bob"):
                outcome["state"] = procs.approve_movement(movement_id).one(approver)
        except psycopg.Error as exc:
            outcome["refused"] = exc.sqlstate

    thread = threading.Thread(target=approve_it)
    thread.start()
    wait_until_blocked_on_a_lock(conn, approver.info.backend_pid)
    # past the approval's start, before its decision: it expires meanwhile
    holder.execute(
        "UPDATE movement_requests SET expires_at = clock_timestamp() WHERE id = %s", (movement_id,)
    )
    holder.commit()
    thread.join(timeout=10)
    assert outcome == {"refused": "QT020"}
    assert request_row(conn, movement_id)["request_state"] == "PENDING_APPROVAL"


def test_an_approval_is_never_recorded_before_its_movement_was_created(conn: Conn) -> None:
    movement_id = create(conn, ONE, "order")
    approve(conn, movement_id)
    row = request_row(conn, movement_id)
    assert row["approved_at"] >= row["created_at"]
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "UPDATE movement_requests SET approved_at = created_at - interval '1 second'"
            " WHERE id = %s",
            (movement_id,),
        )
