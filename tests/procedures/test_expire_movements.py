"""expire_movements: EXPIRED past expires_at while no side effect started, else waived.

Pins: nothing before expires_at; at it, PENDING_APPROVAL, APPROVED and EXECUTING
movements with nothing started are EXPIRED with every node SKIPPED, audited and
announced (movement.expired); a movement with a submitted node keeps running and
the waiver is recorded (expiry_waived_at) and audited (expiry_waived). Expiry
against every in-flight state and racing a dispatcher is in
scenarios/test_safety.py.

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
    create,
    create_started,
    in_one_transaction,
    node_ids,
    node_states,
    pin_clock,
    request_state,
    submit,
)
from rows import CHAIN, Conn, claim_of, iso_at, request_row, time_at


def test_expiry_before_any_side_effect_expires_the_movement(conn: Conn) -> None:
    movements = {}
    for state in ("EXECUTING", "APPROVED", "PENDING_APPROVAL"):
        movements[state] = movement_id = create(conn, CHAIN, state, expires_at=iso_at(60))
        if state != "PENDING_APPROVAL":
            conn.execute("SELECT approve_movement(%s)", (movement_id,))
        if state == "EXECUTING":
            conn.execute("SELECT start_approved_movements()")
    assert {m: request_state(conn, m) for m in movements.values()} == {
        m: s for s, m in movements.items()
    }
    pin_clock(conn, iso_at(59))
    assert conn.execute("SELECT expire_movements()").fetchone() == (0,)
    pin_clock(conn, iso_at(60))
    written = in_one_transaction(conn, "SELECT expire_movements()")
    assert written.rows == [(3,)]
    for state, movement_id in movements.items():
        assert request_state(conn, movement_id) == "EXPIRED"
        assert set(node_states(conn, movement_id).values()) == {"SKIPPED"}
        assert ("request", str(movement_id), "state_changed", state, "EXPIRED") in written.audit
    assert sorted(written.callbacks) == sorted((m, "movement.expired") for m in movements.values())


def test_expiry_after_a_side_effect_started_is_waived(conn: Conn) -> None:
    movement_id = create_started(conn, CHAIN, "m1", expires_at=iso_at(60))
    submit(conn, claim_of(conn, node_ids(conn, movement_id)["a"]))
    pin_clock(conn, iso_at(60))
    written = in_one_transaction(conn, "SELECT expire_movements()")
    assert written.rows == [(0,)]
    assert written.audit == [
        ("request", str(movement_id), "expiry_waived", "EXECUTING", "EXECUTING")
    ]
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["stop_reason"], request["expiry_waived_at"]) == (
        "EXECUTING",
        None,
        time_at(60),
    )
    assert node_states(conn, movement_id) == {"a": "SUBMITTED", "b": "PENDING"}
