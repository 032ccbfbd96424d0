"""Networks are schemas, and schemas are a security boundary.

Logged in as a runner login of a network (a member of qtg_<net>_runner):
  * the other network does not exist for it: no USAGE on its schema, every
    table, view and function there refused with insufficient_privilege (42501);
  * in its own network it cannot read or write a table directly; it reads the
    views (but the readers' own, the audit trail) and changes state only
    through the worker procedures; with an
    operator login (qtg_<net>_operator) creating and approving, they run a
    movement registered by the admin to COMPLETED;
  * it cannot create, approve or cancel a movement, and the operator cannot
    claim or complete nodes: each credential holds its half only; neither
    may register an executor (the admin's deploy step);
  * bound at connection level, it stays bound after a rolled-back transaction.
No function is executable by PUBLIC, and the installer's functions (qtg_admin)
by no runner. The sim executor's outside world is split by network too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    bind,
    claim,
    create,
    node,
    observe,
    pin_clock,
    plan,
    register_sim,
    submit,
)
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

NETWORKS = ("mainnet", "testnet")
OTHER = {"mainnet": "testnet", "testnet": "mainnet"}
T0 = "2026-01-01 00:00:00+00"
LATER = "2026-01-01 01:00:00+00"

Denied = psycopg.errors.InsufficientPrivilege


def runner(db: TestDatabase, network: str) -> psycopg.Connection[Any]:
    conn = bind(db.connect(db.runner_dsn(network)), network)
    pin_clock(conn, T0)
    return conn


def admin(db: TestDatabase, network: str) -> psycopg.Connection[Any]:
    """The superuser, bound to the network: it registers the executors."""
    return bind(db.connect(), network)


def operator(db: TestDatabase, network: str) -> psycopg.Connection[Any]:
    conn = bind(db.connect(db.operator_dsn(network)), network)
    pin_clock(conn, T0)
    return conn


def catalog(db: TestDatabase, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Rows of a catalog query, read as the superuser."""
    with psycopg.connect(db.dsn) as conn:
        return conn.execute(query, params).fetchall()


def relations(db: TestDatabase, schema: str, kinds: str) -> list[str]:
    """Names of the schema's relations of the given relkinds ('r' tables, 'v' views)."""
    rows = catalog(
        db,
        """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND c.relkind = ANY(%s) ORDER BY 1""",
        (schema, list(kinds)),
    )
    assert rows, f"no relations of kind {kinds} in {schema}"
    return [r[0] for r in rows]


def routines(db: TestDatabase, schema: str) -> list[tuple[int, str, str, list[str]]]:
    """(oid, kind, name, argument types) of every function and procedure in the schema."""
    rows = catalog(
        db,
        """SELECT p.oid::int, p.prokind::text, p.proname,
                  array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t)
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = %s ORDER BY p.proname""",
        (schema,),
    )
    assert rows, f"no routines in {schema}"
    return [(int(oid), kind, name, list(args)) for oid, kind, name, args in rows]


def plain_column(db: TestDatabase, schema: str, table: str) -> str:
    """A column of the table that an UPDATE may name (not an identity or generated one)."""
    rows = catalog(
        db,
        """SELECT attname FROM pg_attribute
            WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped
              AND attidentity = '' AND attgenerated = ''
            ORDER BY attnum LIMIT 1""",
        (f"{schema}.{table}",),
    )
    assert rows, f"{schema}.{table} has no plain column"
    return str(rows[0][0])


def call_with_nulls(schema: str, kind: str, name: str, args: list[str]) -> sql.Composed:
    """SELECT schema.name(NULL::t1, ...) (CALL for a procedure): checks privileges first."""
    nulls = sql.SQL(", ").join(sql.SQL("NULL::{}").format(sql.SQL(t)) for t in args)
    verb = sql.SQL("CALL" if kind == "p" else "SELECT")
    return sql.SQL("{} {}.{}({})").format(verb, sql.Identifier(schema), sql.Identifier(name), nulls)


def assert_denied(conn: psycopg.Connection[Any], statement: sql.Composable | str) -> None:
    with pytest.raises(Denied):
        conn.execute(statement)


# --- the other network -------------------------------------------------------


@pytest.mark.parametrize("network", NETWORKS)
def test_a_runner_cannot_use_the_other_networks_schema(db: TestDatabase, network: str) -> None:
    conn = runner(db, network)
    other = OTHER[network]

    def usage(schema: str) -> bool:
        row = conn.execute("SELECT has_schema_privilege(%s, 'USAGE')", (schema,)).fetchone()
        assert row is not None
        return bool(row[0])

    assert not usage(other)
    assert usage(network)


@pytest.mark.parametrize("network", NETWORKS)
def test_a_runner_cannot_read_the_other_networks_tables_or_views(
    db: TestDatabase, network: str
) -> None:
    conn = runner(db, network)
    other = OTHER[network]

    for name in relations(db, other, "rvm"):
        assert_denied(conn, sql.SQL("SELECT 1 FROM {} LIMIT 1").format(sql.Identifier(other, name)))


@pytest.mark.parametrize("network", NETWORKS)
def test_a_runner_cannot_execute_any_function_of_the_other_network(
    db: TestDatabase, network: str
) -> None:
    conn = runner(db, network)
    other = OTHER[network]
    role = f"qtg_{network}_runner"

    for oid, kind, name, args in routines(db, other):
        privileged = conn.execute(
            "SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (role, oid)
        ).fetchone()
        assert privileged == (False,), f"{role} may execute {other}.{name}"
        assert_denied(conn, call_with_nulls(other, kind, name, args))

    # and with real arguments, the calls a worker makes
    schema = sql.Identifier(other)
    assert_denied(conn, sql.SQL("SELECT * FROM {}.claim_ready_nodes('w1', 10)").format(schema))
    assert_denied(conn, sql.SQL("SELECT {}.approve_movement(1)").format(schema))


# --- its own network ---------------------------------------------------------


def _writes(table: sql.Composable, column: sql.Composable) -> list[sql.Composable]:
    return [
        sql.SQL("INSERT INTO {} DEFAULT VALUES").format(table),
        sql.SQL("UPDATE {} SET {} = {} WHERE false").format(table, column, column),
        sql.SQL("DELETE FROM {} WHERE false").format(table),
        sql.SQL("TRUNCATE {}").format(table),
    ]


@pytest.mark.parametrize("network", NETWORKS)
def test_a_runner_cannot_read_or_write_its_own_tables_directly(
    db: TestDatabase, network: str
) -> None:
    conn = runner(db, network)

    for name in relations(db, network, "rp"):
        table = sql.Identifier(network, name)
        assert_denied(conn, sql.SQL("SELECT 1 FROM {} LIMIT 1").format(table))
        for statement in _writes(table, sql.Identifier(plain_column(db, network, name))):
            assert_denied(conn, statement)


@pytest.mark.parametrize("network", NETWORKS)
def test_a_runner_reads_every_view_of_its_network_but_the_readers_own(
    db: TestDatabase, network: str
) -> None:
    conn = runner(db, network)
    readers_only = {
        str(r[0])
        for r in admin(db, network).execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'v'"
            "   AND obj_description(c.oid, 'pg_class') LIKE 'access: reader%%'",
            (network,),
        )
    }
    assert readers_only == {"audit_outbox"}

    for name in relations(db, network, "v"):
        statement = sql.SQL("SELECT * FROM {} LIMIT 1").format(sql.Identifier(network, name))
        if name in readers_only:
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(statement)
        else:
            conn.execute(statement)


@pytest.mark.parametrize("network", NETWORKS)
def test_a_runner_runs_a_movement_to_completion_through_the_procedures(
    db: TestDatabase, network: str
) -> None:
    conn = runner(db, network)
    desk = operator(db, network)

    register_sim(admin(db, network))
    movement = create(desk, plan(node("send")), "iso-1", actor=None)
    second = bind(db.connect(db.login("bob", f"qtg_{network}_operator").dsn), network)
    assert second.execute("SELECT approve_movement(%s)::text", (movement,)).fetchone() == (
        "APPROVED",
    )
    assert conn.execute("SELECT start_approved_movements(10)").fetchone() == (1,)
    (claimed,) = claim(conn, "dispatcher")
    conn.execute(
        "SELECT record_intent_prepared(%s, %s, p_nonce => 7, p_signed_tx_hash => '0xabc')",
        (claimed["node_id"], claimed["claim_secret"]),
    )
    assert submit(conn, claimed) == "SUBMITTED"
    pin_clock(conn, LATER)
    candidates = [r[0] for r in conn.execute("SELECT * FROM observe_candidates(10)")]
    assert candidates == [claimed["node_id"]]
    result = observe(conn, claimed["node_id"], "COMPLETED")

    assert result is not None and result["node_state"] == "COMPLETED"
    progress = conn.execute(
        """SELECT request_state::text, nodes_total, nodes_completed
             FROM movement_progress WHERE movement_id = %s""",
        (movement,),
    ).fetchone()
    assert progress == ("COMPLETED", 1, 1)
    # it happened in this network only
    superuser = bind(db.connect(), OTHER[network])
    assert superuser.execute("SELECT count(*) FROM movement_requests").fetchone() == (0,)


@pytest.mark.parametrize("network", NETWORKS)
def test_a_runner_cannot_bypass_the_procedures_through_their_internal_helpers(
    db: TestDatabase, network: str
) -> None:
    conn = runner(db, network)
    register_sim(admin(db, network))
    movement = create(operator(db, network), plan(node("send")), "iso-2", actor=None)

    # skipping approval, forging an audit event: both write tables as the caller
    assert_denied(
        conn,
        sql.SQL(
            "SELECT set_movement_states(ARRAY[{}]::bigint[], 'PENDING_APPROVAL',"
            " '{{EXECUTING}}', '{{mallory}}')"
        ).format(sql.Literal(movement)),
    )
    assert_denied(
        conn,
        "SELECT write_audit(ARRAY[('mallory', 'request', '1', NULL, 'approved', NULL, NULL, NULL)"
        "::qtg.audit_event])",
    )

    state = conn.execute(
        "SELECT request_state::text FROM movement_progress WHERE movement_id = %s", (movement,)
    ).fetchone()
    assert state == ("PENDING_APPROVAL",)


@pytest.mark.parametrize("network", NETWORKS)
def test_each_credential_holds_only_its_half_of_the_procedures(
    db: TestDatabase, network: str
) -> None:
    conn = runner(db, network)
    desk = operator(db, network)
    register_sim(admin(db, network))
    movement = create(desk, plan(node("send")), "iso-3", actor=None)
    before = catalog(db, f"SELECT to_jsonb(r)::text FROM {network}.movement_requests r", ())

    # a runner credential cannot create, approve or cancel a movement, nor re-pace a lane
    for statement in (
        "SELECT * FROM create_movement('iso-4', 1, '{\"nodes\": []}'::jsonb)",
        f"SELECT approve_movement({movement})",
        f"SELECT cancel_movement({movement})",
        "SELECT register_template('t', '{\"nodes\": []}'::jsonb)",
        "SELECT upsert_lane_baseline('default', 1)",
        "SELECT register_executor('x', true, '{}'::jsonb)",
    ):
        assert_denied(conn, statement)
    # an operator credential cannot claim or complete work
    for statement in (
        "SELECT * FROM claim_ready_nodes('w', 1)",
        "SELECT start_approved_movements(1)",
        "SELECT complete_submit(1, repeat('0', 64), 'x')",
        "SELECT * FROM claim_recovery_nodes('w', 1)",
        "SELECT register_executor('x', true, '{}'::jsonb)",
    ):
        assert_denied(desk, statement)

    assert catalog(db, f"SELECT to_jsonb(r)::text FROM {network}.movement_requests r", ()) == before


def test_the_sim_world_is_split_by_network(db: TestDatabase) -> None:
    testnet = db.connect(db.runner_dsn("testnet"))
    mainnet = db.connect(db.runner_dsn("mainnet"))
    insert = """INSERT INTO qtg_sim.side_effects
                (network, idempotency_key, node_id, lane, amount, outcome, completes_at)
                VALUES (%s, %s, 1, 'instant', 1, 'COMPLETED', now())"""
    mainnet.execute(insert, ("mainnet", "m1x1"))

    # testnet sees none of mainnet's rows and cannot write any
    assert testnet.execute("SELECT count(*) FROM qtg_sim.side_effects").fetchone() == (0,)
    with pytest.raises(Denied):
        testnet.execute(insert, ("mainnet", "m2x1"))
    updated = testnet.execute("UPDATE qtg_sim.side_effects SET hidden = true")
    assert updated.rowcount == 0
    assert mainnet.execute("SELECT count(*) FROM qtg_sim.side_effects").fetchone() == (1,)


# --- binding -----------------------------------------------------------------


RollBack = Callable[[psycopg.Connection[Any]], None]


def fail_inside_a_transaction(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.DatabaseError) as raised, conn.transaction():
        conn.execute("SET search_path = public")
        conn.execute("SET ROLE NONE")
        conn.execute("SELECT * FROM testnet.claim_ready_nodes('', 1)")
    assert raised.value.sqlstate == "QT002"


def roll_back_explicitly(conn: psycopg.Connection[Any]) -> None:
    conn.execute("BEGIN")
    conn.execute("SET search_path = public")
    conn.execute("ROLLBACK")


@pytest.mark.parametrize("roll_back", [fail_inside_a_transaction, roll_back_explicitly])
def test_a_connection_bound_at_login_stays_bound_after_a_rollback(
    db: TestDatabase, roll_back: RollBack
) -> None:
    dsn = db.runner_dsn("testnet")
    conn = db.connect(dsn, options="-c search_path=testnet,qtg")

    def binding() -> tuple[Any, ...] | None:
        return conn.execute(
            "SELECT current_user, session_user, current_setting('search_path'), current_schema()"
        ).fetchone()

    login = conninfo_to_dict(dsn)["user"]
    bound = (login, login, "testnet,qtg", "testnet")
    assert binding() == bound

    roll_back(conn)

    assert binding() == bound
    # unqualified names still resolve to testnet, and mainnet is still out of reach
    conn.execute("SELECT * FROM pipeline_counts")
    assert conn.execute("SELECT count(*) FROM observe_candidates(10)").fetchone() == (0,)
    assert_denied(conn, "SELECT * FROM mainnet.pipeline_counts")


# --- grants ------------------------------------------------------------------


def test_no_function_is_executable_by_public(db: TestDatabase) -> None:
    conn = db.connect()

    rows = conn.execute(
        """SELECT n.nspname || '.' || p.proname
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = ANY(%s) AND has_function_privilege('public', p.oid, 'EXECUTE')""",
        (["mainnet", "testnet", "qtg", "qtg_admin"],),
    ).fetchall()
    assert rows == []
    total = conn.execute(
        """SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = ANY(%s)""",
        (["mainnet", "testnet"],),
    ).fetchone()
    assert total is not None and total[0] > 0


@pytest.mark.parametrize("network", NETWORKS)
def test_a_runner_cannot_execute_the_installers_functions(db: TestDatabase, network: str) -> None:
    conn = runner(db, network)
    role = f"qtg_{network}_runner"

    for oid, kind, name, args in routines(db, "qtg_admin"):
        privileged = conn.execute(
            "SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (role, oid)
        ).fetchone()
        assert privileged == (False,), f"{role} may execute qtg_admin.{name}"
        assert_denied(conn, call_with_nulls("qtg_admin", kind, name, args))
    assert_denied(conn, f"SELECT qtg_admin.grant_runner_privileges('{network}')")
    assert_denied(conn, "SELECT * FROM qtg_admin.networks")
