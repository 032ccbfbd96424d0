"""requeue_node: a fresh side effect for an UNKNOWN node, or a retry of a
FAILED node of which nothing happened, on two logins' word.

Pins: the first call records a REQUESTED requeue with the evidence the
requester saw and leaves the node as it was; the same login's second call is
refused with a QT022 warning and audited (requeue_refused); another login's
call moves the node UNKNOWN -> READY, abandons its intent, fences any recovery
claim still out, and the next claim makes a new intent under a new
idempotency key. A request made against an intent that is no longer the
latest goes STALE. Refused with nothing changed: QT011 unknown node, QT021 a
node that is not UNKNOWN or has no prepared or sent side effect, QT020 a
movement being stopped, QT002 no reason.

A FAILED node none of whose intents was ever prepared is retried the same
way: READY with its attempts from 0, its SKIPPED descendants PENDING, its
movement EXECUTING again, which then completes as any other; one whose side
effect was prepared is refused (QT021: it may have happened), as is one
retried three times, and one whose movement is being stopped (QT020). A
movement's FAILED nodes are retried together, as a whole, or not at all.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine import (
    as_person,
    assert_rejected,
    cancel,
    claim,
    create_started,
    in_one_transaction,
    node,
    node_ids,
    observe,
    plan,
    submit,
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
    set_clock,
)

from qtg_runner.db import procs


def unknown_after_prepare(conn: Conn, external_id: str = "m1") -> tuple[int, int, dict[str, Any]]:
    """A one-node movement whose node went UNKNOWN after its intent was PREPARED."""
    movement_id = create_started(conn, ONE, external_id)
    node_id = node_ids(conn, movement_id)["a"]
    claimed = claim_of(conn, node_id)
    prepare(conn, claimed)
    assert fail(conn, claimed, retryable=True) == "UNKNOWN"
    return movement_id, node_id, claimed


def requeue(conn: Conn, person: str, node_id: int, reason: str = "dropped") -> procs.Requeue:
    with as_person(conn, person):
        return procs.requeue_node(node_id, reason).one(conn)


def test_the_first_call_records_a_request_and_leaves_the_node(conn: Conn) -> None:
    _, node_id, _ = unknown_after_prepare(conn)
    before = node_row(conn, node_id)
    with as_person(conn, "alice"):
        written = in_one_transaction(
            conn, "SELECT * FROM requeue_node(%s, 'tx dropped from the mempool')", (node_id,)
        )
    [(requeue_id, state, node_state)] = written.rows
    assert (state, node_state) == ("REQUESTED", "UNKNOWN")
    assert node_row(conn, node_id) == before
    assert written.audit == [("node", str(node_id), "requeue_requested", "UNKNOWN", "UNKNOWN")]
    assert written.callbacks == []
    # what the second operator is shown
    shown = conn.execute(
        "SELECT requested_by, reason, evidence -> 'intent' ->> 'signed_tx_hash', still_applies"
        " FROM requeue_requests WHERE requeue_id = %s",
        (requeue_id,),
    ).fetchone()
    assert shown == ("alice", "tx dropped from the mempool", "0xaa", True)


def test_the_requesters_own_confirmation_is_refused_and_audited(conn: Conn) -> None:
    _, node_id, _ = unknown_after_prepare(conn)
    requeue(conn, "alice", node_id)
    before = node_row(conn, node_id)
    with pytest.raises(procs.Refused, match="QT022"):
        requeue(conn, "alice", node_id)
    assert node_row(conn, node_id) == before
    assert conn.execute(
        "SELECT actor, action FROM audit_outbox WHERE entity_id = %s ORDER BY id DESC LIMIT 1",
        (str(node_id),),
    ).fetchone() == ("alice", "requeue_refused")
    assert conn.execute("SELECT count(*) FROM requeue_requests").fetchone() == (1,)


def test_a_second_login_applies_it_and_the_next_claim_makes_a_new_intent(conn: Conn) -> None:
    _, node_id, claimed = unknown_after_prepare(conn)
    requeue(conn, "alice", node_id)
    (rec,) = recovery_claims(conn).values()  # a recovery worker is looking at it meanwhile
    with as_person(conn, "bob"):
        written = in_one_transaction(
            conn, "SELECT * FROM requeue_node(%s, 'confirmed on the explorer')", (node_id,)
        )
    assert [r[1:] for r in written.rows] == [("APPLIED", "READY")]
    assert written.audit == [("node", str(node_id), "requeued", "UNKNOWN", "READY")]
    detail = conn.execute(
        "SELECT actor, detail FROM audit_outbox WHERE action = 'requeued'"
    ).fetchone()
    assert detail is not None and detail[0] == "bob"
    assert detail[1]["requested_by"] == "alice"
    assert detail[1]["evidence"]["intent"]["intent_state"] == "PREPARED"
    assert intent_row(conn, node_id, 1)["intent_state"] == "ABANDONED"
    assert conn.execute("SELECT count(*) FROM requeue_requests").fetchone() == (0,)
    # the recovery claim that was out is fenced
    assert_rejected(
        conn,
        "QT030",
        "SELECT complete_recovery(%s, %s, 'COMPLETED')",
        (node_id, rec["claim_secret"]),
    )
    (again,) = claim(conn)
    assert again["node_id"] == node_id
    assert again["idempotency_key"] != claimed["idempotency_key"]
    submit(conn, again, settled=True)
    assert node_row(conn, node_id)["node_state"] == "COMPLETED"


def test_a_request_against_an_older_intent_goes_stale(conn: Conn) -> None:
    _, node_id, _ = unknown_after_prepare(conn)
    first = requeue(conn, "alice", node_id)
    # the node moved on: requeued by alice and carol, sent again, in doubt again
    requeue(conn, "carol", node_id)
    claimed = claim_of(conn, node_id)
    prepare(conn, claimed, tx_hash="0xbb")
    assert fail(conn, claimed, retryable=True) == "UNKNOWN"
    assert conn.execute(
        "SELECT state FROM node_requeues WHERE id = %s", (first.requeue_id,)
    ).fetchone() == ("APPLIED",)
    again = requeue(conn, "bob", node_id)
    assert again.requeue_state == "REQUESTED"
    # bob's second word is refused; alice's confirms
    with pytest.raises(procs.Refused):
        requeue(conn, "bob", node_id)
    assert requeue(conn, "alice", node_id).node_state == "READY"


def test_a_request_made_against_an_older_intent_goes_stale(conn: Conn) -> None:
    _, node_id, _ = unknown_after_prepare(conn)
    stale = requeue(conn, "alice", node_id)
    # no path gives an UNKNOWN node a newer intent today; the guard is for one that
    # would: written here by hand, a newer PREPARED intent of the same node
    conn.execute(
        """INSERT INTO node_intents (node_id, claim_token, idempotency_key, claimed_by,
                                     intent_state, created_at)
           VALUES (%s, %s, 'newer', 'w9', 'PREPARED', qtg.clock())""",
        (node_id, node_row(conn, node_id)["claim_token"] + 5),
    )
    assert conn.execute("SELECT still_applies FROM requeue_requests").fetchone() == (False,)
    fresh = requeue(conn, "bob", node_id)  # bob's word starts a new request
    assert fresh.requeue_state == "REQUESTED" and fresh.requeue_id != stale.requeue_id
    assert conn.execute(
        "SELECT state FROM node_requeues WHERE id = %s", (stale.requeue_id,)
    ).fetchone() == ("STALE",)


def test_requeue_is_refused_for_any_other_node(conn: Conn) -> None:
    assert_rejected(conn, "QT011", "SELECT * FROM requeue_node(424242, 'x')")
    movement_id = create_started(conn, ONE, "ready")
    ready = node_ids(conn, movement_id)["a"]
    assert_rejected(conn, "QT021", "SELECT * FROM requeue_node(%s, 'x')", (ready,))
    _, node_id, _ = unknown_after_prepare(conn, "doubt")
    for reason in ("", "  ", None):
        assert_rejected(conn, "QT002", "SELECT * FROM requeue_node(%s, %s)", (node_id, reason))


def test_requeue_is_refused_while_the_movement_is_being_stopped(conn: Conn) -> None:
    movement_id, node_id, _ = unknown_after_prepare(conn)
    cancel(conn, movement_id)
    assert_rejected(conn, "QT020", "SELECT * FROM requeue_node(%s, 'x')", (node_id,))


# -- a FAILED node of which nothing happened -----------------------------------------


def failed_in_prepare(
    conn: Conn, the_plan: Any = CHAIN, external_id: str = "f1"
) -> tuple[int, dict[str, int]]:
    """A movement whose root failed before anything of it was prepared (its
    descendants SKIPPED, the movement FAILED): its id and its nodes' ids."""
    movement_id = create_started(conn, the_plan, external_id)
    nodes = node_ids(conn, movement_id)
    assert fail(conn, claim_of(conn, nodes["a"]), retryable=False) == "FAILED"
    return movement_id, nodes


def movement_row(conn: Conn, movement_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT request_state::text, open_nodes, failed_nodes, finished_at IS NULL"
        "  FROM movement_requests WHERE id = %s",
        (movement_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_a_failed_node_that_did_nothing_is_retried_by_two_operators(conn: Conn) -> None:
    movement_id, nodes = failed_in_prepare(conn)
    assert node_row(conn, nodes["b"])["node_state"] == "SKIPPED"
    assert movement_row(conn, movement_id) == ("FAILED", 0, 1, False)
    conn.execute("SELECT * FROM roll_up_pipeline_counts()")  # twice: the fence, then the count
    conn.execute("SELECT * FROM roll_up_pipeline_counts()")
    below = dict(conn.execute("SELECT entity, below_id FROM pipeline_rollups").fetchall())
    assert below["node"] > nodes["b"] and below["movement"] > movement_id  # counted finished
    assert pipeline_counts(conn) == counted_now(conn)

    listed = "SELECT node_id, retry_asked_by FROM retryable_nodes WHERE movement_id = %s"
    assert conn.execute(listed, (movement_id,)).fetchall() == [(nodes["a"], None)]
    asked = requeue(conn, "alice", nodes["a"], "the allowance is raised now")
    assert (asked.requeue_state, asked.node_state) == ("REQUESTED", "FAILED")
    ((_, asker),) = conn.execute(listed, (movement_id,)).fetchall()
    assert asker.startswith("alice")
    assert node_row(conn, nodes["a"])["node_state"] == "FAILED"
    with pytest.raises(procs.Refused) as refused:
        requeue(conn, "alice", nodes["a"], "me again")
    assert refused.value.sqlstate == "QT022"

    applied = requeue(conn, "bob", nodes["a"], "checked the allowance")
    assert (applied.requeue_state, applied.node_state) == ("APPLIED", "READY")
    a, b = node_row(conn, nodes["a"]), node_row(conn, nodes["b"])
    assert (a["node_state"], a["submit_attempts"], a["finished_at"]) == ("READY", 0, None)
    assert (b["node_state"], b["pending_parents"], b["finished_at"]) == ("PENDING", 1, None)
    assert movement_row(conn, movement_id) == ("EXECUTING", 2, 0, True)
    moved = conn.execute(
        "SELECT entity, entity_id, action, from_state, to_state FROM audit_outbox"
        " WHERE request_id = %s AND action IN ('requeued', 'state_changed')"
        "   AND (action = 'requeued'"
        "        OR from_state IN ('SKIPPED', 'FAILED') AND to_state <> 'SKIPPED')"
        " ORDER BY id DESC LIMIT 3",
        (movement_id,),
    ).fetchall()
    assert sorted(moved) == sorted(
        [
            ("node", str(nodes["a"]), "requeued", "FAILED", "READY"),
            ("node", str(nodes["b"]), "state_changed", "SKIPPED", "PENDING"),
            ("request", str(movement_id), "state_changed", "FAILED", "EXECUTING"),
        ]
    )

    # the roll-up no longer counts what runs again
    assert pipeline_counts(conn) == counted_now(conn)

    # the movement then runs to its end as any other; its receiver was told
    # it FAILED, then that it runs again, then that it COMPLETED
    assert submit(conn, claim_of(conn, nodes["a"]), settled=True) == "COMPLETED"
    assert submit(conn, claim_of(conn, nodes["b"]), settled=True) == "COMPLETED"
    assert movement_row(conn, movement_id) == ("COMPLETED", 0, 0, False)
    conn.execute("SELECT * FROM roll_up_pipeline_counts()")
    assert pipeline_counts(conn) == counted_now(conn)
    keys = conn.execute(
        "SELECT idempotency_key FROM callback_outbox WHERE request_id = %s ORDER BY id",
        (movement_id,),
    ).fetchall()
    assert [k[0].split("-", 2)[2] for k in keys][-3:] == [
        "failed",
        "executing-retry1",
        "completed-retry1",
    ]


def pipeline_counts(conn: Conn) -> dict[tuple[str, str], int]:
    rows = conn.execute("SELECT entity, state, total FROM pipeline_counts").fetchall()
    return {(str(e), str(s)): int(t) for e, s, t in rows if t}


def counted_now(conn: Conn) -> dict[tuple[str, str], int]:
    """What pipeline_counts must say: every row counted as it is now."""
    rows = conn.execute(
        "SELECT 'movement', request_state::text, count(*) FROM movement_requests GROUP BY 2"
        " UNION ALL"
        " SELECT 'node', node_state::text, count(*) FROM movement_request_nodes GROUP BY 2"
    ).fetchall()
    return {(str(e), str(s)): int(t) for e, s, t in rows}


def test_a_failed_node_whose_side_effect_was_prepared_is_never_retried(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "f-prepared")
    node_id = node_ids(conn, movement_id)["a"]
    claimed = claim_of(conn, node_id)
    prepare(conn, claimed)
    assert submit(conn, claimed) == "SUBMITTED"
    set_clock(conn, 3600)  # its observation due
    assert observe(conn, node_id, "FAILED") is not None  # the send reverted
    assert node_row(conn, node_id)["node_state"] == "FAILED"
    listed = conn.execute("SELECT node_id FROM retryable_nodes WHERE node_id = %s", (node_id,))
    assert listed.fetchall() == []
    refused = assert_rejected(conn, "QT021", REQUEUE, (node_id,))
    assert "may have happened" in str(refused)


REQUEUE = "SELECT * FROM requeue_node(%s, 'why')"


TWO_ROOTS_THEN_ONE = plan(node("a"), node("c"), node("d", depends_on=["a", "c"]))


def two_failed_roots(conn: Conn, external_id: str) -> tuple[int, dict[str, int]]:
    """A movement whose two roots were claimed together and both failed in
    their prepare; the step after both SKIPPED."""
    movement_id = create_started(conn, TWO_ROOTS_THEN_ONE, external_id)
    nodes = node_ids(conn, movement_id)
    claims = {c["node_id"]: c for c in claim(conn)}
    for key in ("a", "c"):
        assert fail(conn, claims[nodes[key]], retryable=False) == "FAILED"
    assert node_row(conn, nodes["d"])["node_state"] == "SKIPPED"
    return movement_id, nodes


def test_a_movements_failed_nodes_are_retried_together(conn: Conn) -> None:
    movement_id, nodes = two_failed_roots(conn, "f-two")
    assert movement_row(conn, movement_id) == ("FAILED", 0, 2, False)
    listed = "SELECT node_id FROM retryable_nodes WHERE movement_id = %s ORDER BY 1"
    assert conn.execute(listed, (movement_id,)).fetchall() == [(nodes["a"],), (nodes["c"],)]

    # asking for one asks for both; its asker cannot apply either
    asked_for = requeue(conn, "alice", nodes["a"], "the allowance is raised")
    assert asked_for.requeue_state == "REQUESTED"
    asked = conn.execute(
        "SELECT node_id, state, left(requested_by, 5) FROM node_requeues"
        " WHERE request_id = %s ORDER BY node_id",
        (movement_id,),
    ).fetchall()
    assert asked == [(nodes["a"], "REQUESTED", "alice"), (nodes["c"], "REQUESTED", "alice")]
    for key in ("a", "c"):
        with pytest.raises(procs.Refused) as refused:
            requeue(conn, "alice", nodes[key], "me again")
        assert refused.value.sqlstate == "QT022"

    # another operator, naming the other node, applies both
    applied = requeue(conn, "bob", nodes["c"], "checked the allowance")
    assert (applied.requeue_state, applied.node_state) == ("APPLIED", "READY")
    states = {k: node_row(conn, n) for k, n in nodes.items()}
    assert {k: r["node_state"] for k, r in states.items()} == {
        "a": "READY",
        "c": "READY",
        "d": "PENDING",
    }
    assert states["d"]["pending_parents"] == 2
    assert movement_row(conn, movement_id) == ("EXECUTING", 3, 0, True)
    # the movement runs again once, for both, and says so
    reopened = conn.execute(
        "SELECT detail -> 'retried_nodes' FROM audit_outbox WHERE entity = 'request'"
        " AND request_id = %s AND from_state = 'FAILED' AND to_state = 'EXECUTING'",
        (movement_id,),
    ).fetchall()
    assert reopened == [([nodes["a"], nodes["c"]],)]
    assert pipeline_counts(conn) == counted_now(conn)

    # and the movement runs to its end
    claims = {c["node_id"]: c for c in claim(conn)}
    for key in ("a", "c"):
        assert submit(conn, claims[nodes[key]], settled=True) == "COMPLETED"
    assert submit(conn, claim_of(conn, nodes["d"]), settled=True) == "COMPLETED"
    assert movement_row(conn, movement_id) == ("COMPLETED", 0, 0, False)


def test_a_failed_node_that_may_have_happened_holds_back_the_others(conn: Conn) -> None:
    movement_id = create_started(conn, TWO_ROOTS_THEN_ONE, "f-one-sent")
    nodes = node_ids(conn, movement_id)
    claims = {c["node_id"]: c for c in claim(conn)}
    assert fail(conn, claims[nodes["a"]], retryable=False) == "FAILED"
    prepare(conn, claims[nodes["c"]])  # c's side effect was prepared: it may have happened
    assert fail(conn, claims[nodes["c"]], retryable=False) == "FAILED"
    assert (
        conn.execute(
            "SELECT node_id FROM retryable_nodes WHERE movement_id = %s", (movement_id,)
        ).fetchall()
        == []
    )
    before = conn.execute("SELECT count(*) FROM node_requeues").fetchone()
    refused = str(assert_rejected(conn, "QT021", REQUEUE, (nodes["a"],)))
    assert f"node {nodes['c']} is not" in refused and "may have happened" in refused
    assert conn.execute("SELECT count(*) FROM node_requeues").fetchone() == before


def test_a_request_for_part_of_the_failures_goes_stale(conn: Conn) -> None:
    """Asked while one root had failed and the other was in flight; the
    other failed after: the request no longer covers the movement's
    failures, so the next call asks anew for both."""
    movement_id = create_started(conn, TWO_ROOTS_THEN_ONE, "f-later")
    nodes = node_ids(conn, movement_id)
    claims = {c["node_id"]: c for c in claim(conn)}
    assert fail(conn, claims[nodes["a"]], retryable=False) == "FAILED"
    assert requeue(conn, "alice", nodes["a"]).requeue_state == "REQUESTED"
    applies = "SELECT still_applies FROM requeue_requests WHERE node_id = %s"
    assert conn.execute(applies, (nodes["a"],)).fetchone() == (True,)
    assert fail(conn, claims[nodes["c"]], retryable=False) == "FAILED"
    # the request no longer covers the movement's failures: it says so
    assert conn.execute(applies, (nodes["a"],)).fetchone() == (False,)
    assert requeue(conn, "bob", nodes["a"]).requeue_state == "REQUESTED"
    assert conn.execute(
        "SELECT node_id, state, left(requested_by, 5) FROM node_requeues"
        " WHERE request_id = %s ORDER BY id",
        (movement_id,),
    ).fetchall() == [
        (nodes["a"], "STALE", "alice"),
        (nodes["a"], "REQUESTED", "bob"),
        (nodes["c"], "REQUESTED", "bob"),
    ]
    assert requeue(conn, "alice", nodes["c"]).requeue_state == "APPLIED"
    assert node_row(conn, nodes["a"])["node_state"] == "READY"


def test_a_retry_is_refused_after_three_or_once_cancelled(conn: Conn) -> None:
    _, nodes = failed_in_prepare(conn, ONE, "f-thrice")
    for _ in range(3):
        requeue(conn, "alice", nodes["a"])
        assert requeue(conn, "bob", nodes["a"]).requeue_state == "APPLIED"
        assert fail(conn, claim_of(conn, nodes["a"]), retryable=False) == "FAILED"
    assert "3 times" in str(assert_rejected(conn, "QT021", REQUEUE, (nodes["a"],)))

    # one root failed while the other is in flight, then the movement cancelled
    both = node_ids(conn, create_started(conn, plan(node("a"), node("c")), "f-cancelled"))
    claims = {c["node_id"]: c for c in claim(conn)}
    assert fail(conn, claims[both["a"]], retryable=False) == "FAILED"
    cancel(conn, movement_of(conn, both["a"]))
    assert_rejected(conn, "QT020", REQUEUE, (both["a"],))


def movement_of(conn: Conn, node_id: int) -> int:
    row = conn.execute(
        "SELECT request_id FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_retry_is_refused_past_the_movements_expiry(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "f-expiring", expires_at=iso_at(600))
    node_id = node_ids(conn, movement_id)["a"]
    assert fail(conn, claim_of(conn, node_id), retryable=False) == "FAILED"
    requeue(conn, "alice", node_id)
    set_clock(conn, 700)
    refused = assert_rejected(conn, "QT020", REQUEUE, (node_id,))
    assert "past its expiry" in str(refused)
    assert movement_row(conn, movement_id)[0] == "FAILED"


def test_a_node_with_any_trace_of_a_send_is_never_retried(conn: Conn) -> None:
    """A submit reported without its intent recorded (a runner that skipped
    record_intent_prepared), then recovery's FAILED: the node carries its
    external reference, so it may have happened."""
    movement_id = create_started(conn, ONE, "f-traced")
    node_id = node_ids(conn, movement_id)["a"]
    claimed = claim_of(conn, node_id)
    assert submit(conn, claimed) == "SUBMITTED"
    set_clock(conn, 3600)
    assert observe(conn, node_id, "UNKNOWN") is not None
    (recovery,) = recovery_claims(conn).values()
    procs.complete_recovery(node_id, recovery["claim_secret"], "FAILED", {"reverted": True}).one(
        conn
    )
    assert node_row(conn, node_id)["node_state"] == "FAILED"
    assert "may have happened" in str(assert_rejected(conn, "QT021", REQUEUE, (node_id,)))


def test_a_retry_applies_inside_a_savepoint(conn: Conn) -> None:
    """As psql's ON_ERROR_ROLLBACK does: the apply inside a savepoint of a
    transaction."""
    movement_id, nodes = failed_in_prepare(conn, ONE, "f-savepoint")
    requeue(conn, "alice", nodes["a"])
    with conn.transaction(), conn.transaction():
        assert requeue(conn, "bob", nodes["a"]).requeue_state == "APPLIED"
    assert movement_row(conn, movement_id)[0] == "EXECUTING"
