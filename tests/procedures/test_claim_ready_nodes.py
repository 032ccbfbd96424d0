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
    RECEIVER,
    Written,
    approve,
    assert_rejected,
    claim,
    create,
    create_started,
    in_one_transaction,
    node_ids,
    node_states,
)
from psycopg.types.json import Jsonb
from rows import CHAIN, DIAMOND, ONE, Conn, intent_row, node_row, request_row, set_clock, time_at

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
    approve(conn, create(conn, ONE, "m2"))  # a bad p_start starts nothing either
    for worker, p_max, lease, start in [
        ("", 10, 300, 0),
        (None, 10, 300, 0),
        ("w1", 0, 300, 0),
        ("w1", 1001, 300, 0),
        ("w1", 10, 0, 0),
        ("w1", 10, None, 0),
        ("w1", 10, 300, -1),
        ("w1", 10, 300, 10001),
        ("w1", 10, 300, None),
    ]:
        assert_rejected(
            conn,
            "QT002",
            "SELECT * FROM claim_ready_nodes(%s, %s, %s, p_start => %s)",
            (worker, p_max, lease, start),
        )


def _claim_starting(conn: Conn, p_max: int, p_start: int) -> tuple[Written, int]:
    """claim_ready_nodes(p_start) in one transaction: what it returned and
    wrote to the outboxes, and its row writes to the nodes' table (the growth
    of the backend's counts, which may hold earlier transactions' not yet
    reported, within the transaction)."""
    count = (
        "SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_xact_user_tables"
        " WHERE schemaname = current_schema() AND relname = 'movement_request_nodes'"
    )
    with conn.transaction():
        before = conn.execute(count).fetchone()
        written = in_one_transaction(
            conn,
            "SELECT node_id, node_key, request_id FROM claim_ready_nodes('w1', %s, 60,"
            " p_start => %s)",
            (p_max, p_start),
        )
        after = conn.execute(count).fetchone()
    assert before is not None and after is not None
    return written, after[0] - before[0]


def test_a_claim_that_starts_movements_claims_their_roots_written_once(conn: Conn) -> None:
    """APPROVED -> EXECUTING and root PENDING -> SUBMITTING in one call: the
    movement started as start_approved_movements starts it (audited, its
    movement.executing callback), the root claimed with its intent in one row
    write, its PENDING -> READY audited before its claim; the nodes behind the
    root stay PENDING, and a movement not approved is not started."""
    movement_id = create(conn, DIAMOND, "m1")
    approve(conn, movement_id)
    waiting = create(conn, ONE, "m2")
    written, node_writes = _claim_starting(conn, 10, 10)
    a = node_ids(conn, movement_id)["a"]
    assert [(node_id, key) for node_id, key, _ in written.rows] == [(a, "a")]
    assert written.audit == [
        ("request", str(movement_id), "state_changed", "APPROVED", "EXECUTING"),
        ("node", str(a), "state_changed", "PENDING", "READY"),
        ("node", str(a), "state_changed", "READY", "SUBMITTING"),
    ]
    assert written.callbacks == [(movement_id, "movement.executing")]
    assert node_writes == 1
    assert request_row(conn, movement_id)["request_state"] == "EXECUTING"
    assert node_states(conn, movement_id) == {
        "a": "SUBMITTING",
        "b": "PENDING",
        "c": "PENDING",
        "d": "PENDING",
    }
    assert intent_row(conn, a, 1)["intent_state"] == "CLAIMED"
    assert request_row(conn, waiting)["request_state"] == "PENDING_APPROVAL"


def test_started_roots_and_ready_nodes_share_the_batch_by_priority(conn: Conn) -> None:
    """The roots of the movements a claim starts compete with the READY nodes
    by priority, then age; a root the batch has no room for is left READY,
    audited, for the next claim (a second dispatcher is woken for it)."""
    ready = create_started(conn, ONE, "ready")  # priority 0, READY before the others
    ids = {}
    for external_id, priority in (("urgent", 5), ("later", 0)):
        row = conn.execute(
            "SELECT movement_id FROM create_movement(%s, 1, %s::jsonb, p_priority => %s,"
            " p_callback_url => %s)",
            (external_id, Jsonb(ONE), priority, RECEIVER),
        ).fetchone()
        assert row is not None
        ids[external_id] = row[0]
        approve(conn, row[0])
    conn.execute("LISTEN qtg_testnet_work")
    written, node_writes = _claim_starting(conn, 2, 10)
    assert [request for _, _, request in written.rows] == [ids["urgent"], ready]
    later = node_ids(conn, ids["later"])["a"]
    assert node_row(conn, later)["node_state"] == "READY"
    assert ("node", str(later), "state_changed", "PENDING", "READY") in written.audit
    assert ("node", str(later), "state_changed", "READY", "SUBMITTING") not in written.audit
    assert {m for m, _ in written.callbacks} == {ids["urgent"], ids["later"]}
    assert node_writes == 3  # the ready node's claim, the urgent root's, the later root's READY
    assert [n.payload for n in conn.notifies(timeout=0)] == ["ready"]
    [next_claim] = claim(conn)
    assert next_claim["node_id"] == later


def test_a_started_root_a_claim_may_not_take_waits_ready(conn: Conn) -> None:
    """The claim's rules hold for the roots it starts: one whose executor is
    DOWN starts its movement and waits READY, its attempts untouched."""
    movement_id = create(conn, ONE, "m1")
    approve(conn, movement_id)
    procs.report_executor_health("sim", "DOWN", {"reason": "rpc unreachable"}, "health").one(conn)
    written, _ = _claim_starting(conn, 10, 10)
    assert written.rows == []
    assert request_row(conn, movement_id)["request_state"] == "EXECUTING"
    row = node_row(conn, node_ids(conn, movement_id)["a"])
    assert (row["node_state"], row["submit_attempts"]) == ("READY", 0)


def test_a_claim_that_starts_movements_commits_synchronously(conn: Conn) -> None:
    """The dispatcher's claim commits asynchronously (node_dispatcher.
    asynchronous_commit); one that started movements sets synchronous_commit
    back on for its transaction: their callbacks leave the database. One that
    started none leaves the caller's setting."""
    create_started(conn, ONE, "m1")
    approve(conn, create(conn, ONE, "m2"))
    for start, mode in ((0, "off"), (10, "on")):
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            claimed = procs.claim_ready_nodes("w1", 10, start=start).all(conn)
            assert len(claimed) == 1
            assert conn.execute("SHOW synchronous_commit").fetchone() == (mode,)


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
