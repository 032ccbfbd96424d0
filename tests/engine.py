"""Shared helpers for tests that drive the engine's procedures directly.

Every helper takes an open psycopg connection whose search_path is bound to one
network (see ``bind``) and calls the procedures exactly as a runner would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

SIM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["lane"],
    "properties": {
        "lane": {"type": "string", "minLength": 1},
        "amount": {"type": "number", "exclusiveMinimum": 0},
        "latency_s": {"type": "number", "minimum": 0},
    },
    "additionalProperties": False,
}

TERMINAL_NODE_STATES = {"COMPLETED", "FAILED", "SKIPPED"}
TERMINAL_REQUEST_STATES = {"COMPLETED", "FAILED", "CANCELLED", "EXPIRED"}


def bind(conn: psycopg.Connection[Any], network: str = "testnet") -> psycopg.Connection[Any]:
    """Pin the connection's search_path to one network (outside any transaction)."""
    conn.execute(sql.SQL("SET search_path = {}, qtg").format(sql.Identifier(network)))
    return conn


def pin_clock(conn: psycopg.Connection[Any], at: str | None) -> None:
    """Pin qtg.clock() to ``at`` (an ISO timestamp) for this session; None un-pins."""
    if at is None:
        conn.execute("RESET qtg.now")
    else:
        conn.execute("SELECT set_config('qtg.now', %s, false)", (at,))


def register_sim(
    conn: psycopg.Connection[Any], key: str = "sim", has_side_effect: bool = True
) -> None:
    conn.execute(
        "SELECT register_executor(%s, %s, %s::jsonb, 'test executor')",
        (key, has_side_effect, json.dumps(SIM_SCHEMA)),
    )


def node(
    key: str,
    depends_on: Iterable[str] = (),
    executor: str = "sim",
    lane: str = "default",
    **config: Any,
) -> dict[str, Any]:
    return {
        "key": key,
        "executor": executor,
        "config": {"lane": lane, **config},
        "depends_on": list(depends_on),
    }


def plan(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": list(nodes)}


def create(
    conn: psycopg.Connection[Any],
    the_plan: dict[str, Any],
    external_id: str,
    amount: str = "100",
    actor: str = "alice",
    expires_at: str | None = None,
) -> int:
    row = conn.execute(
        "SELECT movement_id FROM create_movement(%s, %s::numeric, %s::jsonb,"
        " p_expires_at => %s::timestamptz, p_actor => %s)",
        (external_id, amount, json.dumps(the_plan), expires_at, actor),
    ).fetchone()
    assert row is not None
    return int(row[0])


def create_started(
    conn: psycopg.Connection[Any], the_plan: dict[str, Any], external_id: str, **kw: Any
) -> int:
    """Create, approve (as a second operator) and start one movement."""
    movement_id = create(conn, the_plan, external_id, **kw)
    conn.execute("SELECT approve_movement(%s, 'bob')", (movement_id,))
    conn.execute("SELECT start_approved_movements(1000)")
    return movement_id


def node_ids(conn: psycopg.Connection[Any], movement_id: int) -> dict[str, int]:
    rows = conn.execute(
        "SELECT node_key, id FROM movement_request_nodes WHERE request_id = %s", (movement_id,)
    ).fetchall()
    return {key: int(node_id) for key, node_id in rows}


def node_states(conn: psycopg.Connection[Any], movement_id: int) -> dict[str, str]:
    rows = conn.execute(
        "SELECT node_key, node_state::text FROM movement_request_nodes WHERE request_id = %s",
        (movement_id,),
    ).fetchall()
    return {key: state for key, state in rows}


def request_state(conn: psycopg.Connection[Any], movement_id: int) -> str:
    row = conn.execute(
        "SELECT request_state::text FROM movement_requests WHERE id = %s", (movement_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def claim(
    conn: psycopg.Connection[Any], worker: str = "w1", max_nodes: int = 100
) -> list[dict[str, Any]]:
    """claim_ready_nodes as a list of dicts (node_id, claim_token, node_key, ...)."""
    cur = conn.execute("SELECT * FROM claim_ready_nodes(%s, %s)", (worker, max_nodes))
    names = [c.name for c in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def submit(conn: psycopg.Connection[Any], claimed: dict[str, Any], settled: bool = False) -> str:
    row = conn.execute(
        "SELECT complete_submit(%s, %s, %s, p_settled => %s)::text",
        (claimed["node_id"], claimed["claim_token"], f"ref-{claimed['node_id']}", settled),
    ).fetchone()
    assert row is not None
    return str(row[0])


def observe(
    conn: psycopg.Connection[Any],
    node_id: int,
    outcome: str,
    retry_after: float | None = None,
    worker: str = "obs",
) -> dict[str, Any] | None:
    """One observer round for one node in one transaction: claim_observe then
    complete_observe. Returns complete_observe's row, or None on a claim miss."""
    with conn.transaction():
        cur = conn.execute("SELECT claim_token FROM claim_observe(%s, %s)", (node_id, worker))
        row = cur.fetchone()
        if row is None:
            return None
        cur = conn.execute(
            "SELECT node_state::text, observe_phase::text, next_observe_at"
            " FROM complete_observe(%s, %s, %s, NULL, %s::numeric)",
            (node_id, row[0], outcome, retry_after),
        )
        result = cur.fetchone()
        assert result is not None
        return {"node_state": result[0], "observe_phase": result[1], "next_observe_at": result[2]}


def snapshot(
    conn: psycopg.Connection[Any],
    tables: Sequence[str] = (
        "movement_requests",
        "movement_request_nodes",
        "movement_plan_edges",
        "node_intents",
        "callback_outbox",
        "audit_outbox",
        "worker_heartbeats",
        "executors",
        "lane_baselines",
    ),
) -> dict[str, list[Any]]:
    """Every row of the network's tables, to assert that a failed call changed nothing."""
    result: dict[str, list[Any]] = {}
    for table in tables:
        rows = conn.execute(
            sql.SQL("SELECT to_jsonb(t)::text FROM {} t ORDER BY 1").format(sql.Identifier(table))
        ).fetchall()
        result[table] = [r[0] for r in rows]
    return result


def assert_rejected(
    conn: psycopg.Connection[Any],
    sqlstate: str,
    query: str,
    params: Sequence[Any] = (),
    tables: Sequence[str] | None = None,
) -> psycopg.Error:
    """Run ``query`` on an autocommit connection and expect it to fail with
    ``sqlstate`` and to leave every table (see ``snapshot``) as it was.
    Returns the error, for checks on its message."""
    before = snapshot(conn) if tables is None else snapshot(conn, tables)
    try:
        conn.execute(query, params)
    except psycopg.Error as exc:
        assert exc.sqlstate == sqlstate, f"expected {sqlstate}, got {exc.sqlstate}: {exc}"
        error = exc
    else:
        raise AssertionError(f"expected {sqlstate}, but the call succeeded: {query} {params}")
    after = snapshot(conn) if tables is None else snapshot(conn, tables)
    assert after == before, f"a call rejected with {sqlstate} changed the tables"
    return error


class Written(NamedTuple):
    """What one transaction returned and wrote to the outboxes."""

    rows: list[tuple[Any, ...]]
    audit: list[tuple[str, str, str, str | None, str | None]]  # entity, id, action, from, to
    callbacks: list[tuple[int, str]]  # request_id, event_type


def in_one_transaction(
    conn: psycopg.Connection[Any], query: str, params: Sequence[Any] = ()
) -> Written:
    """Run ``query`` in its own transaction and return its rows with the audit_outbox
    and callback_outbox rows that this same transaction wrote (xmin = its xid)."""
    with conn.transaction():
        cur = conn.execute(query, params)
        rows = cur.fetchall() if cur.description else []
        audit = conn.execute(
            "SELECT entity, entity_id, action, from_state, to_state FROM audit_outbox"
            " WHERE xmin = pg_current_xact_id()::xid ORDER BY id"
        ).fetchall()
        callbacks = conn.execute(
            "SELECT request_id, event_type FROM callback_outbox"
            " WHERE xmin = pg_current_xact_id()::xid ORDER BY id"
        ).fetchall()
    return Written(rows, audit, callbacks)


def wait_until_blocked_on_a_lock(
    observer: psycopg.Connection[Any], pid: int, timeout: float = 10.0
) -> None:
    """Poll pg_stat_activity (from ``observer``) until backend ``pid`` waits on a lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = observer.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited on a lock")
