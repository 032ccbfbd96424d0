"""fail_submit: SUBMITTING -> READY (retryable, after a backoff), FAILED, UNKNOWN or SKIPPED.

Pins: a retryable failure backs off 2^attempt seconds, or the executor's retry
hint, and fails the node after ten attempts; after the intent was prepared, a
retryable failure of an executor with a side effect is UNKNOWN (never
dispatched again, handed to recovery) and one without a side effect is retried;
a permanent failure skips the node's descendants and fails the request once no
other branch is running; under a cancel a retryable failure skips the node and
settles the movement; bad arguments are refused (QT002).

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

import pytest
from engine import (
    assert_rejected,
    claim,
    create_started,
    in_one_transaction,
    node,
    node_ids,
    node_states,
    pin_clock,
    plan,
    request_state,
    submit,
)
from rows import (
    DIAMOND,
    ONE,
    Conn,
    claim_of,
    fail,
    intent_row,
    iso_at,
    node_row,
    prepare,
    recovery_claims,
    request_row,
    state_changes,
    time_at,
)


def test_retryable_failure_returns_the_node_to_ready_after_a_backoff(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    claimed = claim_of(conn, node_id)
    written = in_one_transaction(
        conn,
        "SELECT fail_submit(%s, %s, 'rpc timeout', true)::text",
        (node_id, claimed["claim_secret"]),
    )
    assert written.rows == [("READY",)]
    row = node_row(conn, node_id)
    assert (row["not_before"], row["last_error"], row["lease_until"]) == (
        time_at(2),
        "rpc timeout",
        None,
    )
    assert intent_row(conn, node_id, 1)["intent_state"] == "FAILED"
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTING", "READY")]
    assert written.callbacks == []

    assert claim(conn) == []  # backing off: 2^1 s after the first attempt
    pin_clock(conn, iso_at(2))
    [again] = claim(conn)
    assert (again["node_id"], again["attempt"]) == (node_id, 2)
    assert node_row(conn, node_id)["claim_token"] == 2
    assert again["claim_secret"] != claimed["claim_secret"]
    assert again["idempotency_key"] != claimed["idempotency_key"]
    assert fail(conn, again, retryable=True) == "READY"
    assert node_row(conn, node_id)["not_before"] == time_at(2 + 4)  # 2^2 s after the second attempt


def test_retryable_failure_honours_the_retry_hint(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    assert fail(conn, claimed, retryable=True, after=30) == "READY"
    assert node_row(conn, claimed["node_id"])["not_before"] == time_at(30)


def test_retryable_failures_fail_the_node_after_ten_attempts(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    for attempt in range(1, 10):
        claimed = claim_of(conn, node_id)
        assert claimed["attempt"] == attempt
        assert fail(conn, claimed, retryable=True, after=0) == "READY"
    assert fail(conn, claim_of(conn, node_id), retryable=True, after=0) == "FAILED"
    assert request_state(conn, movement_id) == "FAILED"


def test_retryable_failure_after_prepare_with_a_side_effect_is_unknown(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    claimed = claim_of(conn, node_id)
    prepare(conn, claimed)
    written = in_one_transaction(
        conn,
        "SELECT fail_submit(%s, %s, 'broadcast timeout', true)::text",
        (node_id, claimed["claim_secret"]),
    )
    assert written.rows == [("UNKNOWN",)]
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTING", "UNKNOWN")]
    row = node_row(conn, node_id)
    assert (row["node_state"], row["not_before"], row["lease_until"]) == (
        "UNKNOWN",
        None,
        time_at(0),
    )
    assert intent_row(conn, node_id)["intent_state"] == "PREPARED"
    for later in (0, 3600, 86400):  # never dispatched again, however long we wait
        pin_clock(conn, iso_at(later))
        assert claim(conn) == []
    assert set(recovery_claims(conn)) == {node_id}


def test_retryable_failure_after_prepare_waits_for_the_hint_before_recovery(conn: Conn) -> None:
    """The outside world said when to ask again (an exchange's rate-limit
    reset): recovery, which repeats the recorded request, takes the node only
    then."""
    movement_id = create_started(conn, ONE, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    claimed = claim_of(conn, node_id)
    prepare(conn, claimed)
    assert fail(conn, claimed, retryable=True, after=9) == "UNKNOWN"
    row = node_row(conn, node_id)
    assert (row["not_before"], row["lease_until"]) == (None, time_at(9))
    pin_clock(conn, iso_at(8))
    assert recovery_claims(conn) == {}
    pin_clock(conn, iso_at(9))
    assert set(recovery_claims(conn)) == {node_id}


@pytest.mark.usefixtures("nosfx_executor")
def test_retryable_failure_after_prepare_without_a_side_effect_retries(conn: Conn) -> None:
    movement_id = create_started(conn, plan(node("a", executor="nosfx")), "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    prepare(conn, claimed)
    assert fail(conn, claimed, retryable=True) == "READY"
    pin_clock(conn, iso_at(2))
    assert [c["node_id"] for c in claim(conn)] == [claimed["node_id"]]


def test_permanent_failure_fails_the_node_skips_its_descendants_and_fails_the_request(
    conn: Conn,
) -> None:
    movement_id = create_started(conn, DIAMOND, "m1")
    ids = node_ids(conn, movement_id)
    claimed = claim_of(conn, ids["a"])
    written = in_one_transaction(
        conn,
        "SELECT fail_submit(%s, %s, 'insufficient funds', false)::text",
        (ids["a"], claimed["claim_secret"]),
    )
    assert written.rows == [("FAILED",)]
    assert node_states(conn, movement_id) == {
        "a": "FAILED",
        "b": "SKIPPED",
        "c": "SKIPPED",
        "d": "SKIPPED",
    }
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["open_nodes"], request["failed_nodes"]) == (
        "FAILED",
        0,
        1,
    )
    assert state_changes(written.audit) == {
        ("node", str(ids["a"]), "state_changed", "SUBMITTING", "FAILED"),
        *{("node", str(ids[k]), "state_changed", "PENDING", "SKIPPED") for k in "bcd"},
        ("request", str(movement_id), "state_changed", "EXECUTING", "FAILED"),
    }
    assert written.callbacks == [(movement_id, "movement.failed")]


def test_a_failed_branch_lets_the_other_branch_finish_then_fails_the_request(conn: Conn) -> None:
    movement_id = create_started(conn, plan(node("a"), node("b"), node("c", ["b"])), "m1")
    claims = {c["node_key"]: c for c in claim(conn)}
    assert fail(conn, claims["a"], retryable=False) == "FAILED"
    assert request_state(conn, movement_id) == "EXECUTING"  # b is in flight, c may still run
    submit(conn, claims["b"], settled=True)
    submit(conn, claim(conn)[0], settled=True)
    assert node_states(conn, movement_id) == {"a": "FAILED", "b": "COMPLETED", "c": "COMPLETED"}
    assert request_state(conn, movement_id) == "FAILED"


def test_a_retryable_failure_after_cancel_skips_the_node_and_settles(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    conn.execute("SELECT cancel_movement(%s)", (movement_id,))
    assert fail(conn, claimed, retryable=True) == "SKIPPED"
    assert request_state(conn, movement_id) == "CANCELLED"
    assert claim(conn) == []


def test_fail_submit_rejects_bad_arguments(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    for retryable, after in [(None, None), (True, -1)]:
        assert_rejected(
            conn,
            "QT002",
            "SELECT fail_submit(%s, %s, 'x', %s, %s)",
            (claimed["node_id"], claimed["claim_secret"], retryable, after),
        )
