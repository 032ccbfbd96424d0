"""No login holds the engine's rows past the engine's bounds, whatever it does
to its own limits: a login may SET its statement and idle timeouts to 0 (or
ALTER ROLE itself), and a backend left in a psycopg pipeline stays idle in its
transaction without its idle timer. end_stalled_sessions, which the runners'
session_watchdog calls every 10 s, ends the network's logins' sessions idle in
a transaction for more than a minute, in one statement for more than two or
in one transaction for more than ten:
their transactions roll back and what they held is free. The bounds are the
engine's: a caller cannot ask for shorter ones; a working session, a
superuser's, another network's (the logins are matched by role) and another
database's are left alone. Time is the database clock, pinned here."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    assert_rejected,
    bind,
    cancel,
    claim,
    create_started,
    node,
    node_ids,
    pin_clock,
    plan,
    submit,
    wait_until_blocked_on_a_lock,
)
from psycopg import sql

Conn = psycopg.Connection[Any]


def later(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def pid_of(conn: Conn) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def test_a_runner_idling_in_its_claim_with_its_timeouts_off_is_ended(
    db: TestDatabase, conn: Conn
) -> None:
    movement = create_started(conn, plan(node("a"), node("b")), "stall-1")
    ids = node_ids(conn, movement)
    stalled = bind(db.connect(db.runner_dsn("testnet"), autocommit=False))
    stalled.execute("SET statement_timeout = 0")
    stalled.execute("SET idle_in_transaction_session_timeout = 0")
    stalled.execute("SET lock_timeout = 0")
    stalled.commit()
    claimed = stalled.execute(
        "SELECT node_id FROM claim_ready_nodes('dispatcher-x', 10)"
    ).fetchall()
    assert {row[0] for row in claimed} == set(ids.values())  # claimed, not committed: it idles
    watchdog = bind(db.connect(db.runner_dsn("testnet")))
    victim = pid_of(stalled)
    login = stalled.execute("SELECT session_user").fetchone()

    # a moment later it is working: nothing ended
    pin_clock(watchdog, later(20))
    assert (
        watchdog.execute("SELECT * FROM end_stalled_sessions('session_watchdog')").fetchall() == []
    )
    # past the minute
    pin_clock(watchdog, later(90))
    [ended] = watchdog.execute(
        "SELECT pid, state, ended FROM end_stalled_sessions('session_watchdog')"
    ).fetchall()
    assert ended == (victim, "idle in transaction", True)
    with pytest.raises(psycopg.OperationalError):
        stalled.execute("SELECT 1")
    # its claim rolled back: another dispatcher claims the nodes now
    pin_clock(watchdog, None)
    again = watchdog.execute("SELECT node_id FROM claim_ready_nodes('dispatcher-y', 10)").fetchall()
    assert {row[0] for row in again} == set(ids.values())
    audited = conn.execute(
        "SELECT actor, action, detail ->> 'login' FROM audit_outbox WHERE entity = 'session'"
    ).fetchall()
    assert login is not None
    assert audited == [("session_watchdog", "session_ended", login[0])]


def test_a_transaction_kept_open_with_a_statement_now_and_then_is_ended(
    db: TestDatabase, conn: Conn
) -> None:
    """A session that never idles long (a statement every few seconds) but
    holds one transaction, its snapshot and the server's cleanup with it, is
    ended once the transaction is older than the bound (10 minutes unless
    asked sooner, never under 2)."""
    keeper = bind(db.connect(db.runner_dsn("testnet"), autocommit=False))
    victim = pid_of(keeper)  # its transaction starts here
    watchdog = bind(db.connect(db.runner_dsn("testnet")))
    ask = (
        "SELECT pid, state, ended FROM end_stalled_sessions('session_watchdog', 86400, 86400, 120)"
    )
    pin_clock(watchdog, later(100))
    assert watchdog.execute(ask).fetchall() == []
    keeper.execute("SELECT 1")  # now and then: it never idles for long
    pin_clock(watchdog, later(130))
    assert watchdog.execute(ask).fetchall() == [(victim, "idle in transaction", True)]
    past = conn.execute(
        "SELECT detail ->> 'past' FROM audit_outbox WHERE entity = 'session'"
    ).fetchall()
    assert past == [("transaction",)]
    assert_rejected(
        conn, "QT002", "SELECT * FROM end_stalled_sessions('session_watchdog', 60, 120, 119)"
    )


def test_the_bounds_are_the_engines_and_other_sessions_are_left_alone(
    db: TestDatabase, conn: Conn
) -> None:
    watchdog = bind(db.connect(db.runner_dsn("testnet")))
    for idle, statement in ((29, 120), (60, 59), (None, 120)):
        assert_rejected(
            conn, "QT002",
            "SELECT * FROM end_stalled_sessions('session_watchdog', %s, %s)", (idle, statement),
        )  # fmt: skip
    admin = db.connect(autocommit=False)  # a superuser, idle in a transaction
    admin.execute("SELECT 1")
    # an admin that is no superuser (as on a managed server: it may create roles,
    # and is a member of the roles it made), in a long migration
    managed = db.login("managed_admin", "qtg_testnet_operator")
    conn.execute(sql.SQL("ALTER ROLE {} CREATEROLE").format(sql.Identifier(managed.name)))
    migrating = db.connect(managed.dsn, autocommit=False)
    migrating.execute("SELECT 1")
    other = bind(db.connect(db.runner_dsn("mainnet"), autocommit=False), "mainnet")
    other.execute("SELECT 1")  # another network's runner, idle in a transaction
    pin_clock(watchdog, later(3600))
    assert (
        watchdog.execute("SELECT * FROM end_stalled_sessions('session_watchdog')").fetchall() == []
    )
    admin.execute("SELECT 1")
    other.execute("SELECT 1")
    migrating.execute("SELECT 1")


def test_an_operators_cancel_waits_for_a_frozen_observer_no_longer_than_the_bound(
    db: TestDatabase, conn: Conn
) -> None:
    """An observer frozen inside its chunk's transaction (SIGSTOP, or a pipeline
    whose backend never started its idle timer) holds its nodes and their
    movements; an operator's cancel of such a movement waits on it. The
    watchdog ends the frozen session once past the bound, and the cancel goes
    through; the node is observed again later as before."""
    movement = create_started(conn, plan(node("a")), "frozen-observer")
    node_id = node_ids(conn, movement)["a"]
    [claimed] = claim(conn)
    submit(conn, claimed)
    conn.execute(
        "UPDATE movement_request_nodes SET next_observe_at = now() - interval '1 second'"
        " WHERE id = %s",
        (node_id,),
    )
    observer = bind(db.connect(db.runner_dsn("testnet"), autocommit=False))
    observer.commit()
    got = observer.execute(
        "SELECT node_id FROM claim_observe_batch(ARRAY[%s]::bigint[], 'node_observer')", (node_id,)
    ).fetchall()
    assert got == [(node_id,)]  # locked, and the observer freezes in its chunk
    frozen = pid_of(observer)
    operator = bind(db.connect())
    outcome: dict[str, Any] = {}

    def cancel_it() -> None:
        outcome["state"] = cancel(operator, movement)

    thread = threading.Thread(target=cancel_it)
    thread.start()
    wait_until_blocked_on_a_lock(conn, operator.info.backend_pid)
    watchdog = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(watchdog, later(90))
    ended = watchdog.execute("SELECT pid FROM end_stalled_sessions('session_watchdog')").fetchall()
    assert ended == [(frozen,)]
    thread.join(timeout=10)
    assert outcome["state"] in ("EXECUTING", "CANCELLED")
    row = conn.execute(
        "SELECT stop_reason IS NOT NULL FROM movement_requests WHERE id = %s", (movement,)
    ).fetchone()
    assert row == (True,)  # the cancel was taken
