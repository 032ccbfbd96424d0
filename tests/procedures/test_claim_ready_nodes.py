"""claim_ready_nodes: READY -> SUBMITTING, with an intent row and a lease.

Pins: the claim hands out a secret (64 hex characters; the node keeps only its
SHA-256) and bumps the claim counter (claim_token), the worker, claim time and
lease are recorded, an intent (CLAIMED, idempotency key t<node>x<counter>) is
written before anything
is signed, the transition is audited with no callback, and a node whose parent
has not completed is never claimed; bad arguments are refused (QT002).
Concurrent claims are in scenarios/test_concurrency.py.

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal

from engine import (
    assert_rejected,
    claim,
    create_started,
    in_one_transaction,
    node_ids,
    node_states,
)
from rows import CHAIN, DIAMOND, ONE, Conn, intent_row, node_row, set_clock, time_at

from qtg_runner.db import procs


def test_claim_moves_ready_to_submitting_with_an_intent_and_a_lease(conn: Conn) -> None:
    movement_id = create_started(conn, CHAIN, "m1", amount="12.5")
    a = node_ids(conn, movement_id)["a"]
    written = in_one_transaction(
        conn,
        "SELECT node_id, claim_secret, idempotency_key, node_key,"
        " has_side_effect, amount, asset, attempt"
        " FROM claim_ready_nodes('w1', 10, 60)",
    )
    [(_, secret, *rest)] = written.rows
    assert [a, *rest] == [a, f"t{a}x1", "a", True, Decimal("12.5"), "USDC", 1]
    assert re.fullmatch("[0-9a-f]{64}", secret)
    row = node_row(conn, a)
    assert (row["node_state"], row["claim_token"], row["claimed_by"]) == ("SUBMITTING", 1, "w1")
    assert row["claim_hash"] == hashlib.sha256(secret.encode()).digest()
    assert (row["claimed_at"], row["lease_until"], row["submit_attempts"]) == (
        time_at(0),
        time_at(60),
        1,
    )
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


def test_a_child_is_handed_what_its_parents_left(conn: Conn) -> None:
    """READY -> SUBMITTING for a node with parents: the claim carries each
    parent's executor, external reference and evidence by parent key (a mint
    takes its burn's attested message from there); a root node gets None."""
    movement_id = create_started(conn, DIAMOND, "m1")
    ids = node_ids(conn, movement_id)
    [root] = claim(conn)
    assert root["inputs"] is None
    procs.complete_submit(ids["a"], root["claim_secret"], "0xburn", {"message": "0x01"}, True).one(
        conn
    )
    middle = {row["node_key"]: row for row in claim(conn)}
    assert set(middle) == {"b", "c"}
    for row in middle.values():
        assert row["inputs"] == {
            "a": {"executor_key": "sim", "external_ref": "0xburn", "evidence": {"message": "0x01"}}
        }
    procs.complete_submit(ids["b"], middle["b"]["claim_secret"], "ref-b", {"minted": 1}, True).one(
        conn
    )
    # no evidence: the parent is listed all the same
    procs.complete_submit(ids["c"], middle["c"]["claim_secret"], "ref-c", None, True).one(conn)
    [last] = claim(conn)
    assert last["node_key"] == "d"
    assert last["inputs"] == {
        "b": {"executor_key": "sim", "external_ref": "ref-b", "evidence": {"minted": 1}},
        "c": {"executor_key": "sim", "external_ref": "ref-c", "evidence": None},
    }


def test_a_down_executors_nodes_stay_ready_with_their_attempts(conn: Conn) -> None:
    """READY stays READY while the executor's latest report (within five minutes)
    is DOWN: no claim, no attempt used, the reason in stuck_nodes and
    executor_status. DEGRADED claims; a stale DOWN no longer holds."""
    movement_id = create_started(conn, ONE, "m1")
    a = node_ids(conn, movement_id)["a"]
    procs.report_executor_health("sim", "DOWN", {"reason": "rpc unreachable"}, "health").one(conn)
    assert claim(conn) == []
    row = node_row(conn, a)
    assert (row["node_state"], row["submit_attempts"], row["claim_token"]) == ("READY", 0, 0)
    [(reason,)] = conn.execute("SELECT reason FROM stuck_nodes WHERE node_id = %s", (a,)).fetchall()
    assert reason.startswith("executor sim is DOWN") and "rpc unreachable" in reason
    status = conn.execute(
        "SELECT status, holding_claims, ready_nodes FROM executor_status WHERE executor_key = 'sim'"
    ).fetchone()
    assert status == ("DOWN", True, 1)

    procs.report_executor_health("sim", "DEGRADED", {}, "health").one(conn)
    [claimed] = claim(conn)
    assert claimed["node_id"] == a

    create_started(conn, ONE, "m2")
    procs.report_executor_health("sim", "DOWN", {}, "health").one(conn)
    assert claim(conn) == []
    set_clock(conn, 301)  # the DOWN report is stale: its reporter is gone
    assert [c["node_key"] for c in claim(conn)] == ["a"]
    assert conn.execute(
        "SELECT status, holding_claims FROM executor_status WHERE executor_key = 'sim'"
    ).fetchone() == ("stale", False)
