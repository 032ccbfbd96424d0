"""create_movements: create_movement for up to 1,000 items in one call.

Both calls take one step (create_movement_rows), so these tests pin what the
batch adds: one row per item in input order, every item's movement written as
create_movement writes it (nodes, edges, an audit row and a callback each, the
creator the login), idempotency per external id (across calls and inside one
batch), the whole batch refused on one bad item (its index and external id in
the message, every table unchanged: ``assert_rejected``), the JSON shape of an
item, and the bound of 1,000 items. create_movement's own file holds the rules
an item is checked by.
"""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    RECEIVER,
    as_person,
    assert_rejected,
    bind,
    in_one_transaction,
    node,
    pin_clock,
    plan,
    snapshot,
    wait_until_blocked_on_a_lock,
)
from psycopg.types.json import Jsonb
from rows import DIAMOND, ONE, Conn, iso_at, request_row, time_at

from qtg_runner.db import procs

BATCH = "SELECT movement_id, request_state::text, created FROM create_movements(%s::jsonb)"
TABLES = (
    "movement_requests",
    "movement_request_nodes",
    "movement_plan_edges",
    "node_intents",
    "callback_outbox",
    "audit_outbox",
    "movement_templates",
    "executors",
)


def item(external_id: str, amount: Any = 100, the_plan: Any = ONE, **more: Any) -> dict[str, Any]:
    return {"external_id": external_id, "amount": amount, "plan": the_plan, **more}


def hooked(external_id: str) -> dict[str, Any]:
    """An item whose movement names a callback receiver (one callback row per state)."""
    return item(external_id, callback_url=RECEIVER)


def refused(conn: Conn, sqlstate: str, items: Any, *match: str) -> str:
    error = assert_rejected(conn, sqlstate, BATCH, (Jsonb(items),), tables=TABLES)
    message = str(error).splitlines()[0]
    for m in match:
        assert m in message, f"refused for another reason: {message}"
    return message


def test_each_item_becomes_a_movement_as_create_movement_makes_it(conn: Conn) -> None:
    items = [
        item("b-1", the_plan=DIAMOND),
        item("b-2", "0.5", expires_at=iso_at(3600), callback_url="https://hooks.example/x"),
        item("b-3", 7, priority=5, asset="EURC"),
    ]
    with as_person(conn, "alice"):
        written = in_one_transaction(conn, BATCH, (Jsonb(items),))
    ids = [row[0] for row in written.rows]
    assert [row[1:] for row in written.rows] == [("PENDING_APPROVAL", True)] * 3
    assert ids == sorted(ids)  # in input order
    rows = [request_row(conn, i) for i in ids]
    assert [(r["external_id"], r["created_by"], r["open_nodes"]) for r in rows] == [
        ("b-1", "alice", 4),
        ("b-2", "alice", 1),
        ("b-3", "alice", 1),
    ]
    assert (rows[1]["amount"], rows[1]["callback_url"], rows[2]["priority"]) == (
        Decimal("0.5"),
        "https://hooks.example/x",
        5,
    )
    assert rows[2]["asset"] == "EURC" and rows[0]["asset"] == "USDC"
    nodes = conn.execute(
        "SELECT node_key, pending_parents, priority FROM movement_request_nodes"
        " WHERE request_id = %s ORDER BY node_key",
        (ids[0],),
    ).fetchall()
    assert nodes == [("a", 0, 0), ("b", 1, 0), ("c", 1, 0), ("d", 2, 0)]
    edges = conn.execute(
        "SELECT p.node_key, c.node_key FROM movement_plan_edges e"
        " JOIN movement_request_nodes p ON p.id = e.parent_node_id"
        " JOIN movement_request_nodes c ON c.id = e.child_node_id WHERE e.request_id = %s",
        (ids[0],),
    ).fetchall()
    assert set(edges) == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}
    assert written.audit == [("request", str(i), "created", None, "PENDING_APPROVAL") for i in ids]
    # only b-2 names a receiver: the others write no callback row
    assert written.callbacks == [(ids[1], "movement.pending_approval")]


def test_a_batch_writes_what_the_same_movements_made_one_by_one_write(conn: Conn) -> None:
    """The batch and create_movement take one step: the rows they leave are the same."""
    conn.execute(
        "SELECT register_template('bridge', %s)", (Jsonb(plan(node("x"), node("y", ["x"]))),)
    )
    items = [
        item("s-1", the_plan=DIAMOND),
        {
            "external_id": "s-2",
            "amount": "3.25",
            "template": "bridge",
            "params": {},
            "expires_at": iso_at(60),
            "callback_url": "https://h.example/a",
            "priority": 2,
        },
    ]
    procs.create_movement("s-1", 100, plan=DIAMOND).one(conn)
    procs.create_movement(
        "s-2",
        Decimal("3.25"),
        template="bridge",
        params={},
        expires_at=time_at(60),
        callback_url="https://h.example/a",
        priority=2,
    ).one(conn)
    single = snapshot_rows(conn)
    conn.execute("TRUNCATE movement_requests, audit_batches, callback_outbox CASCADE")
    procs.create_movements(items).all(conn)
    assert snapshot_rows(conn) == single


def snapshot_rows(conn: Conn) -> list[Any]:
    """What a created movement is, without its ids."""
    return [
        conn.execute(
            "SELECT external_id, request_state, template_name, template_params, plan, amount,"
            " asset, priority, callback_url, created_by, open_nodes, expires_at, created_at"
            " FROM movement_requests ORDER BY external_id"
        ).fetchall(),
        conn.execute(
            "SELECT r.external_id, n.node_key, n.executor_key, n.node_config, n.lane, n.node_state,"
            " n.pending_parents, n.priority FROM movement_request_nodes n"
            " JOIN movement_requests r ON r.id = n.request_id ORDER BY 1, 2"
        ).fetchall(),
        conn.execute(
            "SELECT r.external_id, p.node_key, c.node_key FROM movement_plan_edges e"
            " JOIN movement_requests r ON r.id = e.request_id"
            " JOIN movement_request_nodes p ON p.id = e.parent_node_id"
            " JOIN movement_request_nodes c ON c.id = e.child_node_id ORDER BY 1, 2, 3"
        ).fetchall(),
        conn.execute(
            "SELECT r.external_id, a.actor, a.action, a.to_state, a.detail FROM audit_outbox a"
            " JOIN movement_requests r ON r.id = a.request_id ORDER BY 1"
        ).fetchall(),
        conn.execute(
            "SELECT r.external_id, c.event_type, c.target_url, c.delivery_state,"
            " c.payload - 'movement_id' FROM callback_outbox c"
            " JOIN movement_requests r ON r.id = c.request_id ORDER BY 1"
        ).fetchall(),
    ]


# --- idempotency ------------------------------------------------------------------------------


def test_the_same_batch_again_returns_the_same_movements_and_writes_nothing(conn: Conn) -> None:
    items = [item("i-1"), item("i-2", "2.5", expires_at=iso_at(600))]
    first = conn.execute(BATCH, (Jsonb(items),)).fetchall()
    before = snapshot(conn, TABLES)
    with as_person(conn, "bob"):  # whoever asks
        again = conn.execute(BATCH, (Jsonb(items),)).fetchall()
    assert again == [(m, s, False) for m, s, _ in first]
    assert snapshot(conn, TABLES) == before
    # an item already made beside new ones: the new ones are created
    mixed = conn.execute(BATCH, (Jsonb([item("i-0"), items[1]]),)).fetchall()
    assert [row[2] for row in mixed] == [True, False] and mixed[1][0] == first[1][0]
    # and a single create_movement sees the batch's movement as its own repeat
    assert procs.create_movement("i-1", 100, plan=ONE).one(conn) == procs.CreatedMovement(
        first[0][0], False
    )


def test_an_item_that_differs_under_a_used_external_id_is_qt004_for_the_whole_batch(
    conn: Conn,
) -> None:
    conn.execute(BATCH, (Jsonb([item("d-1")]),))
    for changed in (
        {"amount": 101},
        {"the_plan": DIAMOND},
        {"priority": 1},
        {"expires_at": iso_at(60)},
        {"callback_url": "https://hooks.example/other"},
    ):
        refused(
            conn,
            "QT004",
            [item("d-0"), item("d-1", **changed)],
            "create_movements: items[1] (external id 'd-1')",
            "already names movement",
        )
    assert conn.execute("SELECT count(*) FROM movement_requests").fetchone() == (1,)


def test_an_external_id_twice_in_a_batch_is_one_movement(conn: Conn) -> None:
    rows = conn.execute(BATCH, (Jsonb([item("t-1"), item("t-2"), item("t-1")]),)).fetchall()
    assert rows[0][0] == rows[2][0] and [r[2] for r in rows] == [True, True, False]
    assert conn.execute("SELECT count(*) FROM movement_requests").fetchone() == (2,)
    assert conn.execute(
        "SELECT count(*) FROM audit_outbox WHERE action = 'created'"
    ).fetchone() == (2,)
    refused(
        conn,
        "QT004",
        [item("t-3"), item("t-3", 5)],
        "items[1] (external id 't-3')",
        "already names items[0] of this call",
    )


def test_concurrent_batches_with_a_shared_external_id_make_it_once(
    db: TestDatabase, conn: Conn
) -> None:
    first = bind(db.connect())
    second = bind(db.connect())
    for c in (first, second):
        pin_clock(c, iso_at(0))
    result: dict[str, Any] = {}

    def create_second() -> None:
        try:
            result["rows"] = second.execute(
                BATCH, (Jsonb([hooked("c-2"), hooked("c-shared")]),)
            ).fetchall()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=create_second)
    with first.transaction():
        mine = first.execute(BATCH, (Jsonb([hooked("c-shared"), hooked("c-1")]),)).fetchall()
        thread.start()
        wait_until_blocked_on_a_lock(conn, second.info.backend_pid)
    thread.join(timeout=10)
    assert "error" not in result, result.get("error")
    assert result["rows"][1] == (mine[0][0], "PENDING_APPROVAL", False)
    assert result["rows"][0][2] is True
    assert conn.execute("SELECT count(*) FROM movement_requests").fetchone() == (3,)
    assert conn.execute("SELECT count(*) FROM callback_outbox").fetchone() == (3,)


# --- one bad item refuses the batch -------------------------------------------------------------

BAD_ITEMS: dict[str, tuple[dict[str, Any], str, str]] = {
    "zero amount": (item("x", 0), "QT002", "amount must be positive, got 0"),
    "seven decimals": (item("x", "1.0000001"), "QT002", "more than 6 decimal places"),
    "amount beyond the limit": (
        item("x", "1" + "0" * 30),
        "QT005",
        "amount must be a finite number",
    ),
    "amount with an exponent": (item("x", "1e3"), "QT002", "numeric string written plainly"),
    "amount with a blank": (item("x", " 7"), "QT002", "numeric string written plainly"),
    "expiry in the past": (item("x", expires_at=iso_at(-1)), "QT002", "not in the future"),
    "infinite expiry": (item("x", expires_at="infinity"), "QT005", "finite time"),
    "blank external id": (item(" "), "QT002", "external id must be 1 to 200 characters"),
    # shown to the approver as it is: nothing that rewrites a terminal or reorders a line
    "external id with a terminal escape": (
        item("pay\x1b[2J\x1b[1;1Hrefund-7"),
        "QT002",
        "all printable",
    ),
    "external id with a line break": (item("a\nb"), "QT002", "all printable"),
    "external id with a bidi override": (item("invoice-\u202e7-cod"), "QT002", "all printable"),
    "lower-case asset": (item("x", asset="usdc"), "QT002", "upper-case symbol"),
    "plan and template": (item("x", template="t"), "QT002", "exactly one"),
    "no plan": ({"external_id": "x", "amount": 1}, "QT002", "exactly one"),
    "a cycle": (item("x", the_plan=plan(node("a", ["b"]), node("b", ["a"]))), "QT001", "cycle"),
    "unknown executor": (
        item("x", the_plan=plan(node("a", executor="teleport"))),
        "QT001",
        "unknown executor",
    ),
    "unknown template": (
        {"external_id": "x", "amount": 1, "template": "nope"},
        "QT003",
        "template nope does not exist",
    ),
    "a long callback url": (item("x", callback_url="h" * 5000), "QT005", "a text of 5000 bytes"),
    "params not an object": (
        {"external_id": "x", "amount": 1, "template": "t", "params": [1]},
        "QT002",
        "template params must be a JSON object",
    ),
    # the item's JSON shape
    "an unknown field": (item("x", amonut=5), "QT002", "unknown field 'amonut'"),
    "amount as words": (item("x", "ten"), "QT002", "amount must be a number or a numeric string"),
    "amount as a list": (item("x", [1]), "QT002", "amount must be a number"),
    "external id a number": (
        {**item("x"), "external_id": 5},
        "QT002",
        "external_id must be a string",
    ),
    "a time that is not one": (item("x", expires_at="tomorrow-ish"), "QT002", "is not a time"),
    "expiry a number": (item("x", expires_at=5), "QT002", "expires_at must be a time as a string"),
    "priority a fraction": (item("x", priority=1.5), "QT002", "priority must be a whole number"),
    "priority beyond integer": (
        item("x", priority=2**31),
        "QT002",
        "priority must be a whole number",
    ),
    "priority a string": (item("x", priority="1"), "QT002", "priority must be a whole number"),
    "callback url an object": (
        item("x", callback_url={}),
        "QT002",
        "callback_url must be a string",
    ),
}


def test_one_bad_item_refuses_the_whole_batch_naming_it(conn: Conn) -> None:
    conn.execute("SELECT register_template('t', %s)", (Jsonb(ONE),))
    for name, (bad, code, match) in BAD_ITEMS.items():
        try:
            message = refused(conn, code, [item("ok-1"), item("ok-2"), bad, item("ok-3")], match)
            assert message.startswith("create_movements: items[2]"), message
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc
    assert conn.execute("SELECT count(*) FROM movement_requests").fetchone() == (0,)


def test_a_missing_template_param_names_its_item(conn: Conn) -> None:
    conn.execute(
        "SELECT register_template('laned', %s)",
        (
            Jsonb(
                {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": {"$param": "lane"}}}]}
            ),
        ),
    )
    good = {"external_id": "p-1", "amount": 1, "template": "laned", "params": {"lane": "default"}}
    bad = {"external_id": "p-2", "amount": 1, "template": "laned", "params": {}}
    refused(
        conn, "QT003", [good, bad], "items[1] (external id 'p-2')", 'parameter "lane" is missing'
    )
    rows = conn.execute(BATCH, (Jsonb([good]),)).fetchall()
    assert rows[0][2] is True


def test_the_batch_is_a_json_array_of_1_to_1000_objects(conn: Conn) -> None:
    refused(conn, "QT002", {"external_id": "x"}, "must be a JSON array of 1 to 1000")
    refused(conn, "QT002", [], "must be a JSON array of 1 to 1000")
    refused(conn, "QT002", [item("x"), 5], "items[1]", "must be a JSON object")
    assert_rejected(conn, "QT002", "SELECT * FROM create_movements(NULL)", tables=TABLES)
    over = [item(f"o-{i}") for i in range(1001)]
    refused(conn, "QT002", over, "at most 1000 movements a call, got 1001")
    rows = conn.execute(BATCH, (Jsonb(over[:1000]),)).fetchall()
    assert len(rows) == 1000 and all(r[2] for r in rows)


def test_the_wrapper_returns_typed_rows(conn: Conn) -> None:
    rows = procs.create_movements([item("w-1"), item("w-2")]).all(conn)
    assert [(r.request_state, r.created) for r in rows] == [
        (procs.RequestState.PENDING_APPROVAL, True)
    ] * 2
    with pytest.raises(psycopg.Error) as error:
        procs.create_movements([item("w-3", 0)]).all(conn)
    assert error.value.sqlstate == "QT002"
    assert json.dumps(item("w-3"))  # items are plain JSON
