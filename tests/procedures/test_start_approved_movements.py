"""start_approved_movements: APPROVED -> EXECUTING, and the roots PENDING -> READY.

Pins: only approved movements start, at most p_max per call, highest priority
first; each start is audited with the roots it readied and announced
(movement.executing) in its transaction; a bad batch size is refused (QT002).
Two starters racing are in scenarios/test_concurrency.py.

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
    approve,
    assert_rejected,
    create,
    in_one_transaction,
    node_ids,
    node_states,
    request_state,
)
from psycopg.types.json import Jsonb
from rows import DIAMOND, ONE, Conn, request_row, time_at


def test_start_executes_approved_movements_and_readies_their_roots(conn: Conn) -> None:
    approved = create(conn, DIAMOND, "m1")
    conn.execute("SELECT approve_movement(%s)", (approved,))
    waiting = create(conn, DIAMOND, "m2")
    written = in_one_transaction(conn, "SELECT start_approved_movements(10)")
    assert written.rows == [(1,)]
    assert request_row(conn, approved)["request_state"] == "EXECUTING"
    assert request_row(conn, approved)["started_at"] == time_at(0)
    assert node_states(conn, approved) == {
        "a": "READY",
        "b": "PENDING",
        "c": "PENDING",
        "d": "PENDING",
    }
    assert request_state(conn, waiting) == "PENDING_APPROVAL"
    assert set(node_states(conn, waiting).values()) == {"PENDING"}
    a = node_ids(conn, approved)["a"]
    assert set(written.audit) == {
        ("request", str(approved), "state_changed", "APPROVED", "EXECUTING"),
        ("node", str(a), "state_changed", "PENDING", "READY"),
    }
    assert written.callbacks == [(approved, "movement.executing")]


def test_start_takes_at_most_p_max_highest_priority_first(conn: Conn) -> None:
    ids = []
    for external_id, priority in (("low", 0), ("high", 5), ("mid", 1)):
        row = conn.execute(
            "SELECT movement_id FROM create_movement(%s, 1, %s::jsonb, p_priority => %s)",
            (external_id, Jsonb(ONE), priority),
        ).fetchone()
        assert row is not None
        ids.append(row[0])
        approve(conn, row[0])
    low, high, mid = ids
    assert conn.execute("SELECT start_approved_movements(1)").fetchone() == (1,)
    assert [request_state(conn, m) for m in (low, high, mid)] == [
        "APPROVED",
        "EXECUTING",
        "APPROVED",
    ]
    assert conn.execute("SELECT start_approved_movements(5)").fetchone() == (2,)
    assert conn.execute("SELECT start_approved_movements(5)").fetchone() == (0,)


def test_start_rejects_a_bad_batch_size(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1")
    conn.execute("SELECT approve_movement(%s)", (movement_id,))
    for p_max in (0, -1, 10001, None):
        assert_rejected(conn, "QT002", "SELECT start_approved_movements(%s)", (p_max,))
