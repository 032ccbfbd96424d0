"""No credential takes the server from the others: every runner, operator and
reader login has a connection limit the server enforces, and default
statement, lock and idle-transaction timeouts (a reader's shorter).

PostgreSQL applies neither through membership in a group role, so each
network's group role (qtg_<network>_runner | _operator, NOLOGIN) holds them as
the template the admin configures once, and `qtg operator|runner add` copies
them onto every login it makes: a login made by add starts with the timeouts
and is held to the limit, and one network's logins at their limit hold back
no other's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from typer.testing import CliRunner

from qtg_runner.cli import app
from qtg_runner.credentials import login_dsn

LIMITS = {"runner": 30, "operator": 10, "reader": 5}
ENGINE_TIMEOUTS = {
    "idle_in_transaction_session_timeout=5min",
    "lock_timeout=30s",
    "statement_timeout=60s",
}
TIMEOUTS = {
    "runner": ENGINE_TIMEOUTS,
    "operator": ENGINE_TIMEOUTS,
    # a dashboard's reads are short: a stuck one lets go sooner
    "reader": {
        "idle_in_transaction_session_timeout=1min",
        "lock_timeout=10s",
        "statement_timeout=30s",
    },
}


def role_settings(conn: psycopg.Connection[Any], role: str) -> tuple[int, set[str]]:
    row = conn.execute(
        """SELECT r.rolconnlimit, coalesce(s.setconfig, '{}')
             FROM pg_roles r
             LEFT JOIN pg_db_role_setting s ON s.setrole = r.oid AND s.setdatabase = 0
            WHERE r.rolname = %s""",
        (role,),
    ).fetchone()
    assert row is not None, role
    return int(row[0]), set(row[1])


def add(db: TestDatabase, kind: str, person: str, network: str, passfile: Path) -> str:
    """`qtg <kind> add` as the admin; the new login's DSN."""
    name = f"{person}_{db.name}"
    db.logins.append(name)  # dropped with the database
    result = CliRunner().invoke(
        app,
        [kind, "add", name, "--network", network],
        env={"QTG_DATABASE_URL": db.dsn, "QTG_CREDENTIALS_FILE": str(passfile)},
    )
    assert result.exit_code == 0, result.output
    return login_dsn(db.dsn, name, passfile)


@pytest.mark.parametrize("network", ["mainnet", "testnet"])
@pytest.mark.parametrize("kind", ["runner", "operator", "reader"])
def test_every_group_role_holds_a_connection_limit_and_timeouts_and_cannot_log_in(
    db: TestDatabase, network: str, kind: str
) -> None:
    role = f"qtg_{network}_{kind}"
    conn = db.connect()
    assert role_settings(conn, role) == (
        LIMITS[kind],
        TIMEOUTS[kind] | {f"search_path={network}, qtg"},
    )
    assert conn.execute(
        "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (role,)
    ).fetchone() == (False,)


@pytest.mark.parametrize("kind", ["runner", "operator", "reader"])
def test_a_login_made_by_add_starts_with_its_groups_limit_and_timeouts(
    db: TestDatabase, tmp_path: Path, kind: str
) -> None:
    dsn = add(db, kind, "carol", "testnet", tmp_path / "pgpass")
    name = f"carol_{db.name}"
    assert role_settings(db.connect(), name) == (
        LIMITS[kind],
        TIMEOUTS[kind] | {"search_path=testnet, qtg"},
    )
    login = db.connect(dsn)
    assert login.execute("SELECT session_user").fetchone() == (name,)
    # psql as the login lands in its network: its procedures and views by name
    assert login.execute("SHOW search_path").fetchone() == ("testnet, qtg",)
    assert login.execute("SELECT count(*) >= 0 FROM pipeline_counts").fetchone() == (True,)
    assert login.execute(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),"
        " current_setting('idle_in_transaction_session_timeout')"
    ).fetchone() == {"reader": ("30s", "10s", "1min")}.get(kind, ("1min", "30s", "5min"))


def test_an_operator_made_by_add_beyond_its_connection_limit_is_refused(
    db: TestDatabase, tmp_path: Path
) -> None:
    passfile = tmp_path / "pgpass"
    testnet = add(db, "operator", "dave", "testnet", passfile)
    mainnet = add(db, "operator", "erin", "mainnet", passfile)
    opened: list[psycopg.Connection[Any]] = []
    try:
        opened += [psycopg.connect(testnet) for _ in range(LIMITS["operator"])]
        with pytest.raises(psycopg.OperationalError) as caught:
            opened.append(psycopg.connect(testnet))
        assert "too many connections for role" in str(caught.value)
        # another login, here of the other network, is not held back by it
        opened.append(psycopg.connect(mainnet))
    finally:
        for conn in opened:
            conn.close()


def test_a_reader_opening_connection_after_connection_leaves_runners_and_operators_working(
    db: TestDatabase, tmp_path: Path
) -> None:
    """A dashboard or scraper that opens 200 connections gets its 5; the
    rest are refused by the server, and a runner and an operator still log in
    and work."""
    passfile = tmp_path / "pgpass"
    reader = add(db, "reader", "gail", "testnet", passfile)
    runner = add(db, "runner", "hugo", "testnet", passfile)
    operator = add(db, "operator", "iris", "testnet", passfile)
    opened: list[psycopg.Connection[Any]] = []
    refused = 0
    try:
        for _ in range(200):
            try:
                opened.append(psycopg.connect(reader))
            except psycopg.OperationalError as exc:
                assert "too many connections for role" in str(exc)
                refused += 1
        assert (len(opened), refused) == (LIMITS["reader"], 200 - LIMITS["reader"])
        for dsn in (runner, operator):
            with psycopg.connect(dsn, options="-c search_path=testnet,qtg") as conn:
                assert conn.execute("SELECT count(*) FROM pipeline_counts").fetchone() is not None
    finally:
        for conn in opened:
            conn.close()


def test_a_limit_the_admin_sets_on_the_group_role_holds_for_the_logins_made_after(
    db: TestDatabase, tmp_path: Path
) -> None:
    admin = db.connect()
    admin.execute("ALTER ROLE qtg_mainnet_runner CONNECTION LIMIT 2")
    try:
        dsn = add(db, "runner", "frank", "mainnet", tmp_path / "pgpass")
    finally:
        admin.execute(f"ALTER ROLE qtg_mainnet_runner CONNECTION LIMIT {LIMITS['runner']}")
    opened: list[psycopg.Connection[Any]] = []
    try:
        opened += [psycopg.connect(dsn) for _ in range(2)]
        with pytest.raises(psycopg.OperationalError, match="too many connections for role"):
            opened.append(psycopg.connect(dsn))
    finally:
        for conn in opened:
            conn.close()


def test_a_runner_says_at_start_when_its_pools_may_pass_its_logins_limit(
    db: TestDatabase, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two runner processes at the default concurrency open up to 2 x 23
    connections; a runner login allows 30. The runtime says so at start
    (connection_limit_short, with the limit, what is open and what it may
    open) rather than stalling on a pool that cannot fill."""
    import asyncio

    from qtg_runner.runtime import pool_connections, warn_if_over_connection_limit

    dsn = add(db, "runner", "rita", "testnet", tmp_path / "pgpass")
    others = [db.connect(dsn) for _ in range(10)]  # another process's connections

    async def room(needed: int) -> int | None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await warn_if_over_connection_limit(conn, "testnet", needed)

    assert pool_connections(8) == 23
    with caplog.at_level("WARNING", logger="qtg"):
        assert asyncio.run(room(pool_connections(8))) == 30 - 10
    assert "event=connection_limit_short" in caplog.text
    assert "login_limit=30" in caplog.text and "sessions_open=10" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="qtg"):
        asyncio.run(room(pool_connections(2)))  # 11: fits
    assert "connection_limit_short" not in caplog.text
    for other in others:
        other.close()
