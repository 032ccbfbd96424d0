"""approve_movements: approve_movement for up to 1,000 movements in one call.

Both calls take one step (approve_movement_rows). Pins: each movement
PENDING_APPROVAL -> APPROVED by the calling login (approver and time
recorded, an audit row and a callback each, in the call's transaction); four
eyes per movement: the caller's own movements are refused in their rows
(QT022), left as they were, each refusal an `approval_refused` audit row,
while the others are approved; the approver's repeat answers with the state
as it is and writes nothing; an unknown movement (QT010), one approved by
another login or past PENDING_APPROVAL, or one expired (QT020) refuses the
whole batch with nothing changed; the bound (1 to 1000 ids, no NULL, none
twice: QT002).
"""

from __future__ import annotations

from engine import as_person, assert_rejected, create, in_one_transaction, pin_clock
from rows import ONE, Conn, audit_rows, iso_at, movement_in, request_row, time_at

from qtg_runner.db import procs

APPROVE = (
    "SELECT movement_id, request_state::text, error_code, error_message"
    " FROM approve_movements(%s::bigint[])"
)


def test_approves_each_movement_as_the_calling_login(conn: Conn) -> None:
    ids = [create(conn, ONE, f"m{i}", actor="alice") for i in range(3)]
    with as_person(conn, "bob"):
        written = in_one_transaction(conn, APPROVE, (ids,))
    assert written.rows == [(i, "APPROVED", None, None) for i in ids]
    for i in ids:
        row = request_row(conn, i)
        assert (row["request_state"], row["approved_by"], row["approved_at"]) == (
            "APPROVED",
            "bob",
            time_at(0),
        )
    assert written.audit == [
        ("request", str(i), "state_changed", "PENDING_APPROVAL", "APPROVED") for i in ids
    ]
    assert written.callbacks == [(i, "movement.approved") for i in ids]


def test_the_callers_own_movements_are_refused_in_their_rows_and_audited(conn: Conn) -> None:
    mine = create(conn, ONE, "mine", actor="bob")
    theirs = create(conn, ONE, "theirs", actor="alice")
    before = request_row(conn, mine)
    with as_person(conn, "bob"):
        rows = procs.approve_movements([mine, theirs]).all(conn)  # no Refused: it is in the row
    assert [(r.movement_id, r.request_state, r.error_code) for r in rows] == [
        (mine, procs.RequestState.PENDING_APPROVAL, "QT022"),
        (theirs, procs.RequestState.APPROVED, None),
    ]
    assert rows[0].error_message is not None and "created by bob" in rows[0].error_message
    assert request_row(conn, mine) == before
    assert audit_rows(conn, mine)[-1] == {
        "actor": "bob",
        "login": "bob",
        "action": "approval_refused",
        "from_state": "PENDING_APPROVAL",
        "to_state": "PENDING_APPROVAL",
    }
    assert conn.execute(
        "SELECT count(*) FROM callback_outbox WHERE request_id = %s", (mine,)
    ).fetchone() == (1,)  # its creation's only
    # the single call keeps its WARNING, through the same step
    with as_person(conn, "bob"):
        try:
            procs.approve_movement(mine).one(conn)
        except procs.Refused as refused:
            assert refused.sqlstate == "QT022"
        else:
            raise AssertionError("the creator's approval was not refused")


def test_the_approver_again_gets_the_states_and_nothing_is_written(conn: Conn) -> None:
    ids = [create(conn, ONE, f"m{i}", actor="alice") for i in range(2)]
    with as_person(conn, "bob"):
        procs.approve_movements(ids).all(conn)
        audit_before = [audit_rows(conn, i) for i in ids]
        again = in_one_transaction(conn, APPROVE, (ids,))
    assert again.rows == [(i, "APPROVED", None, None) for i in ids]
    assert (again.audit, again.callbacks) == ([], [])
    assert [audit_rows(conn, i) for i in ids] == audit_before
    # another login is refused the whole batch
    fresh = create(conn, ONE, "fresh", actor="alice")
    with as_person(conn, "carol"):
        error = assert_rejected(conn, "QT020", APPROVE, ([fresh, ids[0]],))
    assert f"movement {ids[0]} is APPROVED" in str(error)
    assert request_row(conn, fresh)["request_state"] == "PENDING_APPROVAL"


def test_one_movement_that_cannot_be_approved_refuses_the_batch(conn: Conn) -> None:
    good = create(conn, ONE, "good", actor="alice")
    cancelled = movement_in(conn, "CANCELLED", external_id="cancelled")
    expiring = create(conn, ONE, "expiring", actor="alice", expires_at=iso_at(60))
    with as_person(conn, "carol"):  # not the approver of the cancelled one: that one gets its state
        assert_rejected(conn, "QT010", APPROVE, ([good, 999_999],))
        assert_rejected(conn, "QT020", APPROVE, ([good, cancelled],))
        pin_clock(conn, iso_at(60))
        error = assert_rejected(conn, "QT020", APPROVE, ([good, expiring],))
    assert "expired" in str(error)
    assert request_row(conn, good)["request_state"] == "PENDING_APPROVAL"


def test_the_batch_holds_1_to_1000_distinct_movements(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", actor="alice")
    with as_person(conn, "bob"):
        for ids in (
            None,
            [],
            [movement_id, movement_id],
            [movement_id, None],
            list(range(1, 1002)),
        ):
            assert_rejected(conn, "QT002", APPROVE, (ids,))
        assert conn.execute(APPROVE, ([movement_id],)).fetchall() == [
            (movement_id, "APPROVED", None, None)
        ]
