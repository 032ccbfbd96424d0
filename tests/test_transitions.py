"""Every transition of the movement state machine, legal and illegal.

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``).

The procedure files under sql/functions are the specification; each test names
the from-state and to-state it checks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    assert_rejected,
    bind,
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
    register_sim,
    request_state,
    snapshot,
    submit,
)
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

T0 = datetime(2026, 1, 1, tzinfo=UTC)

ONE = plan(node("a"))
CHAIN = plan(node("a"), node("b", ["a"]))
DIAMOND = plan(node("a"), node("b", ["a"]), node("c", ["a"]), node("d", ["b", "c"]))

Conn = psycopg.Connection[Any]


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def ts(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def conn(db: TestDatabase) -> Conn:
    c = bind(db.connect())
    pin_clock(c, at(0))
    register_sim(c)  # "sim": has_side_effect = true
    register_sim(c, "nosfx", has_side_effect=False)
    return c


def node_row(conn: Conn, node_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM movement_request_nodes WHERE id = %s", (node_id,)
        ).fetchone()
    assert row is not None
    return row


def request_row(conn: Conn, movement_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM movement_requests WHERE id = %s", (movement_id,)
        ).fetchone()
    assert row is not None
    return row


def intent_row(conn: Conn, node_id: int, token: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM node_intents WHERE node_id = %s AND claim_token = %s", (node_id, token)
        ).fetchone()
    assert row is not None
    return row


def claim_of(conn: Conn, node_id: int, lease: int = 300, max_nodes: int = 100) -> dict[str, Any]:
    """Claim up to ``max_nodes`` READY nodes and return the claim of ``node_id``."""
    cur = conn.execute("SELECT * FROM claim_ready_nodes('w1', %s, %s)", (max_nodes, lease))
    names = [c.name for c in cur.description or ()]
    claims = {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}
    assert node_id in claims, f"node {node_id} was not claimed: {sorted(claims)}"
    return claims[node_id]


def prepare(conn: Conn, claimed: dict[str, Any], tx_hash: str = "0xaa") -> None:
    conn.execute(
        "SELECT record_intent_prepared(%s, %s, p_nonce => 7, p_signed_tx_hash => %s)",
        (claimed["node_id"], claimed["claim_token"], tx_hash),
    )


def fail(conn: Conn, claimed: dict[str, Any], retryable: bool, after: float | None = None) -> str:
    row = conn.execute(
        "SELECT fail_submit(%s, %s, 'boom', %s, %s)::text",
        (claimed["node_id"], claimed["claim_token"], retryable, after),
    ).fetchone()
    assert row is not None
    return str(row[0])


def recovery_claims(conn: Conn, lease: int = 120) -> dict[int, dict[str, Any]]:
    cur = conn.execute("SELECT * FROM claim_recovery_nodes('rec', 100, %s)", (lease,))
    names = [c.name for c in cur.description or ()]
    return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}


def recover(conn: Conn, node_id: int, token: int, outcome: str, after: float | None = None) -> str:
    row = conn.execute(
        "SELECT complete_recovery(%s, %s, %s, p_retry_after_seconds => %s)::text",
        (node_id, token, outcome, after),
    ).fetchone()
    assert row is not None
    return str(row[0])


def to_unknown(conn: Conn, node_id: int) -> dict[str, Any]:
    """READY -> SUBMITTING -> (prepared, retryable failure) -> UNKNOWN; returns the claim."""
    claimed = claim_of(conn, node_id)
    prepare(conn, claimed)
    assert fail(conn, claimed, retryable=True) == "UNKNOWN"
    return claimed


def state_changes(written_audit: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    return {a for a in written_audit if a[2] == "state_changed"}


def movement_in(conn: Conn, state: str, external_id: str = "m") -> int:
    """A one-node movement brought to ``state`` through the procedures."""
    if state == "EXPIRED":
        movement_id = create(conn, ONE, external_id, expires_at=at(60))
        pin_clock(conn, at(60))
        assert conn.execute("SELECT expire_movements()").fetchone() == (1,)
        return movement_id
    movement_id = create(conn, ONE, external_id)
    if state == "PENDING_APPROVAL":
        return movement_id
    conn.execute("SELECT approve_movement(%s, 'bob')", (movement_id,))
    if state == "APPROVED":
        return movement_id
    conn.execute("SELECT start_approved_movements()")
    if state == "EXECUTING":
        return movement_id
    if state == "CANCELLED":
        conn.execute("SELECT cancel_movement(%s, 'carol')", (movement_id,))
    else:
        claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
        if state == "COMPLETED":
            submit(conn, claimed, settled=True)
        else:
            assert state == "FAILED"
            fail(conn, claimed, retryable=False)
    assert request_state(conn, movement_id) == state
    return movement_id


# --- create_movement ---------------------------------------------------------------------------


def test_create_makes_a_pending_approval_request_with_its_dag(conn: Conn) -> None:
    written = in_one_transaction(
        conn,
        "SELECT movement_id, created"
        " FROM create_movement('m1', 100, %s::jsonb, p_actor => 'alice')",
        (Jsonb(DIAMOND),),
    )
    [(movement_id, created)] = written.rows
    assert created is True
    request = request_row(conn, movement_id)
    assert request["request_state"] == "PENDING_APPROVAL"
    assert (request["open_nodes"], request["failed_nodes"], request["created_by"]) == (
        4,
        0,
        "alice",
    )
    rows = conn.execute(
        "SELECT node_key, node_state::text, pending_parents FROM movement_request_nodes"
        " WHERE request_id = %s ORDER BY node_key",
        (movement_id,),
    ).fetchall()
    assert rows == [
        ("a", "PENDING", 0),
        ("b", "PENDING", 1),
        ("c", "PENDING", 1),
        ("d", "PENDING", 2),
    ]
    edges = conn.execute(
        "SELECT p.node_key, c.node_key FROM movement_plan_edges e"
        " JOIN movement_request_nodes p ON p.id = e.parent_node_id"
        " JOIN movement_request_nodes c ON c.id = e.child_node_id WHERE e.request_id = %s",
        (movement_id,),
    ).fetchall()
    assert set(edges) == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}
    assert written.audit == [("request", str(movement_id), "created", None, "PENDING_APPROVAL")]
    assert written.callbacks == [(movement_id, "movement.pending_approval")]


# --- approve_movement --------------------------------------------------------------------------


def test_approve_moves_pending_approval_to_approved(conn: Conn) -> None:
    movement_id = create(conn, ONE, "m1", actor="alice")
    written = in_one_transaction(conn, "SELECT approve_movement(%s, 'bob')::text", (movement_id,))
    assert written.rows == [("APPROVED",)]
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["approved_by"], request["approved_at"]) == (
        "APPROVED",
        "bob",
        ts(0),
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
    movement_id = create(conn, ONE, "m1", expires_at=at(3600))
    pin_clock(conn, at(3600))  # expiry reached; the expiration checker has not run yet
    assert_rejected(conn, "QT020", "SELECT approve_movement(%s, 'bob')", (movement_id,))
    pin_clock(conn, at(3599))
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
    for approver in ("", "  ", None):
        assert_rejected(conn, "QT002", "SELECT approve_movement(%s, %s)", (movement_id, approver))


# --- start_approved_movements ------------------------------------------------------------------


def test_start_executes_approved_movements_and_readies_their_roots(conn: Conn) -> None:
    approved = create(conn, DIAMOND, "m1")
    conn.execute("SELECT approve_movement(%s, 'bob')", (approved,))
    waiting = create(conn, DIAMOND, "m2")
    written = in_one_transaction(conn, "SELECT start_approved_movements(10)")
    assert written.rows == [(1,)]
    assert request_row(conn, approved)["request_state"] == "EXECUTING"
    assert request_row(conn, approved)["started_at"] == ts(0)
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
        conn.execute("SELECT approve_movement(%s, 'bob')", (row[0],))
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
    conn.execute("SELECT approve_movement(%s, 'bob')", (movement_id,))
    for p_max in (0, -1, 10001, None):
        assert_rejected(conn, "QT002", "SELECT start_approved_movements(%s)", (p_max,))


# --- claim_ready_nodes -------------------------------------------------------------------------


def test_claim_moves_ready_to_submitting_with_an_intent_and_a_lease(conn: Conn) -> None:
    movement_id = create_started(conn, CHAIN, "m1", amount="12.5")
    a = node_ids(conn, movement_id)["a"]
    written = in_one_transaction(
        conn,
        "SELECT node_id, claim_token, idempotency_key, node_key,"
        " has_side_effect, amount, asset, attempt"
        " FROM claim_ready_nodes('w1', 10, 60)",
    )
    assert written.rows == [(a, 1, f"t{a}x1", "a", True, Decimal("12.5"), "USDC", 1)]
    row = node_row(conn, a)
    assert (row["node_state"], row["claim_token"], row["claimed_by"]) == ("SUBMITTING", 1, "w1")
    assert (row["claimed_at"], row["lease_until"], row["submit_attempts"]) == (ts(0), ts(60), 1)
    intent = intent_row(conn, a, 1)
    assert (intent["intent_state"], intent["idempotency_key"], intent["claimed_by"]) == (
        "CLAIMED",
        f"t{a}x1",
        "w1",
    )
    assert node_states(conn, movement_id)["b"] == "PENDING"  # not READY: never claimed
    assert written.audit == [("node", str(a), "state_changed", "READY", "SUBMITTING")]
    assert written.callbacks == []  # the request did not change state
    assert claim(conn) == []  # nothing else is READY


def test_claim_rejects_bad_arguments(conn: Conn) -> None:
    create_started(conn, ONE, "m1")
    for worker, p_max, lease in [
        ("", 10, 300),
        (None, 10, 300),
        ("w1", 0, 300),
        ("w1", 1001, 300),
        ("w1", 10, 0),
        ("w1", 10, None),
    ]:
        assert_rejected(
            conn, "QT002", "SELECT * FROM claim_ready_nodes(%s, %s, %s)", (worker, p_max, lease)
        )


# --- record_intent_prepared --------------------------------------------------------------------


def test_prepare_records_the_intent_and_every_signed_hash(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    node_id, token = claimed["node_id"], claimed["claim_token"]
    written = in_one_transaction(
        conn,
        "SELECT record_intent_prepared(%s, %s, p_nonce => 7, p_signed_tx_hash => '0xaa')",
        (node_id, token),
    )
    assert written.rows == [(claimed["intent_id"],)]
    assert written.audit == [("node", str(node_id), "intent_prepared", "SUBMITTING", "SUBMITTING")]
    # a replacement transaction (same nonce, new fee): both hashes are kept for recovery
    conn.execute(
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0xbb')", (node_id, token)
    )
    intent = intent_row(conn, node_id, token)
    assert (intent["intent_state"], intent["nonce"], intent["signed_tx_hash"]) == (
        "PREPARED",
        7,
        "0xbb",
    )
    assert intent["signed_tx_hashes"] == ["0xaa", "0xbb"]
    assert node_row(conn, node_id)["node_state"] == "SUBMITTING"


def test_prepare_is_refused_once_the_lease_ran_out(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"], lease=60)
    pin_clock(conn, at(60))
    assert_rejected(
        conn,
        "QT030",
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0xaa')",
        (claimed["node_id"], claimed["claim_token"]),
    )


def test_prepare_needs_something_to_record(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    assert_rejected(
        conn,
        "QT002",
        "SELECT record_intent_prepared(%s, %s)",
        (claimed["node_id"], claimed["claim_token"]),
    )


# --- complete_submit ---------------------------------------------------------------------------


def test_submit_moves_submitting_to_submitted_with_its_first_observation(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    node_id = claimed["node_id"]
    written = in_one_transaction(
        conn, "SELECT complete_submit(%s, %s, '0xfeed')::text", (node_id, claimed["claim_token"])
    )
    assert written.rows == [("SUBMITTED",)]
    row = node_row(conn, node_id)
    assert (row["node_state"], row["external_ref"], row["lease_until"]) == (
        "SUBMITTED",
        "0xfeed",
        None,
    )
    # default lane: baseline 60 s, first poll at 0.7 of it
    assert (row["submitted_at"], row["observe_started_at"]) == (ts(0), ts(0))
    assert (row["next_observe_at"], row["observe_phase"]) == (ts(42), "pre_baseline")
    intent = intent_row(conn, node_id, claimed["claim_token"])
    assert (intent["intent_state"], intent["external_ref"]) == ("SUBMITTED", "0xfeed")
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTING", "SUBMITTED")]
    assert written.callbacks == []
    assert request_state(conn, movement_id) == "EXECUTING"


def test_settled_submit_completes_the_node_and_readies_its_children(conn: Conn) -> None:
    movement_id = create_started(conn, DIAMOND, "m1")
    ids = node_ids(conn, movement_id)
    written = in_one_transaction(
        conn,
        "SELECT complete_submit(%s, 1, 'r', p_settled => true)::text",
        (claim_of(conn, ids["a"])["node_id"],),
    )
    assert written.rows == [("COMPLETED",)]
    assert state_changes(written.audit) == {
        ("node", str(ids["a"]), "state_changed", "SUBMITTING", "COMPLETED"),
        ("node", str(ids["b"]), "state_changed", "PENDING", "READY"),
        ("node", str(ids["c"]), "state_changed", "PENDING", "READY"),
    }
    assert node_row(conn, ids["a"])["finished_at"] == ts(0)
    assert node_row(conn, ids["a"])["next_observe_at"] is None
    claims = {c["node_key"]: c for c in claim(conn)}
    assert set(claims) == {"b", "c"}
    submit(conn, claims["b"], settled=True)
    assert node_row(conn, ids["d"])["pending_parents"] == 1
    assert node_states(conn, movement_id)["d"] == "PENDING"  # c is not done yet
    submit(conn, claims["c"], settled=True)
    assert node_states(conn, movement_id)["d"] == "READY"
    assert request_row(conn, movement_id)["open_nodes"] == 1

    written = in_one_transaction(
        conn,
        "SELECT complete_submit(%s, 1, 'r', p_settled => true)",
        (claim_of(conn, ids["d"])["node_id"],),
    )
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["open_nodes"], request["finished_at"]) == (
        "COMPLETED",
        0,
        ts(0),
    )
    assert ("request", str(movement_id), "state_changed", "EXECUTING", "COMPLETED") in written.audit
    assert written.callbacks == [(movement_id, "movement.completed")]


def test_a_stale_claim_token_changes_nothing(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    assert_rejected(
        conn,
        "QT030",
        "SELECT complete_submit(%s, %s, 'r')",
        (claimed["node_id"], claimed["claim_token"] - 1),
    )
    assert_rejected(conn, "QT030", "SELECT complete_submit(%s, NULL, 'r')", (claimed["node_id"],))


# --- fail_submit -------------------------------------------------------------------------------


def test_retryable_failure_returns_the_node_to_ready_after_a_backoff(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    claimed = claim_of(conn, node_id)
    written = in_one_transaction(
        conn,
        "SELECT fail_submit(%s, %s, 'rpc timeout', true)::text",
        (node_id, claimed["claim_token"]),
    )
    assert written.rows == [("READY",)]
    row = node_row(conn, node_id)
    assert (row["not_before"], row["last_error"], row["lease_until"]) == (
        ts(2),
        "rpc timeout",
        None,
    )
    assert intent_row(conn, node_id, 1)["intent_state"] == "FAILED"
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTING", "READY")]
    assert written.callbacks == []

    assert claim(conn) == []  # backing off: 2^1 s after the first attempt
    pin_clock(conn, at(2))
    [again] = claim(conn)
    assert (again["node_id"], again["claim_token"], again["attempt"]) == (node_id, 2, 2)
    assert again["idempotency_key"] != claimed["idempotency_key"]
    assert fail(conn, again, retryable=True) == "READY"
    assert node_row(conn, node_id)["not_before"] == ts(2 + 4)  # 2^2 s after the second attempt


def test_retryable_failure_honours_the_retry_hint(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    assert fail(conn, claimed, retryable=True, after=30) == "READY"
    assert node_row(conn, claimed["node_id"])["not_before"] == ts(30)


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
        (node_id, claimed["claim_token"]),
    )
    assert written.rows == [("UNKNOWN",)]
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTING", "UNKNOWN")]
    row = node_row(conn, node_id)
    assert (row["node_state"], row["not_before"], row["lease_until"]) == ("UNKNOWN", None, ts(0))
    assert intent_row(conn, node_id, claimed["claim_token"])["intent_state"] == "PREPARED"
    for later in (0, 3600, 86400):  # never dispatched again, however long we wait
        pin_clock(conn, at(later))
        assert claim(conn) == []
    assert set(recovery_claims(conn)) == {node_id}


def test_retryable_failure_after_prepare_without_a_side_effect_retries(conn: Conn) -> None:
    movement_id = create_started(conn, plan(node("a", executor="nosfx")), "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    prepare(conn, claimed)
    assert fail(conn, claimed, retryable=True) == "READY"
    pin_clock(conn, at(2))
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
        (ids["a"], claimed["claim_token"]),
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


def test_fail_submit_rejects_bad_arguments(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    for retryable, after in [(None, None), (True, -1)]:
        assert_rejected(
            conn,
            "QT002",
            "SELECT fail_submit(%s, %s, 'x', %s, %s)",
            (claimed["node_id"], claimed["claim_token"], retryable, after),
        )


# --- claim_observe / complete_observe ----------------------------------------------------------


def submitted(conn: Conn, the_plan: dict[str, Any] = ONE, key: str = "a") -> tuple[int, int]:
    """A started movement whose node ``key`` was submitted at T0 (first observation at 42 s)."""
    movement_id = create_started(conn, the_plan, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)[key])
    assert submit(conn, claimed) == "SUBMITTED"
    return movement_id, claimed["node_id"]


def observe_logged(conn: Conn, node_id: int, outcome: str, hint: float | None = None) -> Any:
    """claim_observe + complete_observe in one transaction, with what it wrote."""
    return in_one_transaction(
        conn,
        "SELECT o.node_state::text, o.observe_phase::text, o.next_observe_at"
        " FROM claim_observe(%s, 'obs') c,"
        " complete_observe(c.node_id, c.claim_token, %s, NULL, %s) o",
        (node_id, outcome, hint),
    )


def test_observe_claims_only_when_due(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, at(41))
    assert observe(conn, node_id, "PENDING") is None
    assert node_row(conn, node_id)["claim_token"] == 1  # a miss does not bump the token
    pin_clock(conn, at(42))
    assert observe(conn, node_id, "PENDING") is not None
    assert node_row(conn, node_id)["claim_token"] == 2


def test_observe_pending_moves_submitted_to_observing_paced_by_the_lane(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, at(42))
    written = observe_logged(conn, node_id, "PENDING")
    # pre-baseline: the first poll was at 0.7 * 60 s, then every 0.1 * 60 s
    assert written.rows == [("OBSERVING", "pre_baseline", ts(48))]
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTED", "OBSERVING")]
    row = node_row(conn, node_id)
    assert (row["node_state"], row["observe_count"], row["last_observed_at"]) == (
        "OBSERVING",
        1,
        ts(42),
    )
    pin_clock(conn, at(200))  # over baseline (2x): polls back off with elapsed time
    assert observe(conn, node_id, "PENDING") == {
        "node_state": "OBSERVING",
        "observe_phase": "over_baseline",
        "next_observe_at": ts(220),
    }


def test_observe_completed_completes_the_node_and_readies_its_child(conn: Conn) -> None:
    movement_id, node_id = submitted(conn, CHAIN)
    pin_clock(conn, at(42))
    written = observe_logged(conn, node_id, "COMPLETED")
    assert written.rows == [("COMPLETED", "pre_baseline", None)]
    b = node_ids(conn, movement_id)["b"]
    assert state_changes(written.audit) == {
        ("node", str(node_id), "state_changed", "SUBMITTED", "COMPLETED"),
        ("node", str(b), "state_changed", "PENDING", "READY"),
    }
    assert node_row(conn, node_id)["finished_at"] == ts(42)
    assert node_row(conn, node_id)["next_observe_at"] is None
    assert written.callbacks == []
    assert request_row(conn, movement_id)["open_nodes"] == 1


def test_observe_completed_on_the_last_node_completes_the_request(conn: Conn) -> None:
    movement_id, node_id = submitted(conn)
    pin_clock(conn, at(42))
    written = observe_logged(conn, node_id, "COMPLETED")
    assert request_state(conn, movement_id) == "COMPLETED"
    assert ("request", str(movement_id), "state_changed", "EXECUTING", "COMPLETED") in written.audit
    assert written.callbacks == [(movement_id, "movement.completed")]


def test_observe_failed_fails_the_node_and_the_request(conn: Conn) -> None:
    movement_id, node_id = submitted(conn, CHAIN)
    pin_clock(conn, at(42))
    written = observe_logged(conn, node_id, "FAILED")
    assert written.rows == [("FAILED", "pre_baseline", None)]
    assert node_states(conn, movement_id) == {"a": "FAILED", "b": "SKIPPED"}
    assert request_row(conn, movement_id)["failed_nodes"] == 1
    assert ("request", str(movement_id), "state_changed", "EXECUTING", "FAILED") in written.audit
    assert written.callbacks == [(movement_id, "movement.failed")]


def test_observe_unknown_hands_the_node_to_recovery(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, at(42))
    written = observe_logged(conn, node_id, "UNKNOWN")
    assert written.rows == [("UNKNOWN", "pre_baseline", None)]
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTED", "UNKNOWN")]
    row = node_row(conn, node_id)
    assert (row["next_observe_at"], row["lease_until"]) == (None, ts(42))
    assert claim(conn) == []
    assert set(recovery_claims(conn)) == {node_id}


def test_observe_unknown_with_a_retry_hint_looks_again(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, at(42))
    assert observe_logged(conn, node_id, "UNKNOWN", hint=30).rows == [
        ("OBSERVING", "pre_baseline", ts(72))
    ]


def test_observing_past_the_fatal_factor_goes_to_unknown(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, at(600))  # 10x the 60 s baseline
    assert observe_logged(conn, node_id, "PENDING").rows == [("UNKNOWN", "fatal", None)]
    assert node_row(conn, node_id)["lease_until"] == ts(600)


def test_complete_observe_rejects_bad_arguments(conn: Conn) -> None:
    _, node_id = submitted(conn)
    for outcome, hint in [("DONE", None), (None, None), ("PENDING", -1)]:
        assert_rejected(
            conn,
            "QT002",
            "SELECT * FROM complete_observe(%s, 1, %s, NULL, %s)",
            (node_id, outcome, hint),
        )


# --- claim_recovery_nodes / complete_recovery ---------------------------------------------------


def test_recovery_claims_unknown_and_lease_expired_submitting_nodes(conn: Conn) -> None:
    movement_id = create_started(conn, plan(node("x"), node("y"), node("z")), "m1")
    claims = {c["node_key"]: c for c in claim(conn)}  # lease 300 s
    prepare(conn, claims["x"])
    assert fail(conn, claims["x"], retryable=True) == "UNKNOWN"
    submit(conn, claims["z"])
    ids = node_ids(conn, movement_id)

    written = in_one_transaction(
        conn,
        "SELECT node_id, claim_token, node_state::text FROM claim_recovery_nodes('rec', 10, 120)",
    )
    assert written.rows == [(ids["x"], 2, "UNKNOWN")]  # y's dispatcher still holds its lease
    assert written.audit == [("node", str(ids["x"]), "recovery_claimed", "UNKNOWN", "UNKNOWN")]
    x = node_row(conn, ids["x"])
    assert (x["node_state"], x["lease_until"], x["recovery_attempts"]) == ("UNKNOWN", ts(120), 1)
    assert recovery_claims(conn) == {}  # x is leased to this recovery worker

    pin_clock(conn, at(300))  # y's dispatcher lease ran out; x's recovery lease too
    taken = recovery_claims(conn)
    assert {k: (v["node_state"], v["claim_token"]) for k, v in taken.items()} == {
        ids["x"]: ("UNKNOWN", 3),
        ids["y"]: ("SUBMITTING", 2),
    }
    assert taken[ids["y"]]["intent"]["idempotency_key"] == claims["y"]["idempotency_key"]
    # the fenced dispatcher's late report changes nothing
    assert_rejected(
        conn,
        "QT030",
        "SELECT complete_submit(%s, %s, 'late')",
        (ids["y"], claims["y"]["claim_token"]),
    )


def test_claim_recovery_rejects_bad_arguments(conn: Conn) -> None:
    for worker, p_max, lease in [
        ("rec", 0, 120),
        ("rec", 1001, 120),
        ("rec", None, 120),
        ("", 10, 120),
        (None, 10, 120),
        ("rec", 10, 0),
    ]:
        assert_rejected(
            conn, "QT002", "SELECT * FROM claim_recovery_nodes(%s, %s, %s)", (worker, p_max, lease)
        )


def unknown_in_recovery(conn: Conn, the_plan: dict[str, Any] = ONE) -> tuple[int, int, int]:
    """A movement whose node 'a' is UNKNOWN and claimed by recovery: (movement, node, token)."""
    movement_id = create_started(conn, the_plan, "m1")
    node_id = node_ids(conn, movement_id)["a"]
    to_unknown(conn, node_id)
    return movement_id, node_id, recovery_claims(conn)[node_id]["claim_token"]


def recovered_logged(conn: Conn, node_id: int, token: int, outcome: str) -> Any:
    return in_one_transaction(
        conn, "SELECT complete_recovery(%s, %s, %s, NULL, 'ref-r')::text", (node_id, token, outcome)
    )


def test_recovery_completed_completes_the_node_and_readies_its_child(conn: Conn) -> None:
    movement_id, node_id, token = unknown_in_recovery(conn, CHAIN)
    written = recovered_logged(conn, node_id, token, "COMPLETED")
    assert written.rows == [("COMPLETED",)]
    b = node_ids(conn, movement_id)["b"]
    assert set(written.audit) == {
        ("node", str(node_id), "recovered", "UNKNOWN", "COMPLETED"),
        ("node", str(b), "state_changed", "PENDING", "READY"),
    }
    row = node_row(conn, node_id)
    assert (row["external_ref"], row["lease_until"], row["finished_at"]) == ("ref-r", None, ts(0))
    assert intent_row(conn, node_id, 1)["intent_state"] == "SUBMITTED"
    assert [c["node_key"] for c in claim(conn)] == ["b"]


def test_recovery_failed_fails_the_node_and_the_request(conn: Conn) -> None:
    movement_id, node_id, token = unknown_in_recovery(conn, CHAIN)
    written = recovered_logged(conn, node_id, token, "FAILED")
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
    pin_clock(conn, at(60))
    token = recovery_claims(conn)[node_id]["claim_token"]
    written = recovered_logged(conn, node_id, token, "IN_FLIGHT")
    assert written.rows == [("SUBMITTED",)]
    assert written.audit == [("node", str(node_id), "recovered", "SUBMITTING", "SUBMITTED")]
    row = node_row(conn, node_id)
    assert (row["observe_started_at"], row["next_observe_at"], row["lease_until"]) == (
        ts(60),
        ts(60 + 42),
        None,
    )
    assert row["external_ref"] == "ref-r"


def test_recovery_in_flight_after_observation_resumes_as_observing(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, at(42))
    assert observe(conn, node_id, "UNKNOWN") == {
        "node_state": "UNKNOWN",
        "observe_phase": "pre_baseline",
        "next_observe_at": None,
    }
    token = recovery_claims(conn)[node_id]["claim_token"]
    written = recovered_logged(conn, node_id, token, "IN_FLIGHT")
    assert written.rows == [("OBSERVING",)]
    row = node_row(conn, node_id)
    assert (row["observe_started_at"], row["next_observe_at"]) == (ts(42), ts(84))  # fresh window


def test_recovery_not_submitted_makes_the_node_ready_again(conn: Conn) -> None:
    _, node_id, token = unknown_in_recovery(conn)
    written = recovered_logged(conn, node_id, token, "NOT_SUBMITTED")
    assert written.rows == [("READY",)]
    assert written.audit == [("node", str(node_id), "recovered", "UNKNOWN", "READY")]
    assert intent_row(conn, node_id, 1)["intent_state"] == "ABANDONED"
    again = claim_of(conn, node_id)
    assert (again["claim_token"], again["attempt"]) == (token + 1, 2)


def test_recovery_still_unknown_looks_again_later(conn: Conn) -> None:
    _, node_id, token = unknown_in_recovery(conn)
    written = in_one_transaction(
        conn,
        "SELECT complete_recovery(%s, %s, 'STILL_UNKNOWN', p_retry_after_seconds => 90)::text",
        (node_id, token),
    )
    assert written.rows == [("UNKNOWN",)]
    assert written.audit == [("node", str(node_id), "recovered", "UNKNOWN", "UNKNOWN")]
    assert node_row(conn, node_id)["lease_until"] == ts(90)
    assert intent_row(conn, node_id, 1)["intent_state"] == "PREPARED"
    pin_clock(conn, at(89))
    assert recovery_claims(conn) == {}
    assert claim(conn) == []
    pin_clock(conn, at(90))
    assert set(recovery_claims(conn)) == {node_id}


def test_complete_recovery_rejects_bad_arguments(conn: Conn) -> None:
    _, node_id, token = unknown_in_recovery(conn)
    for outcome, hint in [("DONE", None), (None, None), ("COMPLETED", -5)]:
        assert_rejected(
            conn,
            "QT002",
            "SELECT complete_recovery(%s, %s, %s, p_retry_after_seconds => %s)",
            (node_id, token, outcome, hint),
        )


# --- cancel_movement ---------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["PENDING_APPROVAL", "APPROVED"])
def test_cancel_before_execution_cancels_at_once(conn: Conn, state: str) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    if state == "APPROVED":
        conn.execute("SELECT approve_movement(%s, 'bob')", (movement_id,))
    ids = node_ids(conn, movement_id)
    written = in_one_transaction(
        conn, "SELECT cancel_movement(%s, 'carol', 'typo')::text", (movement_id,)
    )
    assert written.rows == [("CANCELLED",)]
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["stop_reason"], request["stop_detail"]) == (
        "CANCELLED",
        "CANCELLED",
        "typo",
    )
    assert (request["open_nodes"], request["finished_at"]) == (0, ts(0))
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
    written = in_one_transaction(conn, "SELECT cancel_movement(%s, 'carol')::text", (movement_id,))
    assert written.rows == [("CANCELLED",)]
    assert node_states(conn, movement_id) == {"a": "SKIPPED", "b": "SKIPPED"}
    ids = node_ids(conn, movement_id)
    assert ("node", str(ids["a"]), "state_changed", "READY", "SKIPPED") in written.audit
    assert ("request", str(movement_id), "state_changed", "EXECUTING", "CANCELLED") in written.audit
    assert written.callbacks == [(movement_id, "movement.cancelled")]
    assert claim(conn) == []


def put_in_flight(conn: Conn, node_id: int, state: str) -> dict[str, Any]:
    """Drive ``node_id`` (READY, the lowest id) to the in-flight ``state`` alone."""
    claimed = claim_of(conn, node_id, max_nodes=1)
    if state == "SUBMITTING":
        return claimed
    if state == "UNKNOWN":
        prepare(conn, claimed)
        fail(conn, claimed, retryable=True)
        return claimed
    submit(conn, claimed)
    if state == "OBSERVING":
        pin_clock(conn, at(42))
        observe(conn, node_id, "PENDING")
    return {**claimed, "claim_token": node_row(conn, node_id)["claim_token"]}


def settle_in_flight(conn: Conn, node_id: int, state: str, outcome: str) -> None:
    """Bring an in-flight node to ``outcome`` (COMPLETED or FAILED) by its proper path."""
    token = node_row(conn, node_id)["claim_token"]
    if state == "SUBMITTING":
        if outcome == "COMPLETED":
            conn.execute("SELECT complete_submit(%s, %s, 'r', p_settled => true)", (node_id, token))
        else:
            conn.execute("SELECT fail_submit(%s, %s, 'no', false)", (node_id, token))
    elif state == "UNKNOWN":
        recover(conn, node_id, recovery_claims(conn)[node_id]["claim_token"], outcome)
    else:
        pin_clock(conn, at(100))
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
    put_in_flight(conn, ids["a"], in_flight)

    written = in_one_transaction(conn, "SELECT cancel_movement(%s, 'carol')::text", (movement_id,))
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
    again = conn.execute("SELECT cancel_movement(%s, 'dave')::text", (movement_id,)).fetchall()
    assert again == [("EXECUTING",)]
    assert snapshot(conn) == before

    settle_in_flight(conn, ids["a"], in_flight, outcome)
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


def test_a_retryable_failure_after_cancel_skips_the_node_and_settles(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    conn.execute("SELECT cancel_movement(%s, 'carol')", (movement_id,))
    assert fail(conn, claimed, retryable=True) == "SKIPPED"
    assert request_state(conn, movement_id) == "CANCELLED"
    assert claim(conn) == []


def test_recovery_not_submitted_after_cancel_skips_the_node_and_settles(conn: Conn) -> None:
    movement_id, node_id, token = unknown_in_recovery(conn)
    conn.execute("SELECT cancel_movement(%s, 'carol')", (movement_id,))
    assert request_state(conn, movement_id) == "EXECUTING"
    written = recovered_logged(conn, node_id, token, "NOT_SUBMITTED")
    assert written.rows == [("SKIPPED",)]
    assert request_state(conn, movement_id) == "CANCELLED"
    assert written.callbacks == [(movement_id, "movement.cancelled")]


def test_cancel_of_a_finished_movement_is_refused(conn: Conn) -> None:
    for state in ("COMPLETED", "FAILED", "EXPIRED"):
        movement_id = movement_in(conn, state, external_id=state)
        error = assert_rejected(
            conn, "QT020", "SELECT cancel_movement(%s, 'carol')", (movement_id,)
        )
        assert state in str(error)


def test_cancel_of_a_cancelled_movement_changes_nothing(conn: Conn) -> None:
    movement_id = movement_in(conn, "CANCELLED")
    before = snapshot(conn)
    again = conn.execute("SELECT cancel_movement(%s, 'carol')::text", (movement_id,)).fetchall()
    assert again == [("CANCELLED",)]
    assert snapshot(conn) == before


def test_cancel_of_an_expiring_movement_is_refused(conn: Conn) -> None:
    movement_id = create_started(conn, plan(node("a", executor="nosfx")), "m1", expires_at=at(60))
    claim_of(conn, node_ids(conn, movement_id)["a"])
    pin_clock(conn, at(60))
    assert conn.execute("SELECT expire_movements()").fetchone() == (1,)
    assert request_row(conn, movement_id)["stop_reason"] == "EXPIRED"
    assert_rejected(conn, "QT020", "SELECT cancel_movement(%s, 'carol')", (movement_id,))


def test_cancel_unknown_movement_or_without_operator(conn: Conn) -> None:
    assert_rejected(conn, "QT010", "SELECT cancel_movement(424242, 'carol')")
    movement_id = create(conn, ONE, "m1")
    assert_rejected(conn, "QT002", "SELECT cancel_movement(%s, '')", (movement_id,))
    assert_rejected(conn, "QT002", "SELECT cancel_movement(%s, NULL)", (movement_id,))


# --- expire_movements --------------------------------------------------------------------------


def test_expiry_before_any_side_effect_expires_the_movement(conn: Conn) -> None:
    movements = {}
    for state in ("EXECUTING", "APPROVED", "PENDING_APPROVAL"):
        movements[state] = movement_id = create(conn, CHAIN, state, expires_at=at(60))
        if state != "PENDING_APPROVAL":
            conn.execute("SELECT approve_movement(%s, 'bob')", (movement_id,))
        if state == "EXECUTING":
            conn.execute("SELECT start_approved_movements()")
    assert {m: request_state(conn, m) for m in movements.values()} == {
        m: s for s, m in movements.items()
    }
    pin_clock(conn, at(59))
    assert conn.execute("SELECT expire_movements()").fetchone() == (0,)
    pin_clock(conn, at(60))
    written = in_one_transaction(conn, "SELECT expire_movements()")
    assert written.rows == [(3,)]
    for state, movement_id in movements.items():
        assert request_state(conn, movement_id) == "EXPIRED"
        assert set(node_states(conn, movement_id).values()) == {"SKIPPED"}
        assert ("request", str(movement_id), "state_changed", state, "EXPIRED") in written.audit
    assert sorted(written.callbacks) == sorted((m, "movement.expired") for m in movements.values())


def test_expiry_after_a_side_effect_started_is_waived(conn: Conn) -> None:
    movement_id = create_started(conn, CHAIN, "m1", expires_at=at(60))
    submit(conn, claim_of(conn, node_ids(conn, movement_id)["a"]))
    pin_clock(conn, at(60))
    written = in_one_transaction(conn, "SELECT expire_movements()")
    assert written.rows == [(0,)]
    assert written.audit == [
        ("request", str(movement_id), "expiry_waived", "EXECUTING", "EXECUTING")
    ]
    request = request_row(conn, movement_id)
    assert (request["request_state"], request["stop_reason"], request["expiry_waived_at"]) == (
        "EXECUTING",
        None,
        ts(60),
    )
    assert node_states(conn, movement_id) == {"a": "SUBMITTED", "b": "PENDING"}


# --- wrong from-states, unknown nodes ----------------------------------------------------------

ALL_NODE_STATES = (
    "PENDING",
    "READY",
    "SUBMITTING",
    "SUBMITTED",
    "OBSERVING",
    "UNKNOWN",
    "COMPLETED",
    "FAILED",
    "SKIPPED",
)

COMPLETION_CALLS: dict[str, tuple[str, set[str]]] = {
    # call: (SQL taking node id and claim token, the from-states it accepts)
    "record_intent_prepared": (
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0x1')",
        {"SUBMITTING"},
    ),
    "complete_submit": ("SELECT complete_submit(%s, %s, 'ref')", {"SUBMITTING"}),
    "fail_submit": ("SELECT fail_submit(%s, %s, 'err', false)", {"SUBMITTING"}),
    "complete_observe": (
        "SELECT * FROM complete_observe(%s, %s, 'COMPLETED')",
        {"SUBMITTED", "OBSERVING"},
    ),
    "complete_recovery": (
        "SELECT complete_recovery(%s, %s, 'COMPLETED')",
        {"UNKNOWN", "SUBMITTING"},
    ),
}


def a_node_in_every_state(conn: Conn) -> dict[str, int]:
    """One movement with a node in each node state; returns state -> node id."""
    the_plan = plan(
        node("ready"),
        node("pending", ["ready"]),
        node("submitting"),
        node("submitted"),
        node("observing"),
        node("unknown"),
        node("completed"),
        node("failed"),
        node("skipped", ["failed"]),
    )
    movement_id = create_started(conn, the_plan, "every-state")
    claims = {c["node_key"]: c for c in claim(conn)}
    fail(conn, claims["ready"], retryable=True, after=86400)  # READY again, backing off
    submit(conn, claims["submitted"])
    submit(conn, claims["observing"])
    submit(conn, claims["completed"], settled=True)
    prepare(conn, claims["unknown"])
    fail(conn, claims["unknown"], retryable=True)
    fail(conn, claims["failed"], retryable=False)
    pin_clock(conn, at(42))
    assert observe(conn, claims["observing"]["node_id"], "PENDING") is not None
    ids = node_ids(conn, movement_id)
    assert node_states(conn, movement_id) == {s.lower(): s for s in ALL_NODE_STATES}
    assert request_state(conn, movement_id) == "EXECUTING"
    return {state: ids[state.lower()] for state in ALL_NODE_STATES}


def test_completion_calls_refuse_a_wrong_from_state(conn: Conn) -> None:
    nodes = a_node_in_every_state(conn)
    for call, (query, accepted) in COMPLETION_CALLS.items():
        for state in ALL_NODE_STATES:
            if state in accepted:
                continue
            node_id = nodes[state]
            token = node_row(conn, node_id)["claim_token"]  # current token: only the state is wrong
            error = assert_rejected(conn, "QT021", query, (node_id, token))
            assert f"is {state}" in str(error), f"{call} from {state}: {error}"


def test_completion_calls_refuse_an_unknown_node(conn: Conn) -> None:
    create_started(conn, ONE, "m1")
    for query, _ in COMPLETION_CALLS.values():
        assert_rejected(conn, "QT011", query, (424242, 1))
