"""set_priority: an operator reprioritises a movement that has not finished.

The movement's priority and that of each node not yet finished become the new
one, so that the dispatcher's claim (READY nodes by priority DESC, id) and the
start of approved movements (by priority DESC, id) take it before the others;
a finished node keeps the priority it ran with. One operator's call (their
own login: session_user) with a reason, audited ('priority_set', entity
request, from and to the priority, the reason). The same priority again
writes nothing. Refused, nothing changed: an unknown movement (QT010), a
finished one (QT020), no priority or no reason (QT002), a reason beyond
engine_limits (QT005); runner and reader logins may not call it (42501), in
either form (the function and CALL movement_priority).
"""

from __future__ import annotations

from conftest import TestDatabase
from engine import (
    as_person,
    assert_rejected,
    bind,
    cancel,
    claim,
    create,
    create_started,
    in_one_transaction,
    node,
    node_ids,
    pin_clock,
    plan,
    submit,
)
from rows import Conn, iso_at

from qtg_runner.db import procs

SET = "SELECT set_priority(%s, %s, %s)"
CALL = "CALL movement_priority(%s, %s, %s)"
THREE = plan(node("a"), node("b", ["a"]), node("c", ["b"]))


def priorities(conn: Conn, movement_id: int) -> tuple[int, dict[str, int]]:
    """The movement's priority and its nodes' by key."""
    row = conn.execute(
        "SELECT priority FROM movement_requests WHERE id = %s", (movement_id,)
    ).fetchone()
    assert row is not None
    nodes = conn.execute(
        "SELECT node_key, priority FROM movement_request_nodes WHERE request_id = %s",
        (movement_id,),
    ).fetchall()
    return row[0], dict(nodes)


def test_a_priority_set_moves_the_movement_and_its_unfinished_nodes(conn: Conn) -> None:
    movement = create_started(conn, THREE, "sp-1")
    [a] = claim(conn, "dispatcher-1")
    submit(conn, a, settled=True)  # a COMPLETED, b READY, c PENDING

    with as_person(conn, "alice"):
        written = in_one_transaction(conn, SET, (movement, 10, "payroll is due at noon"))

    assert written.rows == [(10,)]
    assert written.audit == [("request", str(movement), "priority_set", "0", "10")]
    assert written.callbacks == []
    assert priorities(conn, movement) == (10, {"a": 0, "b": 10, "c": 10})
    actor, detail = conn.execute(
        "SELECT actor, detail FROM audit_outbox WHERE action = 'priority_set'"
    ).fetchone() or (None, None)
    assert actor == "alice"
    assert detail == {"reason": "payroll is due at noon", "state": "EXECUTING", "nodes": 2}

    # lower again, by another login: any operator may
    with as_person(conn, "bob"):
        assert conn.execute(CALL, (movement, -5, "it can wait")).fetchone() == (-5,)
    assert priorities(conn, movement) == (-5, {"a": 0, "b": -5, "c": -5})


def test_the_same_priority_again_writes_nothing(conn: Conn) -> None:
    movement = create(conn, plan(node("a")), "sp-same")
    with as_person(conn, "alice"):
        conn.execute(SET, (movement, 3, "first"))
        again = in_one_transaction(conn, SET, (movement, 3, "asked twice"))
        assert again.rows == [(3,)] and again.audit == []
        assert conn.execute(CALL, (movement, 3, "and once more")).fetchone() == (3,)
    assert conn.execute(
        "SELECT count(*) FROM audit_outbox WHERE action = 'priority_set'"
    ).fetchone() == (1,)


def test_a_raised_priority_is_claimed_first(conn: Conn, db: TestDatabase) -> None:
    first = create_started(conn, plan(node("a")), "sp-first")
    later = create_started(conn, plan(node("a")), "sp-later")
    first_node, later_node = node_ids(conn, first)["a"], node_ids(conn, later)["a"]
    assert first_node < later_node  # by id alone, the first is claimed first

    operator = bind(db.connect(db.operator_dsn("testnet")))
    pin_clock(operator, iso_at(0))
    assert procs.set_priority(later, 1, "the later one is urgent").one(operator) == 1

    runner = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(runner, iso_at(0))
    claimed = procs.claim_ready_nodes("dispatcher-1", 1).all(runner)
    assert [c.node_id for c in claimed] == [later_node]
    claimed = procs.claim_ready_nodes("dispatcher-1", 1).all(runner)
    assert [c.node_id for c in claimed] == [first_node]


def test_a_raised_priority_starts_its_approved_movement_first(conn: Conn) -> None:
    first = create(conn, plan(node("a")), "sp-a1")
    later = create(conn, plan(node("a")), "sp-a2")
    for movement in (first, later):
        with as_person(conn, "bob"):
            procs.approve_movement(movement).one(conn)
    with as_person(conn, "carol"):
        conn.execute(SET, (later, 2, "start it first"))
    [claimed] = procs.claim_ready_nodes("dispatcher-1", 1, start=1).all(conn)
    assert claimed.node_id == node_ids(conn, later)["a"]


def test_a_refused_priority_changes_nothing(conn: Conn) -> None:
    pending = create(conn, plan(node("a")), "sp-pending")
    cancelled = create(conn, plan(node("a")), "sp-cancelled")
    cancel(conn, cancelled)
    done = create_started(conn, plan(node("a")), "sp-done")
    [a] = claim(conn, "dispatcher-1")
    submit(conn, a, settled=True)
    conn.execute("UPDATE engine_limits SET max_text_bytes = 50")

    with as_person(conn, "alice"):
        for query in (SET, CALL):
            assert_rejected(conn, "QT010", query, (10**12, 1, "why not"))
            assert_rejected(conn, "QT020", query, (cancelled, 1, "why not"))
            assert_rejected(conn, "QT020", query, (done, 1, "why not"))
            assert_rejected(conn, "QT002", query, (pending, None, "why not"))
            assert_rejected(conn, "QT002", query, (pending, 1, None))
            assert_rejected(conn, "QT002", query, (pending, 1, "   "))
            assert_rejected(conn, "QT005", query, (pending, 1, "x" * 51))
            error = assert_rejected(conn, "QT020", query, (done, 0, "the same, but finished"))
            assert "COMPLETED" in str(error)


def test_runner_and_reader_logins_may_not_set_a_priority(conn: Conn, db: TestDatabase) -> None:
    pending = create(conn, plan(node("a")), "sp-logins")
    runner = bind(db.connect(db.runner_dsn("testnet")))
    reader = bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn))
    for login in (runner, reader):
        for query in (SET, CALL):
            assert_rejected(login, "42501", query, (pending, 5, "mine first"), watcher=conn)
    operator = bind(db.connect(db.login("carol", "qtg_testnet_operator").dsn))
    pin_clock(operator, iso_at(0))
    assert operator.execute(SET, (pending, 5, "mine first")).fetchone() == (5,)
    actor = conn.execute("SELECT actor FROM audit_outbox WHERE action = 'priority_set'").fetchone()
    assert actor is not None and actor[0].startswith("carol_")
