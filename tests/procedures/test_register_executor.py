"""register_executor: the admin's deploy step (`qtg executors register`).

It adds or updates an executor in the registry, so plans naming it are
validated against its node config schema; a change is audited, the same
registration again changes nothing. has_side_effect is never turned off for
an executor that has nodes (QT041), not even by the admin: a node copies the
flag at creation, and recovery, expiry and retries trust it. The routine is
in sql/functions/admin/: it runs as its caller and is granted to nobody, so a
runner or an operator login cannot call it (tests/security/test_runner_login.py,
tests/scenarios/test_isolation.py); runners read the registry through
registered_executors.
"""

from __future__ import annotations

import json

import pytest
from engine import SIM_SCHEMA, assert_rejected, create_started, node, plan, register_sim
from rows import Conn

from qtg_runner.db import procs

REGISTER = "SELECT register_executor(%s, %s, %s::jsonb, %s)"


def audit_actions(conn: Conn, key: str) -> list[str]:
    rows = conn.execute(
        "SELECT action FROM audit_outbox WHERE entity = 'executor' AND entity_id = %s ORDER BY id",
        (key,),
    ).fetchall()
    return [r[0] for r in rows]


def test_a_new_executor_is_registered_and_audited(conn: Conn) -> None:
    conn.execute(REGISTER, ("bridge", True, json.dumps(SIM_SCHEMA), "a bridge"))
    assert procs.registered_executors().all(conn)[0] == procs.RegisteredExecutor(
        "bridge", True, SIM_SCHEMA
    )
    assert audit_actions(conn, "bridge") == ["registered"]


def test_the_same_registration_again_changes_nothing_and_a_new_schema_is_an_update(
    conn: Conn,
) -> None:
    conn.execute(REGISTER, ("bridge", True, json.dumps(SIM_SCHEMA), "a bridge"))
    conn.execute(REGISTER, ("bridge", True, json.dumps(SIM_SCHEMA), "a bridge"))
    assert audit_actions(conn, "bridge") == ["registered"]
    wider = {**SIM_SCHEMA, "required": []}
    conn.execute(REGISTER, ("bridge", True, json.dumps(wider), "a bridge"))
    assert audit_actions(conn, "bridge") == ["registered", "updated"]
    [row] = [r for r in procs.registered_executors().all(conn) if r.executor_key == "bridge"]
    assert row.node_config_schema == wider


def test_an_executor_with_nodes_never_loses_its_side_effect(conn: Conn) -> None:
    create_started(conn, plan(node("a")), "flip-1")
    error = assert_rejected(conn, "QT041", REGISTER, ("sim", False, json.dumps(SIM_SCHEMA), ""))
    assert "has nodes" in str(error)
    # registering it as it is stays allowed
    register_sim(conn)


@pytest.mark.parametrize("first", [True, False])
def test_an_executor_without_nodes_may_be_registered_either_way(conn: Conn, first: bool) -> None:
    schema = json.dumps(SIM_SCHEMA)
    conn.execute(REGISTER, ("fresh", first, schema, ""))
    conn.execute(REGISTER, ("fresh", not first, schema, ""))
    [row] = [r for r in procs.registered_executors().all(conn) if r.executor_key == "fresh"]
    assert row.has_side_effect is (not first)


@pytest.mark.parametrize(
    "key, schema",
    [("Bad-Key", SIM_SCHEMA), ("ok", {"properties": []}), ("ok", {"required": "lane"})],
)
def test_a_malformed_registration_is_refused(conn: Conn, key: str, schema: object) -> None:
    assert_rejected(conn, "QT002", REGISTER, (key, True, json.dumps(schema), ""))
