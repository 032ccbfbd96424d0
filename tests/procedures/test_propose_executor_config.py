"""propose_executor_config: (none) -> PROPOSED, a registered executor's node config
schema and description, for a second operator to approve.

Pins: the proposal holds the schema and the description (NULL keeps the
current one) beside the executor's as they are; the executor does not change
yet; audited. Refused, with nothing changed: an executor not registered
(QT012: registering one is an admin step), a schema that is not an object, or
whose "properties" is not an object or "required" not an array (QT002), a
schema beyond the document limit or a description beyond the text limit
(QT005), the configuration the executor already has (QT002).
"""

from __future__ import annotations

from typing import Any

import pytest
from engine import SIM_SCHEMA, assert_rejected, in_one_transaction
from psycopg.types.json import Jsonb
from rows import CONFIG_TABLES, Conn, proposal_row

from qtg_runner.db import procs

STRICTER = {
    **SIM_SCHEMA,
    "properties": {**SIM_SCHEMA["properties"], "latency_s": {"type": "number", "maximum": 60}},
}


def executor(conn: Conn, key: str = "sim") -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT has_side_effect, node_config_schema, description FROM executors"
        " WHERE executor_key = %s",
        (key,),
    ).fetchone()


def test_a_proposal_holds_the_schema_and_changes_nothing_yet(conn: Conn) -> None:
    before = executor(conn)
    written = in_one_transaction(
        conn,
        "SELECT * FROM propose_executor_config('sim', %s, 'latency capped')",
        (Jsonb(STRICTER),),
    )
    [(proposal_id, state, _, _)] = written.rows
    assert state == "PROPOSED"
    assert written.audit == [("proposal", str(proposal_id), "proposed", None, "PROPOSED")]
    row = proposal_row(conn, proposal_id)
    assert (row["kind"], row["subject"]) == ("executor_config", "sim")
    assert row["before_value"] == {"node_config_schema": SIM_SCHEMA, "description": "test executor"}
    assert row["proposed_value"] == {
        "node_config_schema": STRICTER,
        "description": "latency capped",
    }
    assert executor(conn) == before


def test_no_description_keeps_the_current_one(conn: Conn) -> None:
    proposal = procs.propose_executor_config("sim", STRICTER).one(conn)
    value = proposal_row(conn, proposal.proposal_id)["proposed_value"]
    assert value == {"node_config_schema": STRICTER, "description": "test executor"}


NOT_SCHEMAS: dict[str, Any] = {
    "nothing": None,
    "an array": [SIM_SCHEMA],
    "a string": "object",
    "properties not an object": {"type": "object", "properties": ["lane"]},
    "required not an array": {"type": "object", "required": "lane"},
}


@pytest.mark.parametrize("schema", NOT_SCHEMAS.values(), ids=NOT_SCHEMAS.keys())
def test_a_schema_that_is_not_one_is_refused(conn: Conn, schema: Any) -> None:
    value = None if schema is None else Jsonb(schema)
    error = assert_rejected(
        conn,
        "QT002",
        "SELECT * FROM propose_executor_config('sim', %s)",
        (value,),
        tables=CONFIG_TABLES,
    )
    assert "node config schema for sim must be an object" in str(error)


def test_an_unknown_executor_sizes_and_no_change_are_refused(conn: Conn) -> None:
    error = assert_rejected(
        conn,
        "QT012",
        "SELECT * FROM propose_executor_config('nope', %s)",
        (Jsonb(SIM_SCHEMA),),
        tables=CONFIG_TABLES,
    )
    assert "executor nope is not registered" in str(error)
    error = assert_rejected(
        conn,
        "QT002",
        "SELECT * FROM propose_executor_config('sim', %s, 'test executor')",
        (Jsonb(SIM_SCHEMA),),
        tables=CONFIG_TABLES,
    )
    assert "would change nothing" in str(error)
    conn.execute("UPDATE engine_limits SET max_json_bytes = 100, max_text_bytes = 10")
    for args, says in (
        ((Jsonb(STRICTER), "short"), "a document of"),
        ((Jsonb({"type": "object"}), "a long description"), "a text of"),
    ):
        error = assert_rejected(
            conn,
            "QT005",
            "SELECT * FROM propose_executor_config('sim', %s, %s)",
            args,
            tables=CONFIG_TABLES,
        )
        assert says in str(error)
