"""create_movement (and register_template): the DAG it writes, plan validation,
templates and idempotency on the external id.

A created movement is PENDING_APPROVAL with its nodes (each counting its
parents) and edges, audited (created) and announced (movement.pending_approval)
in the one transaction that wrote it (``in_one_transaction``). A rejected plan
must raise its stable SQLSTATE (QT001 invalid plan, QT002 invalid argument,
QT003 template problem, QT004 idempotency conflict) and write nothing: no
request, node, edge, audit or callback row.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    RECEIVER,
    add_lanes,
    as_person,
    assert_rejected,
    bind,
    create,
    in_one_transaction,
    node,
    node_ids,
    pin_clock,
    plan,
    snapshot,
    wait_until_blocked_on_a_lock,
)
from psycopg import sql
from psycopg.types.json import Jsonb
from rows import DIAMOND, ONE, Conn, iso_at, request_row

from qtg_runner.db import procs
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor

CREATE = (
    "SELECT movement_id, created FROM create_movement(%s, %s::numeric, %s::jsonb,"
    " p_template => %s, p_params => %s::jsonb, p_expires_at => %s::timestamptz,"
    " p_callback_url => %s)"
)
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


def create_args(
    external_id: str = "m1",
    amount: str = "100",
    the_plan: Any = None,
    template: str | None = None,
    params: Any = None,
    expires_at: str | None = None,
    callback_url: str | None = RECEIVER,
) -> tuple[Any, ...]:
    return (
        external_id,
        amount,
        None if the_plan is None else Jsonb(the_plan),
        template,
        None if params is None else Jsonb(params),
        expires_at,
        callback_url,
    )


def rejected(conn: Conn, sqlstate: str, match: str, **kw: Any) -> None:
    error = assert_rejected(conn, sqlstate, CREATE, create_args(**kw), tables=TABLES)
    assert match.lower() in str(error).lower(), f"rejected for another reason: {error}"


def count(conn: Conn, table: str) -> int:
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
    assert row is not None
    return int(row[0])


def cfg(**config: Any) -> dict[str, Any]:
    return {"key": "a", "executor": "sim", "config": config, "depends_on": []}


# --- the movement it writes ------------------------------------------------------------------


def test_create_makes_a_pending_approval_request_with_its_dag(conn: Conn) -> None:
    with as_person(conn, "alice"):  # the creator is the login, read from session_user
        written = in_one_transaction(
            conn,
            "SELECT movement_id, created FROM create_movement('m1', 100, %s::jsonb,"
            " p_callback_url => %s)",
            (Jsonb(DIAMOND), RECEIVER),
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


def test_a_movement_that_names_no_receiver_writes_no_callback(conn: Conn) -> None:
    # its state changes are in the audit log; a callback row nobody is told of
    # would be written, indexed and pruned for nothing
    with as_person(conn, "alice"):
        written = in_one_transaction(
            conn, "SELECT movement_id FROM create_movement('m1', 100, %s::jsonb)", (Jsonb(ONE),)
        )
    [(movement_id,)] = written.rows
    assert written.audit == [("request", str(movement_id), "created", None, "PENDING_APPROVAL")]
    assert written.callbacks == []


# --- plan validation ---------------------------------------------------------------------------

INVALID_PLANS: dict[str, tuple[Any, str]] = {
    "cycle of two": (plan(node("a", ["b"]), node("b", ["a"])), "cycle"),
    "cycle of three": (plan(node("a", ["c"]), node("b", ["a"]), node("c", ["b"])), "cycle"),
    "cycle behind a root": (
        plan(node("r"), node("a", ["r", "c"]), node("b", ["a"]), node("c", ["b"])),
        "cycle",
    ),
    "self-dependency": (plan(node("a", ["a"])), "depends on itself"),
    "unknown dependency": (plan(node("a"), node("b", ["nope"])), "unknown node nope"),
    "duplicate key": (plan(node("a"), node("a")), "appears twice"),
    "unknown executor": (plan(node("a", executor="teleport")), "unknown executor"),
    "missing required key": (plan(cfg(amount=1)), 'missing required key "lane"'),
    "wrong type": (plan(cfg(lane=5)), 'key "lane" must be of type'),
    "wrong number type": (plan(cfg(lane="l", amount="ten")), 'key "amount" must be of type'),
    "schema minimum": (plan(cfg(lane="l", amount=0)), 'key "amount" must be greater than'),
    "unknown key": (plan(cfg(lane="l", colour="red")), 'unknown key "colour"'),
    "empty plan": (plan(), "at least one node"),
    "no nodes array": ({"steps": []}, '"nodes" array'),
    "not an object": ([node("a")], '"nodes" array'),
    "node without key": (plan({"executor": "sim", "config": {"lane": "l"}}), '"key"'),
    "bad key": (plan(node("a b")), '"key"'),
    "depends_on not a list": (plan({**node("b"), "depends_on": "a"}, node("a")), "depends_on"),
}


def test_invalid_plans_are_rejected_with_nothing_written(conn: Conn) -> None:
    for name, (the_plan, match) in INVALID_PLANS.items():
        try:
            rejected(conn, "QT001", match, the_plan=the_plan)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc
    assert count(conn, "movement_requests") == 0


def test_one_deposit_step_is_followed_by_one_withdrawal_at_most(conn: Conn) -> None:
    """A withdrawal reads each deposit it follows credited at the venue before
    it asks (verify before spending), and every step moves the movement's
    amount: two withdrawals after one deposit would both be let go by one
    credit, the second paid from what the venue held before. Refused (QT001)
    with nothing written; one withdrawal each after their own deposits is a
    plan."""
    for executor in (BybitDepositExecutor, BybitWithdrawExecutor):
        procs.register_executor(executor.key, True, executor.node_config_schema, "x").one(conn)
    add_lanes(conn, "in", "out")
    venue = {"venue": "bybit", "chain": "local-a"}
    out = {**venue, "coin": "USDC", "to": "0x" + "b2" * 20}

    def step(key: str, executor: str, after: list[str], **config: Any) -> dict[str, Any]:
        return {"key": key, "executor": executor, "config": config, "depends_on": after}

    deposit = step("in", "bybit_deposit", [], lane="in", **venue)
    two = plan(
        deposit, *(step(k, "bybit_withdraw", ["in"], lane="out", **out) for k in ("w1", "w2"))
    )
    rejected(
        conn,
        "QT001",
        "node in: a bybit_deposit is followed by one bybit_withdraw at most",
        the_plan=two,
    )
    assert count(conn, "movement_requests") == 0
    own = plan(
        deposit,
        step("in2", "bybit_deposit", [], lane="in", **venue),
        step("w1", "bybit_withdraw", ["in"], lane="out", **out),
        step("w2", "bybit_withdraw", ["in2"], lane="out", **out),
    )
    conn.execute(CREATE, create_args(the_plan=own))
    assert count(conn, "movement_requests") == 1


INVALID_ARGUMENTS: dict[str, tuple[dict[str, Any], str]] = {
    "zero amount": ({"amount": "0"}, "amount must be positive"),
    "negative amount": ({"amount": "-5"}, "amount must be positive"),
    "seven decimals": ({"amount": "1.0000001"}, "more than 6 decimal places"),
    "expiry in the past": ({"expires_at": iso_at(-1)}, "not in the future"),
    "expiry now": ({"expires_at": iso_at(0)}, "not in the future"),
    "empty external id": ({"external_id": ""}, "external id"),
    "external id too long": ({"external_id": "x" * 201}, "external id"),
    "plan and template": ({"template": "t"}, "exactly one"),
}


def test_invalid_arguments_are_rejected_with_nothing_written(conn: Conn) -> None:
    for name, (kw, match) in INVALID_ARGUMENTS.items():
        try:
            rejected(conn, "QT002", match, the_plan=plan(node("a")), **kw)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc
    rejected(conn, "QT002", "exactly one")  # neither a plan nor a template
    assert count(conn, "movement_requests") == 0


def test_the_boundaries_of_the_rules_are_accepted(conn: Conn) -> None:
    """Just inside each rule: six decimals, expiry one second ahead, 64-char keys."""
    long_key = "k" * 64
    the_plan = plan(node(long_key), node("b", [long_key, long_key]))  # a repeated dependency
    row = conn.execute(
        CREATE, create_args(amount="0.000001", the_plan=the_plan, expires_at=iso_at(1))
    ).fetchone()
    assert row is not None and row[1] is True
    pending = dict(
        conn.execute(
            "SELECT node_key, pending_parents FROM movement_request_nodes WHERE request_id = %s",
            (row[0],),
        ).fetchall()
    )
    assert pending == {long_key: 0, "b": 1}  # counted once
    assert count(conn, "movement_plan_edges") == 1


def test_node_lane_comes_from_its_config(conn: Conn) -> None:
    add_lanes(conn, "cctp-eth-base")
    movement_id = create(conn, plan(node("a", lane="cctp-eth-base")), "m1")
    lanes = conn.execute(
        "SELECT lane FROM movement_request_nodes WHERE request_id = %s", (movement_id,)
    ).fetchall()
    assert lanes == [("cctp-eth-base",)]


# --- templates ---------------------------------------------------------------------------------

BRIDGE = {
    "nodes": [
        {
            "key": "burn",
            "executor": "sim",
            "config": {"lane": {"$param": "lane"}, "amount": {"$param": "amount"}},
            "depends_on": [],
        },
        {
            "key": "mint",
            "executor": "sim",
            "config": {"lane": {"$param": "lane"}},
            "depends_on": ["burn"],
        },
    ]
}


def test_a_template_is_compiled_with_its_params(conn: Conn) -> None:
    conn.execute("SELECT register_template('bridge', %s, 'burn then mint')", (Jsonb(BRIDGE),))
    add_lanes(conn, "eth-base")
    params = {"lane": "eth-base", "amount": 25}
    row = conn.execute(CREATE, create_args(template="bridge", params=params)).fetchone()
    assert row is not None and row[1] is True
    movement_id = row[0]
    stored = conn.execute(
        "SELECT template_name, template_params, plan FROM movement_requests WHERE id = %s",
        (movement_id,),
    ).fetchone()
    assert stored is not None
    assert stored[0:2] == ("bridge", params)
    assert stored[2]["nodes"][0]["config"] == {"lane": "eth-base", "amount": 25}
    nodes = conn.execute(
        "SELECT node_key, node_config, lane, pending_parents FROM movement_request_nodes"
        " WHERE request_id = %s ORDER BY id",
        (movement_id,),
    ).fetchall()
    assert nodes == [
        ("burn", {"lane": "eth-base", "amount": 25}, "eth-base", 0),
        ("mint", {"lane": "eth-base"}, "eth-base", 1),
    ]
    # the same template and params under the same external id is a repeat
    again = conn.execute(CREATE, create_args(template="bridge", params=params)).fetchone()
    assert again == (movement_id, False)


def test_template_problems_are_rejected_with_nothing_written(conn: Conn) -> None:
    conn.execute("SELECT register_template('bridge', %s)", (Jsonb(BRIDGE),))
    rejected(
        conn,
        "QT003",
        'parameter "amount" is missing',
        template="bridge",
        params={"lane": "eth-base"},
    )
    rejected(conn, "QT003", 'parameter "lane" is missing', template="bridge", params=None)
    rejected(conn, "QT003", "does not exist", template="no_such_template", params={})
    # the substituted config is validated like an inline one
    rejected(
        conn,
        "QT001",
        'key "amount" must be greater than',
        template="bridge",
        params={"lane": "eth-base", "amount": -1},
    )
    assert count(conn, "movement_requests") == 0


def test_register_template_rejects_what_could_never_compile(conn: Conn) -> None:
    not_plans: list[Any] = [{"steps": []}, [node("a")], {"nodes": {"a": {}}}, None]
    for the_plan in not_plans:
        value = None if the_plan is None else Jsonb(the_plan)
        assert_rejected(conn, "QT001", "SELECT register_template('t', %s)", (value,), tables=TABLES)
    for name in ("Bridge", "", None, "9lives"):
        assert_rejected(
            conn, "QT002", "SELECT register_template(%s, %s)", (name, Jsonb(BRIDGE)), tables=TABLES
        )


# --- idempotency -------------------------------------------------------------------------------


def test_the_same_request_again_returns_the_same_movement_and_writes_nothing(conn: Conn) -> None:
    the_plan = plan(node("a"), node("b", ["a"]))
    first = conn.execute(CREATE, create_args(the_plan=the_plan)).fetchone()
    assert first is not None and first[1] is True
    before = snapshot(conn, TABLES)
    again = conn.execute(CREATE, create_args(the_plan=the_plan)).fetchone()
    assert again == (first[0], False)
    assert snapshot(conn, TABLES) == before
    assert count(conn, "movement_requests") == 1


def test_a_different_request_under_the_same_external_id_conflicts(conn: Conn) -> None:
    the_plan = plan(node("a"), node("b", ["a"]))
    conn.execute(CREATE, create_args(the_plan=the_plan))
    rejected(conn, "QT004", "different request", the_plan=plan(node("a")))
    rejected(conn, "QT004", "different request", the_plan=the_plan, amount="101")
    conn.execute("SELECT register_template('bridge', %s)", (Jsonb(the_plan),))
    rejected(conn, "QT004", "different request", template="bridge", params={})
    assert count(conn, "movement_requests") == 1


def test_every_argument_is_part_of_the_request_the_external_id_names(conn: Conn) -> None:
    # the plan and amount above; here what the database enforced only since the HTTP API
    the_plan = plan(node("a"))
    first = conn.execute(
        "SELECT movement_id FROM create_movement('m1', 100, %s, p_expires_at => %s,"
        " p_callback_url => 'https://hooks.example.com/a', p_priority => 1)",
        (Jsonb(the_plan), iso_at(3600)),
    ).fetchone()
    assert first is not None
    same = (
        "SELECT movement_id, created FROM create_movement('m1', 100, %s, p_expires_at => %s,"
        " p_callback_url => %s, p_priority => %s)"
    )
    assert conn.execute(
        same, (Jsonb(the_plan), iso_at(3600), "https://hooks.example.com/a", 1)
    ).fetchone() == (first[0], False)
    for changed in (
        (Jsonb(the_plan), iso_at(7200), "https://hooks.example.com/a", 1),
        (Jsonb(the_plan), None, "https://hooks.example.com/a", 1),
        (Jsonb(the_plan), iso_at(3600), "https://hooks.example.com/b", 1),
        (Jsonb(the_plan), iso_at(3600), None, 1),
        (Jsonb(the_plan), iso_at(3600), "https://hooks.example.com/a", 0),
    ):
        error = assert_rejected(conn, "QT004", same, changed, tables=TABLES)
        assert "different request" in str(error)
    conn.execute(
        "SELECT register_template('bridge', %s)",
        (
            Jsonb(
                plan(node("a")),
            ),
        ),
    )
    conn.execute("SELECT create_movement('m2', 100, p_template => 'bridge', p_params => '{}')")
    assert_rejected(
        conn,
        "QT004",
        "SELECT create_movement('m2', 100, p_template => 'bridge', p_params => '{\"x\": 1}')",
        tables=TABLES,
    )


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_concurrent_creates_with_one_external_id_make_one_movement(
    db: TestDatabase, conn: Conn, first_ends: str
) -> None:
    the_plan = plan(node("a"), node("b", ["a"]))
    first = bind(db.connect())
    second = bind(db.connect())
    for c in (first, second):
        pin_clock(c, iso_at(0))
    result: dict[str, Any] = {}

    def create_second() -> None:
        try:
            result["row"] = second.execute(CREATE, create_args(the_plan=the_plan)).fetchone()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=create_second)
    with first.transaction() as tx:
        row = first.execute(CREATE, create_args(the_plan=the_plan)).fetchone()
        assert row is not None and row[1] is True
        thread.start()
        # the second creator must be waiting on the first's uncommitted row
        wait_until_blocked_on_a_lock(conn, second.info.backend_pid)
        if first_ends == "rollback":
            raise psycopg.Rollback(tx)

    thread.join(timeout=10)
    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    rows = conn.execute("SELECT id FROM movement_requests WHERE external_id = 'm1'").fetchall()
    assert len(rows) == 1
    [(movement_id,)] = rows
    if first_ends == "commit":
        assert movement_id == row[0]
        assert result["row"] == (movement_id, False)
    else:
        assert result["row"] == (movement_id, True)
    assert set(node_ids(conn, movement_id)) == {"a", "b"}
    assert count(conn, "movement_request_nodes") == 2
    assert count(conn, "callback_outbox") == 1
