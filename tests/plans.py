"""Plans of the statements inside the procedures, as PostgreSQL chose them while
the procedures ran (auto_explain, nested statements included)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from conftest import module_database
from engine import as_person, bind, pin_clock, register_sim
from psycopg import sql

LATER = "2026-01-01 00:30:00+00"  # observations due, the dispatcher's heartbeat long stopped


@contextmanager
def plans_database(
    pg_server: str, template_db: str, prefix: str, at: str
) -> Iterator[tuple[str, psycopg.Connection[Any]]]:
    """A database of its own for a module's plans (a clone of the template, the
    sim executor registered, the clock pinned at ``at``): its superuser DSN and a
    connection to set it up with; dropped afterwards."""
    with (
        module_database(pg_server, template_db, prefix) as dsn,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        bind(conn)
        pin_clock(conn, at)
        register_sim(conn)
        yield dsn, conn


def create_movements(
    conn: psycopg.Connection[Any], prefix: str, count: int, plan: str, approve: bool = True
) -> None:
    """``count`` movements of ``plan`` (JSON) made by alice in one statement,
    external ids ``prefix`` 1..count; then, with ``approve``, every movement
    waiting for approval approved (by the connection's own login)."""
    with as_person(conn, "alice"):
        conn.execute(
            """SELECT count(*) FROM generate_series(1, %s) g
                CROSS JOIN LATERAL create_movement(%s || g, 100, %s::jsonb)""",
            (count, prefix, plan),
        )
    if approve:
        conn.execute(
            "SELECT count(approve_movement(id)) FROM movement_requests"
            " WHERE request_state = 'PENDING_APPROVAL'"
        )


def _walk(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _walk(child)


class Explaining:
    """One connection whose calls report their plans (``run``), every call's
    effects kept until the session's transaction is rolled back."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._plans: list[dict[str, Any]] = []
        conn.add_notice_handler(self._on_notice)

    def _on_notice(self, diag: psycopg.errors.Diagnostic) -> None:
        message = diag.message_primary or ""
        if "plan:" in message and "{" in message:
            self._plans.append(json.loads(message[message.index("{") :]))

    def run(
        self, call: str | sql.Composable, params: Any = None
    ) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
        """The rows of ``call`` (with ``params``) and every plan node of every
        statement it ran (nested ones included)."""
        self._plans.clear()
        rows = self.conn.execute(call, params).fetchall()
        # a statement sent with parameters reports its plan when its portal is
        # closed, which the next statement does (a utility one: no plan of its own)
        self.conn.execute("SHOW auto_explain.log_format")
        return rows, [node for plan in self._plans for node in _walk(plan["Plan"])]


@contextmanager
def explaining(dsn: str, analyze: bool = False, at: str = LATER) -> Iterator[Explaining]:
    """A session whose calls run at ``at`` and report their plans as
    auto_explain saw them (with ``analyze``, with the rows each node actually
    produced); everything they did is rolled back at the end."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        bind(conn)
        pin_clock(conn, at)
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_format = 'json'")
        conn.execute("SET auto_explain.log_level = 'notice'")
        if analyze:
            conn.execute("SET auto_explain.log_analyze = on")
        conn.execute("SET client_min_messages = notice")
        session = Explaining(conn)
        with conn.transaction(force_rollback=True):
            yield session


def explained(
    dsn: str,
    call: str | sql.Composable,
    analyze: bool = False,
    at: str = LATER,
    params: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every plan node of every statement that ``call`` (with ``params``) ran at
    ``at`` (nested ones included), as auto_explain reported them (with
    ``analyze``, with the rows each node actually produced); the call's effects
    are rolled back."""
    with explaining(dsn, analyze, at) as session:
        rows, nodes = session.run(call, params)
    assert rows, f"{call} returned nothing"
    assert nodes, "auto_explain reported no plans"
    return nodes


def index_scans(nodes: list[dict[str, Any]]) -> set[str]:
    return {node["Index Name"] for node in nodes if "Index Name" in node}


def seq_scanned(nodes: list[dict[str, Any]]) -> set[str]:
    return {node["Relation Name"] for node in nodes if node["Node Type"] == "Seq Scan"}


def rows_read(nodes: list[dict[str, Any]], relation: str) -> int:
    """How many rows the plan read from ``relation``: what its scans returned
    and what their filters threw away, times their loops."""
    return sum(
        int(
            (n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0))
            * n.get("Actual Loops", 1)
        )
        for n in nodes
        if n.get("Relation Name") == relation
    )
