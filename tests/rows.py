"""Helpers that several test files share, written once.

- the pinned test clock: ``T0`` and times relative to it (``iso_at`` for what
  ``pin_clock`` and timestamp parameters take, ``time_at`` for what a row reads
  back), ``set_clock``;
- small plans: ``ONE``, ``CHAIN``, ``DIAMOND``;
- a table's row as a dict (``node_row``, ``request_row``, ``intent_row``), the
  callbacks of a movement, the state changes among written audit rows;
- short paths through the procedures: claim one node (``claim_of``), record its
  intent (``prepare``), fail its submit (``fail``), claim recovery
  (``recovery_claims``), a movement brought to a given state (``movement_in``), a
  submitted node (``submitted``);
- a rule inside the engine that only some rows break (``plant_rule``), for
  the batch calls that apply each node on its own;
- configuration proposals: the tables a refused proposal call leaves as they
  were (``CONFIG_TABLES``), a connection of a person's own login with the
  clock pinned (``person``), a proposal's row, a lane's settings, the
  warnings a connection receives (``notices``).

Every helper takes a connection bound to one network (``engine.bind``), as the
``conn`` fixture of conftest.py gives.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
from engine import (
    approve,
    bind,
    cancel,
    create,
    create_started,
    node,
    node_ids,
    pin_clock,
    plan,
    request_state,
    submit,
)
from psycopg import sql
from psycopg.rows import dict_row

from qtg_runner.db import procs
from qtg_runner.db.migrate import sql_dir

Conn = psycopg.Connection[Any]

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # the `conn` fixture pins the clock here

ONE = plan(node("a"))
CHAIN = plan(node("a"), node("b", ["a"]))
DIAMOND = plan(node("a"), node("b", ["a"]), node("c", ["a"]), node("d", ["b", "c"]))


# --- the clock ----------------------------------------------------------------------------------


def iso_at(seconds: float) -> str:
    """T0 + ``seconds`` as an ISO string: for ``pin_clock`` and timestamp parameters."""
    return (T0 + timedelta(seconds=seconds)).isoformat()


def time_at(seconds: float) -> datetime:
    """T0 + ``seconds`` as a datetime: what a timestamptz column reads back as."""
    return T0 + timedelta(seconds=seconds)


def set_clock(conn: Conn, seconds: float) -> None:
    """Pin the session's clock at T0 + ``seconds``."""
    pin_clock(conn, iso_at(seconds))


# --- rows ---------------------------------------------------------------------------------------


def node_row(conn: Conn, node_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM movement_request_nodes WHERE id = %s", (node_id,)
        ).fetchone()
    assert row is not None
    return row


def request_row(conn: Conn, movement_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM movement_requests WHERE id = %s", (movement_id,)
        ).fetchone()
    assert row is not None
    return row


def intent_row(conn: Conn, node_id: int, claim: int | None = None) -> dict[str, Any]:
    """The intent of the node's ``claim``-th claim (its claim_token, the claim
    counter), or of its latest claim."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            """SELECT * FROM node_intents WHERE node_id = %s AND claim_token = coalesce(%s,
                   (SELECT max(claim_token) FROM node_intents WHERE node_id = %s))""",
            (node_id, claim, node_id),
        ).fetchone()
    assert row is not None
    return row


def audit_rows(conn: Conn, movement_id: int) -> list[dict[str, Any]]:
    """The movement's audit rows in order: actor, login, action, from and to state."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            """SELECT actor, login, action, from_state, to_state FROM audit_outbox
                WHERE request_id = %s ORDER BY id""",
            (movement_id,),
        ).fetchall()


def callbacks(conn: Conn, movement_id: int) -> list[str]:
    """The event types of a movement's callback_outbox rows, oldest first."""
    rows = conn.execute(
        "SELECT event_type FROM callback_outbox WHERE request_id = %s ORDER BY id", (movement_id,)
    ).fetchall()
    return [r[0] for r in rows]


def state_changes(written_audit: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    """The state_changed rows among audit rows read by ``engine.in_one_transaction``."""
    return {a for a in written_audit if a[2] == "state_changed"}


# --- paths through the procedures ---------------------------------------------------------------


def claim_of(conn: Conn, node_id: int, lease: int = 300, max_nodes: int = 100) -> dict[str, Any]:
    """Claim up to ``max_nodes`` READY nodes and return the claim of ``node_id``."""
    claims = {
        c.node_id: asdict(c) for c in procs.claim_ready_nodes("w1", max_nodes, lease).all(conn)
    }
    assert node_id in claims, f"node {node_id} was not claimed: {sorted(claims)}"
    return claims[node_id]


def prepare(conn: Conn, claimed: dict[str, Any], tx_hash: str = "0xaa") -> None:
    """record_intent_prepared with nonce 7 and one signed hash."""
    procs.record_intent_prepared(
        claimed["node_id"], claimed["claim_secret"], nonce=7, signed_tx_hash=tx_hash
    ).one(conn)


def fail(conn: Conn, claimed: dict[str, Any], retryable: bool, after: float | None = None) -> str:
    """fail_submit; returns the node's new state."""
    call = procs.fail_submit(claimed["node_id"], claimed["claim_secret"], "boom", retryable, after)
    return str(call.one(conn))


def recovery_claims(conn: Conn, lease: int = 120) -> dict[int, dict[str, Any]]:
    """claim_recovery_nodes as worker 'rec': node id -> its claim."""
    return {c.node_id: asdict(c) for c in procs.claim_recovery_nodes("rec", 100, lease).all(conn)}


def movement_in(conn: Conn, state: str, external_id: str = "m") -> int:
    """A one-node movement brought to ``state`` through the procedures."""
    if state == "EXPIRED":
        movement_id = create(conn, ONE, external_id, expires_at=iso_at(60))
        pin_clock(conn, iso_at(60))
        assert procs.expire_movements().one(conn) == 1
        return movement_id
    movement_id = create(conn, ONE, external_id)
    if state == "PENDING_APPROVAL":
        return movement_id
    approve(conn, movement_id)
    if state == "APPROVED":
        return movement_id
    procs.start_approved_movements().one(conn)
    if state == "EXECUTING":
        return movement_id
    if state == "CANCELLED":
        cancel(conn, movement_id)
    else:
        claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
        if state == "COMPLETED":
            submit(conn, claimed, settled=True)
        else:
            assert state == "FAILED"
            fail(conn, claimed, retryable=False)
    assert request_state(conn, movement_id) == state
    return movement_id


def submitted(conn: Conn, the_plan: dict[str, Any] = ONE, key: str = "a") -> tuple[int, int]:
    """A started movement whose node ``key`` was submitted at T0 (first observation at 42 s)."""
    movement_id = create_started(conn, the_plan, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)[key])
    assert submit(conn, claimed) == "SUBMITTED"
    return movement_id, claimed["node_id"]


def plant_rule(conn: Conn, table: str, broken_when: str, sqlstate: str = "23514") -> None:
    """A rule inside the engine that only some rows break: a trigger on the
    network's ``table`` raising ``sqlstate`` (a check violation by default) for
    a row written with ``broken_when`` (an SQL condition on NEW) true. As a NaN
    lane baseline once made one node of a batch break the SUBMITTED check after
    the side effects of 31 nodes had gone out."""
    function = sql.Identifier("public", f"planted_rule_{table}")
    conn.execute(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF {} THEN RAISE EXCEPTION 'a planted rule on {} is broken by row %', NEW.id"
            " USING ERRCODE = {}; END IF; RETURN NEW; END $$"
        ).format(function, sql.SQL(broken_when), sql.SQL(table), sql.Literal(sqlstate))
    )
    conn.execute(
        sql.SQL(
            "CREATE TRIGGER planted_rule BEFORE INSERT OR UPDATE ON {} FOR EACH ROW"
            " EXECUTE FUNCTION {}()"
        ).format(sql.Identifier(table), function)
    )


# --- configuration proposals --------------------------------------------------------------------

# what a proposal may change, with its own rows and the audit log: a refused
# call leaves them all as they were
CONFIG_TABLES = (
    "config_proposals",
    "lane_baselines",
    "movement_templates",
    "executors",
    "engine_limits",
    "audit_outbox",
)


def person(
    db: Any, name: str, role: str = "qtg_testnet_operator", network: str = "testnet"
) -> Conn:
    """A connection of ``name``'s own login (``db.login``), a member of ``role``,
    bound to ``network``, its clock pinned at T0 like the ``conn`` fixture's."""
    conn = bind(db.connect(db.login(name, role).dsn), network)
    set_clock(conn, 0)
    return conn


def proposal_row(conn: Conn, proposal_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM config_proposals WHERE id = %s", (proposal_id,)).fetchone()
    assert row is not None
    return row


def lane_settings(conn: Conn, lane: str) -> dict[str, Any] | None:
    """A lane's row of lane_baselines but its name and updated_at (None: no row)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM lane_baselines WHERE lane = %s", (lane,)).fetchone()
    if row is None:
        return None
    return {k: v for k, v in row.items() if k not in ("lane", "updated_at")}


def as_decimals(settings: dict[str, Any]) -> dict[str, Decimal]:
    """A proposal's lane settings (JSON numbers) as Decimals, as ``lane_settings`` reads them."""
    return {k: Decimal(str(v)) for k, v in settings.items()}


def notices(conn: Conn) -> list[tuple[str | None, str | None, str]]:
    """The notices and warnings ``conn`` receives from now on: SQLSTATE, severity, message."""
    seen: list[tuple[str | None, str | None, str]] = []
    conn.add_notice_handler(
        # a Diagnostic is only valid during the callback: keep its fields
        lambda d: seen.append((d.sqlstate, d.severity_nonlocalized, d.message_primary or ""))
    )
    return seen


def migrations_from(first: str) -> list[str]:
    """The migrations from ``first`` on, oldest first: what a rollback to before
    ``first`` rolls back (newest first, reversed)."""
    return sorted(
        p.stem
        for p in (sql_dir() / "schemas").glob("*.sql")
        if not p.name.endswith(".rollback.sql") and p.stem >= first
    )


def plant_history(
    conn: Conn, template_id: int, count: int, then: str = "", params: dict[str, Any] | None = None
) -> None:
    """``count`` COMPLETED copies of node ``template_id`` in its movement, written
    directly in one statement (session_replication_role replica: consistent by
    construction, and fast): a history for the plan tests. ``then`` continues the
    statement after the CTE ``nodes`` of the copies (id, node_key 'history-1' ..,
    request_id, external_ref: a hash of its own, finished_at), with ``params``;
    the tables are analyzed afterwards."""
    statement = f"""
        WITH nodes AS (
          INSERT INTO movement_request_nodes (request_id, node_key, executor_key, has_side_effect,
                                              node_config, lane, node_state, pending_parents,
                                              claim_token, submit_attempts, external_ref,
                                              created_at, updated_at, finished_at, claimed_at,
                                              submitted_at)
          SELECT n.request_id, 'history-' || g, n.executor_key, n.has_side_effect, n.node_config,
                 n.lane, 'COMPLETED', 0, 1, 1, '0x' || md5(g::text) || md5('tx' || g),
                 n.created_at, n.updated_at, n.finished_at, n.claimed_at, n.submitted_at
            FROM movement_request_nodes n CROSS JOIN generate_series(1, %(count)s) g
           WHERE n.id = %(template_id)s
          RETURNING id, node_key, request_id, external_ref, finished_at
        )
        {then or "SELECT count(*) FROM nodes"}"""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(statement, {"count": count, "template_id": template_id, **(params or {})})
    conn.execute("ANALYZE")
