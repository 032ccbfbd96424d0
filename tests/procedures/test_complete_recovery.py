"""complete_recovery: recovery's verdict, from evidence, on a node it claimed.

Pins each outcome: COMPLETED completes the node (intent SUBMITTED) and readies
its children; FAILED fails the node and the request (intent FAILED); IN_FLIGHT
resumes the observation (SUBMITTED before any observation, OBSERVING after,
each with a fresh window); NOT_SUBMITTED makes the node READY again (intent
ABANDONED), or SKIPPED when the movement was cancelled, which then settles, but
only while the intent was never PREPARED: after that it is refused (QT021), as a
prepared payload may be out (a fresh one needs requeue_node);
STILL_UNKNOWN leases the node again for the hinted delay and dispatches nothing.
Every verdict is audited (recovered); bad arguments are refused (QT002).

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

from typing import Any

from engine import (
    assert_rejected,
    claim,
    create_started,
    in_one_transaction,
    node_ids,
    node_states,
    observe,
    pin_clock,
    request_state,
)
from rows import (
    CHAIN,
    ONE,
    Conn,
    claim_of,
    fail,
    intent_row,
    iso_at,
    node_row,
    prepare,
    recovery_claims,
    submitted,
    time_at,
)


def claim_into_unknown(conn: Conn, node_id: int) -> dict[str, Any]:
    """READY -> SUBMITTING -> (prepared, retryable failure) -> UNKNOWN; returns the claim."""
    claimed = claim_of(conn, node_id)
    prepare(conn, claimed)
    assert fail(conn, claimed, retryable=True) == "UNKNOWN"
    return claimed


def unknown_in_recovery(conn: Conn, the_plan: dict[str, Any] = ONE) -> tuple[int, int, str]:
    """A movement whose node 'a' is UNKNOWN and claimed by recovery: (movement, node, secret)."""
    movement_id = create_started(conn, the_plan, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    claim_into_unknown(conn, node_id)
    return movement_id, node_id, recovery_claims(conn)[node_id]["claim_secret"]


def lapsed_in_recovery(conn: Conn) -> tuple[int, int, str]:
    """A movement whose node 'a' was claimed and never prepared, its lease run out,
    claimed by recovery (SUBMITTING): (movement, node, secret)."""
    movement_id = create_started(conn, ONE, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    claim_of(conn, node_id, lease=60)
    pin_clock(conn, iso_at(60))
    return movement_id, node_id, recovery_claims(conn)[node_id]["claim_secret"]


def recovered_logged(conn: Conn, node_id: int, secret: str, outcome: str) -> Any:
    return in_one_transaction(
        conn,
        "SELECT complete_recovery(%s, %s, %s, '{\"seen\": \"ref-r\"}', 'ref-r')::text",
        (node_id, secret, outcome),
    )


def test_recovery_completed_completes_the_node_and_readies_its_child(conn: Conn) -> None:
    movement_id, node_id, secret = unknown_in_recovery(conn, CHAIN)
    written = recovered_logged(conn, node_id, secret, "COMPLETED")
    assert written.rows == [("COMPLETED",)]
    b = node_ids(conn, movement_id)["b"]
    assert set(written.audit) == {
        ("node", str(node_id), "recovered", "UNKNOWN", "COMPLETED"),
        ("node", str(b), "state_changed", "PENDING", "READY"),
    }
    row = node_row(conn, node_id)
    assert (row["external_ref"], row["lease_until"], row["finished_at"]) == (
        "ref-r",
        None,
        time_at(0),
    )
    assert intent_row(conn, node_id, 1)["intent_state"] == "SUBMITTED"
    assert [c["node_key"] for c in claim(conn)] == ["b"]


def test_recovery_failed_fails_the_node_and_the_request(conn: Conn) -> None:
    movement_id, node_id, secret = unknown_in_recovery(conn, CHAIN)
    written = recovered_logged(conn, node_id, secret, "FAILED")
    assert written.rows == [("FAILED",)]
    assert node_states(conn, movement_id) == {"a": "FAILED", "b": "SKIPPED"}
    assert request_state(conn, movement_id) == "FAILED"
    assert ("node", str(node_id), "recovered", "UNKNOWN", "FAILED") in written.audit
    assert written.callbacks == [(movement_id, "movement.failed")]
    assert intent_row(conn, node_id, 1)["intent_state"] == "FAILED"


def test_recovery_in_flight_before_any_observation_resumes_as_submitted(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    claim_of(conn, node_id, lease=60)  # the dispatcher then dies
    pin_clock(conn, iso_at(60))
    secret = recovery_claims(conn)[node_id]["claim_secret"]
    written = recovered_logged(conn, node_id, secret, "IN_FLIGHT")
    assert written.rows == [("SUBMITTED",)]
    assert written.audit == [("node", str(node_id), "recovered", "SUBMITTING", "SUBMITTED")]
    row = node_row(conn, node_id)
    assert (row["observe_started_at"], row["next_observe_at"], row["lease_until"]) == (
        time_at(60),
        time_at(60 + 42),
        None,
    )
    assert row["external_ref"] == "ref-r"


def test_recovery_in_flight_after_observation_resumes_as_observing(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, iso_at(42))
    assert observe(conn, node_id, "UNKNOWN") == {
        "node_state": "UNKNOWN",
        "observe_phase": "pre_baseline",
        "next_observe_at": None,
    }
    secret = recovery_claims(conn)[node_id]["claim_secret"]
    written = recovered_logged(conn, node_id, secret, "IN_FLIGHT")
    assert written.rows == [("OBSERVING",)]
    row = node_row(conn, node_id)
    assert (row["observe_started_at"], row["next_observe_at"]) == (
        time_at(42),
        time_at(84),
    )  # fresh window


def test_recovery_not_submitted_makes_the_node_ready_again(conn: Conn) -> None:
    _, node_id, secret = lapsed_in_recovery(conn)
    written = recovered_logged(conn, node_id, secret, "NOT_SUBMITTED")
    assert written.rows == [("READY",)]
    assert written.audit == [("node", str(node_id), "recovered", "SUBMITTING", "READY")]
    assert intent_row(conn, node_id, 1)["intent_state"] == "ABANDONED"
    again = claim_of(conn, node_id)
    assert again["attempt"] == 2
    assert node_row(conn, node_id)["claim_token"] == 3  # dispatcher, recovery, dispatcher


def test_recovery_still_unknown_looks_again_later(conn: Conn) -> None:
    _, node_id, secret = unknown_in_recovery(conn)
    written = in_one_transaction(
        conn,
        "SELECT complete_recovery(%s, %s, 'STILL_UNKNOWN', p_retry_after_seconds => 90)::text",
        (node_id, secret),
    )
    assert written.rows == [("UNKNOWN",)]
    assert written.audit == [("node", str(node_id), "recovered", "UNKNOWN", "UNKNOWN")]
    assert node_row(conn, node_id)["lease_until"] == time_at(90)
    assert intent_row(conn, node_id, 1)["intent_state"] == "PREPARED"
    pin_clock(conn, iso_at(89))
    assert recovery_claims(conn) == {}
    assert claim(conn) == []
    pin_clock(conn, iso_at(90))
    assert set(recovery_claims(conn)) == {node_id}


def test_recovery_cannot_call_a_prepared_side_effect_not_submitted(conn: Conn) -> None:
    # the intent holds a signed transaction: it may be out there, or be sent by
    # anyone who has it, so no verdict may give the node a new one
    _, node_id, secret = unknown_in_recovery(conn)
    assert_rejected(
        conn,
        "QT021",
        "SELECT complete_recovery(%s, %s, 'NOT_SUBMITTED', %s::jsonb)",
        (node_id, secret, '{"receipt": null}'),
    )
    assert intent_row(conn, node_id, 1)["intent_state"] == "PREPARED"


def test_recovery_not_submitted_after_cancel_skips_the_node_and_settles(conn: Conn) -> None:
    movement_id, node_id, secret = lapsed_in_recovery(conn)
    conn.execute("SELECT cancel_movement(%s)", (movement_id,))
    assert request_state(conn, movement_id) == "EXECUTING"
    written = recovered_logged(conn, node_id, secret, "NOT_SUBMITTED")
    assert written.rows == [("SKIPPED",)]
    assert request_state(conn, movement_id) == "CANCELLED"
    assert written.callbacks == [(movement_id, "movement.cancelled")]


def test_complete_recovery_rejects_bad_arguments(conn: Conn) -> None:
    _, node_id, secret = unknown_in_recovery(conn)
    for outcome, hint in [("DONE", None), (None, None), ("COMPLETED", -5)]:
        assert_rejected(
            conn,
            "QT002",
            "SELECT complete_recovery(%s, %s, %s, p_retry_after_seconds => %s)",
            (node_id, secret, outcome, hint),
        )
