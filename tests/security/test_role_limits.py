"""No credential takes the server from the others: each network's runner and
operator roles have a connection limit the server enforces, and default
statement, lock and idle-transaction timeouts."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import TestDatabase

LIMITS = {"runner": 30, "operator": 10}
TIMEOUTS = {
    "idle_in_transaction_session_timeout=5min",
    "lock_timeout=30s",
    "statement_timeout=60s",
}


@pytest.mark.parametrize("network", ["mainnet", "testnet"])
@pytest.mark.parametrize("kind", ["runner", "operator"])
def test_every_network_role_has_a_connection_limit_and_timeouts(
    db: TestDatabase, network: str, kind: str
) -> None:
    role = f"qtg_{network}_{kind}"
    conn = db.connect()
    limit = conn.execute("SELECT rolconnlimit FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    assert limit == (LIMITS[kind],)
    settings = conn.execute(
        """SELECT s.setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
            WHERE r.rolname = %s AND s.setdatabase = 0""",
        (role,),
    ).fetchone()
    assert settings is not None and set(settings[0]) == TIMEOUTS
    # and a login of the role starts with them
    login = db.connect(db.runner_dsn(network) if kind == "runner" else db.operator_dsn(network))
    assert login.execute("SHOW lock_timeout").fetchone() == ("30s",)


def test_a_runner_beyond_its_connection_limit_is_refused(db: TestDatabase) -> None:
    admin = db.connect()
    admin.execute("ALTER ROLE qtg_testnet_runner CONNECTION LIMIT 2")
    opened: list[psycopg.Connection[Any]] = []
    try:
        opened += [psycopg.connect(db.runner_dsn("testnet")) for _ in range(2)]
        with pytest.raises(psycopg.OperationalError) as caught:
            opened.append(psycopg.connect(db.runner_dsn("testnet")))
        assert "too many connections for role" in str(caught.value)
        # the other network's runner is not held back by it
        opened.append(psycopg.connect(db.runner_dsn("mainnet")))
    finally:
        for conn in opened:
            conn.close()
        admin.execute(f"ALTER ROLE qtg_testnet_runner CONNECTION LIMIT {LIMITS['runner']}")
