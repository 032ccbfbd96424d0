"""propose_template: (none) -> PROPOSED, a named plan template for a second operator to approve.

Pins: the proposal holds the plan and description beside the template as it
is (NULL for a new one), and the template itself does not change; audited.
The plan is validated as create_movement validates a plan (check_plan): an
unknown executor, a cycle, an unknown or self dependency, a duplicate key, a
config that fails its executor's schema, no nodes are QT001; a placeholder
{"$param": name} stands for a config value of the right type (and for a
required key), but not for a key, an executor or a dependency. A plan or a
description beyond engine_limits is QT005, a bad name QT002. Nothing changes
on a refusal.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine import assert_rejected, in_one_transaction, node, plan
from psycopg.types.json import Jsonb
from rows import CONFIG_TABLES, Conn, proposal_row

from qtg_runner.db import procs

PARAM = {"$param": "lane"}
BRIDGE = {
    "nodes": [
        {
            "key": "burn",
            "executor": "sim",
            "config": {"lane": PARAM, "amount": {"$param": "amount"}},
        },
        {"key": "mint", "executor": "sim", "config": {"lane": PARAM}, "depends_on": ["burn"]},
    ]
}


def templates(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT template_name, plan, description FROM movement_templates ORDER BY 1"
    ).fetchall()


def test_a_proposal_holds_the_plan_and_registers_nothing_yet(conn: Conn) -> None:
    written = in_one_transaction(
        conn, "SELECT * FROM propose_template('bridge', %s, 'burn then mint')", (Jsonb(BRIDGE),)
    )
    [(proposal_id, state, _, supersedes)] = written.rows
    assert (state, supersedes) == ("PROPOSED", None)
    assert written.audit == [("proposal", str(proposal_id), "proposed", None, "PROPOSED")]
    row = proposal_row(conn, proposal_id)
    assert (row["kind"], row["subject"], row["before_value"]) == ("template", "bridge", None)
    assert row["proposed_value"] == {"plan": BRIDGE, "description": "burn then mint"}
    assert templates(conn) == []


def test_replacing_a_template_shows_the_one_it_replaces(conn: Conn) -> None:
    old = plan(node("a"))
    procs.register_template("bridge", old, "one step").one(conn)
    proposal = procs.propose_template("bridge", BRIDGE).one(conn)
    row = proposal_row(conn, proposal.proposal_id)
    assert row["before_value"] == {"plan": old, "description": "one step"}
    assert row["proposed_value"] == {"plan": BRIDGE, "description": ""}
    assert templates(conn) == [("bridge", old, "one step")]


NOT_PLANS: dict[str, tuple[Any, str]] = {
    "no nodes array": ({"steps": []}, '"nodes" array'),
    "not an object": ([node("a")], '"nodes" array'),
    "nothing": (None, '"nodes" array'),
    "no nodes": (plan(), "at least one node"),
    "unknown executor": (plan(node("a", executor="nope")), "unknown executor nope"),
    "cycle": (plan(node("a", ["b"]), node("b", ["a"])), "cycle"),
    "self dependency": (plan(node("a", ["a"])), "depends on itself"),
    "unknown dependency": (plan(node("a", ["zz"])), "depends on unknown node zz"),
    "duplicate key": (plan(node("a"), node("a")), "appears twice"),
    "bad config": (plan(node("a", amount=-1)), 'key "amount" must be greater than 0'),
    "unknown config key": (plan(node("a", colour="red")), 'unknown key "colour"'),
    "missing required key": (
        {"nodes": [{"key": "a", "executor": "sim", "config": {"amount": 1}}]},
        'missing required key "lane"',
    ),
    "placeholder executor": (
        {"nodes": [{"key": "a", "executor": {"$param": "x"}, "config": {"lane": "l"}}]},
        "unknown executor",
    ),
    "placeholder dependency": (
        {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": "l"}, "depends_on": PARAM}]},
        "depends_on must be an array",
    ),
}


@pytest.mark.parametrize(("the_plan", "says"), NOT_PLANS.values(), ids=NOT_PLANS.keys())
def test_a_plan_create_movement_would_refuse_is_refused(
    conn: Conn, the_plan: Any, says: str
) -> None:
    value = None if the_plan is None else Jsonb(the_plan)
    error = assert_rejected(
        conn, "QT001", "SELECT * FROM propose_template('t', %s)", (value,), tables=CONFIG_TABLES
    )
    assert says in str(error)


def test_a_placeholder_stands_for_a_config_value_or_a_whole_config(conn: Conn) -> None:
    whole = {"nodes": [{"key": "a", "executor": "sim", "config": {"$param": "config"}}]}
    for name, the_plan in (("bridge", BRIDGE), ("whole", whole)):
        assert procs.propose_template(name, the_plan).one(conn).proposal_state == "PROPOSED"


def test_bad_names_and_sizes_are_refused(conn: Conn) -> None:
    for name in ("Bridge", "", None, "9lives"):
        assert_rejected(
            conn,
            "QT002",
            "SELECT * FROM propose_template(%s, %s)",
            (name, Jsonb(BRIDGE)),
            tables=CONFIG_TABLES,
        )
    conn.execute("UPDATE engine_limits SET max_plan_nodes = 2, max_text_bytes = 10")
    three = plan(node("a"), node("b"), node("c"))
    error = assert_rejected(
        conn,
        "QT005",
        "SELECT * FROM propose_template('t', %s)",
        (Jsonb(three),),
        tables=CONFIG_TABLES,
    )
    assert "a plan of 3 nodes is beyond the limit of 2 nodes" in str(error)
    error = assert_rejected(
        conn,
        "QT005",
        "SELECT * FROM propose_template('t', %s, %s)",
        (Jsonb(BRIDGE), "a description of more than ten bytes"),
        tables=CONFIG_TABLES,
    )
    assert "beyond the limit of 10 bytes" in str(error)
