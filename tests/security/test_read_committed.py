"""A runner login decides nothing from a snapshot older than its call.

Every procedure the runner role may call that writes refuses a transaction
that is not READ COMMITTED (QT002): a REPEATABLE READ transaction opened
before an operator trips a breaker, and kept open, would otherwise claim
past the breaker, the pause and the value limits, which a claim reads but
does not lock. Played with the runner login; the catalog test holds every
such procedure, present and future, to the rule."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    add_lanes,
    as_person,
    bind,
    claim,
    create_started,
    fingerprint,
    node,
    node_ids,
    pin_clock,
    plan,
)
from psycopg import sql
from rows import T0, Conn, node_row

from qtg_runner.db import procs


def runner_in(db: TestDatabase, isolation: str) -> Conn:
    """The runner login in a transaction at ``isolation`` whose snapshot is taken now."""
    runner = bind(db.connect(db.runner_dsn("testnet"), autocommit=True))
    pin_clock(runner, T0.isoformat())
    runner.autocommit = False
    runner.execute(f"BEGIN ISOLATION LEVEL {isolation}")
    runner.execute("SELECT count(*) FROM value_limit_status").fetchall()
    return runner


def test_a_claim_from_a_snapshot_older_than_a_tripped_breaker_is_refused(
    db: TestDatabase, conn: Conn
) -> None:
    add_lanes(conn, "x")
    paid = node_ids(conn, create_started(conn, plan(node("a", lane="x")), "m1"))["a"]
    stale = runner_in(db, "REPEATABLE READ")
    with as_person(conn, "alice"):
        procs.trip_breaker("network", "*", "incident").one(conn)
    assert claim(conn) == []  # the honest claim is held
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as refused:
        procs.claim_ready_nodes("node_dispatcher", 10).all(stale)
    stale.rollback()
    assert refused.value.sqlstate == "QT002"
    assert "claim_ready_nodes needs READ COMMITTED, not repeatable read" in str(refused.value)
    assert fingerprint(conn) == before and node_row(conn, paid)["node_state"] == "READY"


def writing_runner_routines(conn: Conn) -> list[tuple[str, list[str]]]:
    rows = conn.execute(
        """SELECT p.proname, array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t)
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'testnet' AND p.provolatile = 'v'
              AND has_function_privilege('qtg_testnet_runner', p.oid, 'EXECUTE')
            ORDER BY 1"""
    ).fetchall()
    return [(str(name), list(types)) for name, types in rows]


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_every_runner_procedure_that_writes_refuses_an_older_snapshot(
    db: TestDatabase, conn: Conn, isolation: str
) -> None:
    routines = writing_runner_routines(conn)
    assert (
        len(routines) >= 40
        and ("claim_ready_nodes", ["text", "integer", "numeric", "text", "integer"]) in routines
    )
    not_refused: dict[str, Any] = {}
    for name, types in routines:
        call = sql.SQL("SELECT * FROM {}({})").format(
            sql.Identifier(name),
            sql.SQL(", ").join(sql.SQL("NULL::{}").format(sql.SQL(t)) for t in types),
        )
        stale = runner_in(db, isolation)
        try:
            stale.execute(call)
            not_refused[name] = "ran"
        except psycopg.Error as exc:
            if exc.sqlstate != "QT002" or "needs READ COMMITTED" not in str(exc):
                not_refused[name] = f"{exc.sqlstate}: {exc}"
        finally:
            stale.close()
    assert not not_refused, "\n".join(f"{name}: {why[:160]}" for name, why in not_refused.items())
