"""complete_observe: SUBMITTED/OBSERVING -> OBSERVING, COMPLETED, FAILED or UNKNOWN.

Pins: a PENDING observation moves SUBMITTED to OBSERVING, its next observation
paced by the lane; COMPLETED completes the node, readies its children and, on
the last node, completes the request; FAILED fails the node, skips its
dependants and fails the request; UNKNOWN hands the node to recovery unless the
executor gave a retry hint; an observation past the lane's fatal factor goes
UNKNOWN; bad arguments are refused (QT002). Each observation is claim_observe
then complete_observe in one transaction, as the observer does. The pacing
rules themselves are in test_complete_observe_pacing.py.

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
    in_one_transaction,
    node_ids,
    node_states,
    observe,
    pin_clock,
    request_state,
)
from rows import (
    CHAIN,
    Conn,
    iso_at,
    node_row,
    recovery_claims,
    request_row,
    state_changes,
    submitted,
    time_at,
)


def observe_logged(conn: Conn, node_id: int, outcome: str, hint: float | None = None) -> Any:
    """claim_observe + complete_observe in one transaction, with what it wrote."""
    return in_one_transaction(
        conn,
        "SELECT o.node_state::text, o.observe_phase::text, o.next_observe_at"
        " FROM claim_observe(%s, 'obs') c,"
        " complete_observe(c.node_id, c.claim_secret, %s, NULL, %s) o",
        (node_id, outcome, hint),
    )


def test_observe_pending_moves_submitted_to_observing_paced_by_the_lane(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, iso_at(42))
    written = observe_logged(conn, node_id, "PENDING")
    # pre-baseline: the first poll was at 0.7 * 60 s, then every 0.1 * 60 s
    assert written.rows == [("OBSERVING", "pre_baseline", time_at(48))]
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTED", "OBSERVING")]
    row = node_row(conn, node_id)
    assert (row["node_state"], row["observe_count"], row["last_observed_at"]) == (
        "OBSERVING",
        1,
        time_at(42),
    )
    pin_clock(conn, iso_at(200))  # over baseline (2x): polls back off with elapsed time
    assert observe(conn, node_id, "PENDING") == {
        "node_state": "OBSERVING",
        "observe_phase": "over_baseline",
        "next_observe_at": time_at(220),
    }


def test_observe_completed_completes_the_node_and_readies_its_child(conn: Conn) -> None:
    movement_id, node_id = submitted(conn, CHAIN)
    pin_clock(conn, iso_at(42))
    written = observe_logged(conn, node_id, "COMPLETED")
    assert written.rows == [("COMPLETED", "pre_baseline", None)]
    b = node_ids(conn, movement_id)["b"]
    assert state_changes(written.audit) == {
        ("node", str(node_id), "state_changed", "SUBMITTED", "COMPLETED"),
        ("node", str(b), "state_changed", "PENDING", "READY"),
    }
    assert node_row(conn, node_id)["finished_at"] == time_at(42)
    assert node_row(conn, node_id)["next_observe_at"] is None
    assert written.callbacks == []
    assert request_row(conn, movement_id)["open_nodes"] == 1


def test_observe_completed_on_the_last_node_completes_the_request(conn: Conn) -> None:
    movement_id, node_id = submitted(conn)
    pin_clock(conn, iso_at(42))
    written = observe_logged(conn, node_id, "COMPLETED")
    assert request_state(conn, movement_id) == "COMPLETED"
    assert ("request", str(movement_id), "state_changed", "EXECUTING", "COMPLETED") in written.audit
    assert written.callbacks == [(movement_id, "movement.completed")]


def test_observe_failed_fails_the_node_and_the_request(conn: Conn) -> None:
    movement_id, node_id = submitted(conn, CHAIN)
    pin_clock(conn, iso_at(42))
    written = observe_logged(conn, node_id, "FAILED")
    assert written.rows == [("FAILED", "pre_baseline", None)]
    assert node_states(conn, movement_id) == {"a": "FAILED", "b": "SKIPPED"}
    assert request_row(conn, movement_id)["failed_nodes"] == 1
    assert ("request", str(movement_id), "state_changed", "EXECUTING", "FAILED") in written.audit
    assert written.callbacks == [(movement_id, "movement.failed")]


def test_observe_unknown_hands_the_node_to_recovery(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, iso_at(42))
    written = observe_logged(conn, node_id, "UNKNOWN")
    assert written.rows == [("UNKNOWN", "pre_baseline", None)]
    assert written.audit == [("node", str(node_id), "state_changed", "SUBMITTED", "UNKNOWN")]
    row = node_row(conn, node_id)
    assert (row["next_observe_at"], row["lease_until"]) == (None, time_at(42))
    assert claim(conn) == []
    assert set(recovery_claims(conn)) == {node_id}


def test_observe_unknown_with_a_retry_hint_looks_again(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, iso_at(42))
    assert observe_logged(conn, node_id, "UNKNOWN", hint=30).rows == [
        ("OBSERVING", "pre_baseline", time_at(72))
    ]


def test_observing_past_the_fatal_factor_goes_to_unknown(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, iso_at(600))  # 10x the 60 s baseline
    assert observe_logged(conn, node_id, "PENDING").rows == [("UNKNOWN", "fatal", None)]
    assert node_row(conn, node_id)["lease_until"] == time_at(600)


def test_complete_observe_rejects_bad_arguments(conn: Conn) -> None:
    _, node_id = submitted(conn)
    for outcome, hint in [("DONE", None), (None, None), ("PENDING", -1)]:
        assert_rejected(
            conn,
            "QT002",
            "SELECT * FROM complete_observe(%s, repeat('0', 64), %s, NULL, %s)",
            (node_id, outcome, hint),
        )
