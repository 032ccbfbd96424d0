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

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    assert_rejected,
    bind,
    claim,
    create_started,
    in_one_transaction,
    node,
    node_ids,
    node_states,
    observe,
    pin_clock,
    plan,
    request_state,
)
from rows import (
    CHAIN,
    Conn,
    iso_at,
    node_row,
    plant_rule,
    recovery_claims,
    request_row,
    state_changes,
    submitted,
    time_at,
)

from qtg_runner.db import procs


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


# --- complete_observe_batch -------------------------------------------------------------------

FOUR = plan(node("a"), node("b"), node("c"), node("d"))


def four_submitted(conn: Conn) -> tuple[int, dict[str, int]]:
    """A started movement of four independent nodes, all SUBMITTED at T0."""
    movement_id = create_started(conn, FOUR, "m4")
    for claimed in claim(conn, "dispatcher", 10):
        procs.complete_submit(claimed["node_id"], claimed["claim_secret"], "ref").one(conn)
    return movement_id, node_ids(conn, movement_id)


def observe_batch(
    conn: Conn, ids: list[int], outcomes: list[str], secrets: dict[int, str] | None = None
) -> Any:
    """claim_observe_batch + complete_observe_batch in one transaction, with what
    it wrote; ``secrets`` replaces the claim's secret of a node."""
    with conn.transaction():
        claims = procs.claim_observe_batch(ids, "obs").all(conn)
        assert [c.node_id for c in claims] == sorted(ids)
        given = {c.node_id: c.claim_secret for c in claims} | (secrets or {})
        return in_one_transaction(
            conn,
            "SELECT node_id, node_state::text, observe_phase::text, next_observe_at, error_code"
            " FROM complete_observe_batch(%s, %s, %s)",
            (ids, [given[i] for i in ids], outcomes),
        )


def test_a_batch_reports_each_node_by_its_outcome(conn: Conn) -> None:
    movement_id, ids = four_submitted(conn)
    a, b, c, d = ids["a"], ids["b"], ids["c"], ids["d"]
    pin_clock(conn, iso_at(42))
    written = observe_batch(conn, [d, a, b, c], ["ERROR", "PENDING", "COMPLETED", "FAILED"])
    # one row per element, in the order given; ERROR looks again after the
    # lane's observe_error_retry_seconds (5 s), PENDING at the lane's pace
    assert written.rows == [
        (d, "OBSERVING", "pre_baseline", time_at(47), None),
        (a, "OBSERVING", "pre_baseline", time_at(48), None),
        (b, "COMPLETED", "pre_baseline", None, None),
        (c, "FAILED", "pre_baseline", None, None),
    ]
    assert state_changes(written.audit) == {
        ("node", str(d), "state_changed", "SUBMITTED", "OBSERVING"),
        ("node", str(a), "state_changed", "SUBMITTED", "OBSERVING"),
        ("node", str(b), "state_changed", "SUBMITTED", "COMPLETED"),
        ("node", str(c), "state_changed", "SUBMITTED", "FAILED"),
    }
    assert {node_row(conn, n)["observe_count"] for n in (a, b, c, d)} == {1}
    assert request_row(conn, movement_id)["open_nodes"] == 2
    # a node observed again in its state writes no audit row
    pin_clock(conn, iso_at(80))
    again = observe_batch(conn, [a, d], ["PENDING", "PENDING"])
    assert [row[1] for row in again.rows] == ["OBSERVING", "OBSERVING"]
    assert state_changes(again.audit) == set()
    # the last two finish the movement, which FAILED with its node c
    pin_clock(conn, iso_at(90))
    observe_batch(conn, [a, d], ["COMPLETED", "COMPLETED"])
    assert request_state(conn, movement_id) == "FAILED"


def test_a_batch_refuses_a_node_in_its_row_and_reports_the_others(conn: Conn) -> None:
    _, ids = four_submitted(conn)
    a, b, c, d = ids["a"], ids["b"], ids["c"], ids["d"]
    pin_clock(conn, iso_at(42))
    before = {n: node_row(conn, n) for n in (b, c, d)}
    written = observe_batch(
        conn, [a, b, c, d], ["COMPLETED", "DONE", "PENDING", "PENDING"], {c: "f" * 64}
    )
    codes = {row[0]: row[4] for row in written.rows}
    assert codes == {a: None, b: "QT002", c: "QT030", d: None}
    assert node_row(conn, a)["node_state"] == "COMPLETED"
    assert node_row(conn, d)["node_state"] == "OBSERVING"
    for refused in (b, c):  # unchanged, but for the claim the batch's own claim made
        row, was = node_row(conn, refused), before[refused]
        assert (row["node_state"], row["observe_count"], row["next_observe_at"]) == (
            was["node_state"],
            was["observe_count"],
            was["next_observe_at"],
        )
    assert {change[1] for change in state_changes(written.audit)} == {str(a), str(d)}


def test_a_batch_report_the_engine_cannot_apply_is_refused_alone(conn: Conn) -> None:
    _, ids = four_submitted(conn)
    plant_rule(conn, "movement_request_nodes", f"NEW.id = {ids['b']} AND NEW.observe_count > 0")
    pin_clock(conn, iso_at(42))
    order = [ids["a"], ids["b"], ids["c"]]
    written = observe_batch(conn, order, ["PENDING", "PENDING", "COMPLETED"])
    assert [(row[1], row[4]) for row in written.rows] == [
        ("OBSERVING", None),
        (None, "QT050"),
        ("COMPLETED", None),
    ]
    assert node_row(conn, ids["b"])["observe_count"] == 0


def test_a_batch_with_arrays_of_unequal_length_changes_nothing(conn: Conn) -> None:
    _, ids = four_submitted(conn)
    assert_rejected(
        conn,
        "QT002",
        "SELECT * FROM complete_observe_batch(%s, %s, %s)",
        ([ids["a"], ids["b"]], ["f" * 64, "f" * 64], ["PENDING"]),
    )


def test_a_runner_may_observe_in_chunks_and_an_operator_may_not(
    db: TestDatabase, conn: Conn
) -> None:
    _, ids = four_submitted(conn)
    a = ids["a"]
    operator = bind(db.connect(db.operator_dsn("testnet")))
    pin_clock(operator, iso_at(42))
    before = node_row(conn, a)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        operator.execute("SELECT * FROM claim_observe_batch(%s, 'obs')", ([a],))
    operator.rollback()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        operator.execute(
            "SELECT * FROM complete_observe_batch(%s, %s, '{COMPLETED}')", ([a], ["f" * 64])
        )
    operator.rollback()
    assert node_row(conn, a) == before

    runner = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(runner, iso_at(42))
    with runner.transaction():
        [claimed] = procs.claim_observe_batch([a], "obs").all(runner)
        [row] = procs.complete_observe_batch([a], [claimed.claim_secret], ["COMPLETED"]).all(runner)
    assert (row.node_state, row.error_code) == (procs.NodeState.COMPLETED, None)
