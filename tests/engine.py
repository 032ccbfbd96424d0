"""Shared helpers for tests that drive the engine's procedures directly.

Every helper takes an open psycopg connection whose search_path is bound to one
network (see ``bind``) and calls the procedures exactly as a runner would.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

import psycopg
from psycopg import pq, sql

from qtg_runner.db import procs

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


PEOPLE = ("alice", "bob", "carol")
"""Operators the tests act as on their superuser connection (``as_person``): roles
without a login, members of every network's operator role, made once per server
by conftest. Tests of logins themselves use ``db.login`` instead."""


@contextmanager
def as_person(conn: psycopg.Connection[Any], person: str | None) -> Iterator[None]:
    """Run the block with ``session_user`` = ``person`` (one of PEOPLE), the identity
    every operator procedure reads. Needs the test's superuser connection; None
    leaves the connection's own login."""
    if person is None:
        yield
        return
    conn.execute(sql.SQL("SET SESSION AUTHORIZATION {}").format(sql.Identifier(person)))
    try:
        yield
    finally:
        # in a failed transaction the rollback undoes the SET anyway
        if conn.info.transaction_status != pq.TransactionStatus.INERROR:
            conn.execute("RESET SESSION AUTHORIZATION")


def approve(conn: psycopg.Connection[Any], movement_id: int, person: str | None = "bob") -> str:
    """approve_movement as ``person`` (see ``as_person``)."""
    with as_person(conn, person):
        return procs.approve_movement(movement_id).one(conn)


def cancel(conn: psycopg.Connection[Any], movement_id: int, person: str | None = "carol") -> str:
    """cancel_movement as ``person`` (see ``as_person``)."""
    with as_person(conn, person):
        return procs.cancel_movement(movement_id).one(conn)


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
    procs.register_executor(key, has_side_effect, SIM_SCHEMA, "test executor").one(conn)


def add_lanes(conn: psycopg.Connection[Any], *lanes: str, baseline: float = 60) -> None:
    """Give each lane a row of lane_baselines (the default lane's pacing: a 60 s
    baseline), as the owner's deploy step: a plan may only name a lane that has one."""
    for lane in lanes:
        procs.upsert_lane_baseline(lane, baseline).one(conn)


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


RECEIVER = "https://receiver.example/qtg"
"""The callback target of the movements ``create`` makes: a movement that
names none writes no callback row."""


def plan(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": list(nodes)}


def create(
    conn: psycopg.Connection[Any],
    the_plan: dict[str, Any],
    external_id: str,
    amount: str = "100",
    actor: str | None = "alice",
    expires_at: str | datetime | None = None,
    callback_url: str | None = RECEIVER,
) -> int:
    """create_movement as ``actor`` (see ``as_person``; None: the connection's
    login), its callbacks to RECEIVER unless told otherwise."""
    if isinstance(expires_at, str):
        expires_at = datetime.fromisoformat(expires_at)
    with as_person(conn, actor):
        created = procs.create_movement(
            external_id,
            Decimal(str(amount)),
            plan=the_plan,
            expires_at=expires_at,
            callback_url=callback_url,
        ).one(conn)
    return created.movement_id


def create_started(
    conn: psycopg.Connection[Any], the_plan: dict[str, Any], external_id: str, **kw: Any
) -> int:
    """Create, approve (as a second operator) and start one movement."""
    movement_id = create(conn, the_plan, external_id, **kw)
    approve(conn, movement_id)
    procs.start_approved_movements(1000).one(conn)
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


def forged_secret() -> str:
    """A well-formed claim secret (64 hex characters) that no claim handed out."""
    return secrets.token_hex(32)


def claim(
    conn: psycopg.Connection[Any], worker: str = "w1", max_nodes: int = 100
) -> list[dict[str, Any]]:
    """claim_ready_nodes as a list of dicts (node_id, claim_secret, node_key, ...)."""
    return [asdict(row) for row in procs.claim_ready_nodes(worker, max_nodes).all(conn)]


def submit(conn: psycopg.Connection[Any], claimed: dict[str, Any], settled: bool = False) -> str:
    node_id, secret = claimed["node_id"], claimed["claim_secret"]
    state = procs.complete_submit(node_id, secret, f"ref-{node_id}", settled=settled).one(conn)
    return state.value


def observe(
    conn: psycopg.Connection[Any],
    node_id: int,
    outcome: str,
    retry_after: float | None = None,
    worker: str = "obs",
    evidence: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """One observer round for one node in one transaction: claim_observe then
    complete_observe. Returns complete_observe's row, or None on a claim miss."""
    return observe_claim(conn, node_id, outcome, retry_after, worker, evidence)[0]


def observe_claim(
    conn: psycopg.Connection[Any],
    node_id: int,
    outcome: str,
    retry_after: float | None = None,
    worker: str = "obs",
    evidence: dict[str, Any] | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """``observe``, and the secret of the observer's claim (None on a miss): it
    proved the claim in the round's transaction, and proves nothing after it."""
    with conn.transaction():
        claimed = procs.claim_observe(node_id, worker).one_or_none(conn)
        if claimed is None:
            return None, None
        complete = procs.complete_observe(
            node_id, claimed.claim_secret, outcome, evidence, retry_after, worker
        )
        out = complete.one(conn)
    result = {
        "node_state": out.node_state.value,
        "observe_phase": out.observe_phase.value if out.observe_phase is not None else None,
        "next_observe_at": out.next_observe_at,
    }
    return result, claimed.claim_secret


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


def fingerprint(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, str]]:
    """The row count and an md5 of the rows of every table in the database (every
    schema: both networks, qtg, the sim world, the migration log): equal before
    and after a refused call, it proves that the call wrote nothing."""
    tables = conn.execute(
        "SELECT schemaname, tablename FROM pg_tables"
        " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
    ).fetchall()
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL(
            "SELECT {}, count(*), md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), ''))"
            " FROM {} t"
        ).format(sql.Literal(f"{schema}.{table}"), sql.Identifier(schema, table))
        for schema, table in tables
    )
    # without parallel workers: the planner, with ~100 aggregates over tables
    # never analyzed, picks a parallel plan whose workers' start is 30 ms of 40
    found = conn.execute(
        "SELECT current_setting('max_parallel_workers_per_gather'),"
        " set_config('max_parallel_workers_per_gather', '0', false)"
    ).fetchone()
    assert found is not None
    try:
        return {name: (count, digest) for name, count, digest in conn.execute(query)}
    finally:
        conn.execute("SELECT set_config('max_parallel_workers_per_gather', %s, false)", (found[0],))


def assert_rejected(
    conn: psycopg.Connection[Any],
    sqlstate: str,
    query: str,
    params: Sequence[Any] = (),
    tables: Sequence[str] | None = None,
    *,
    watcher: psycopg.Connection[Any] | None = None,
) -> psycopg.Error:
    """Run ``query`` on an autocommit connection and expect it to fail with
    ``sqlstate`` and to leave every table (see ``snapshot``) as it was, as
    ``watcher`` reads them (default ``conn``; a login that may not read the
    tables, a runner's, is watched by the test's superuser connection).
    Returns the error, for checks on its message."""
    watch = watcher or conn
    before = snapshot(watch) if tables is None else snapshot(watch, tables)
    try:
        conn.execute(query, params)
    except psycopg.Error as exc:
        assert exc.sqlstate == sqlstate, f"expected {sqlstate}, got {exc.sqlstate}: {exc}"
        error = exc
    else:
        raise AssertionError(f"expected {sqlstate}, but the call succeeded: {query} {params}")
    after = snapshot(watch) if tables is None else snapshot(watch, tables)
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
    and callback_outbox rows that this same transaction wrote: those beyond the
    last ids it saw before the query (a procedure may write them in a
    subtransaction, whose xmin is not the transaction's own xid; the tests run
    one connection at a time, so no other transaction writes meanwhile)."""
    with conn.transaction():
        last = conn.execute(
            "SELECT (SELECT coalesce(max(id), 0) FROM audit_outbox),"
            " (SELECT coalesce(max(id), 0) FROM callback_outbox)"
        ).fetchone()
        assert last is not None
        cur = conn.execute(query, params)
        rows = cur.fetchall() if cur.description else []
        audit = conn.execute(
            "SELECT entity, entity_id, action, from_state, to_state FROM audit_outbox"
            " WHERE id > %s ORDER BY id",
            (last[0],),
        ).fetchall()
        callbacks = conn.execute(
            "SELECT request_id, event_type FROM callback_outbox WHERE id > %s ORDER BY id",
            (last[1],),
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
