"""A database per network: the full isolation docs/deploying.md describes, run as it says.

Two empty databases are migrated (`qtg db migrate`), each dedicated to one
network (CONNECT only for that network's roles), with the executors
registered (`qtg executors register`) and a runner and two operator logins of
its own (`qtg runner add`, `qtg operator add`). In each, one operator creates
a movement, the other approves it, and that network's runner login runs it
to COMPLETED, nothing of it showing in the other database. A login of one
network cannot connect to the other's database at all, so it can neither
LISTEN to its notifications nor send it any.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import NewDatabase, TestDatabase
from engine import add_lanes, bind
from psycopg import sql

from qtg_runner import credentials
from qtg_runner.config import NetworkMode
from qtg_runner.db import logins, procs
from qtg_runner.db.migrate import migrate
from qtg_runner.db.pool import bound_conninfo
from qtg_runner.executors.registry import SHIPPED, register_shipped
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.workers import BY_NAME

NETWORKS: tuple[NetworkMode, ...] = ("testnet", "mainnet")

DEDICATE = """
    REVOKE CONNECT, TEMPORARY ON DATABASE {db} FROM PUBLIC;
    GRANT CONNECT ON DATABASE {db} TO {runner}, {operator}, {reader};
"""


def dedicate(database: TestDatabase, network: str) -> None:
    """docs/deploying.md's statements: only the network's roles (and the admin) may connect."""
    with psycopg.connect(database.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(DEDICATE).format(
                db=sql.Identifier(database.name),
                **{
                    kind: sql.Identifier(f"qtg_{network}_{kind}")
                    for kind in ("runner", "operator", "reader")
                },
            )
        )


def add(
    database: TestDatabase, kind: logins.Kind, network: str, person: str, passfile: Path
) -> str:
    name = f"{person}_{database.name}"
    database.logins.append(name)
    return logins.add(database.dsn, kind, network, name, passfile)


async def run_until_completed(runner_dsn: str, network: NetworkMode, movement: int) -> str:
    """The network's workers, in this process, as its runner login, until the movement ends."""
    runtime = await Runtime.open(runner_dsn, network, name=f"per-db-{network}")
    ctx = runtime.context()
    entries = [BY_NAME["node_dispatcher"], BY_NAME["node_observer"]]
    supervisor = asyncio.create_task(supervise(ctx, entries, install_signal_handlers=False))
    try:
        async with await psycopg.AsyncConnection.connect(runtime.conninfo, autocommit=True) as conn:
            for _ in range(300):
                cur = await conn.execute(
                    "SELECT request_state::text FROM movement_progress WHERE movement_id = %s",
                    (movement,),
                )
                row = await cur.fetchone()
                assert row is not None
                if row[0] in ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED"):
                    return str(row[0])
                await asyncio.sleep(0.1)
            return str(row[0])
    finally:
        ctx.stopping.set()
        await supervisor
        await runtime.close()


def test_each_network_runs_in_its_own_database_with_its_own_runner_login(
    new_database: NewDatabase, tmp_path: Path
) -> None:
    passfile = tmp_path / "pgpass"
    databases = {network: new_database(template=None) for network in NETWORKS}
    runner_dsn: dict[str, str] = {}
    movements: dict[str, int] = {}
    for network, database in databases.items():
        migrate(database.dsn)
        dedicate(database, network)
        assert register_shipped(database.dsn, network) == ["registered"] * len(SHIPPED)
        with psycopg.connect(
            bound_conninfo(database.dsn, network, "admin"), autocommit=True
        ) as conn:
            add_lanes(conn, "instant")  # the admin's deploy step: a plan names lanes with a row
        runner_dsn[network] = add(database, "runner", network, "runner", passfile)
        alice = add(database, "operator", network, "alice", passfile)
        bob = add(database, "operator", network, "bob", passfile)
        nodes = [{"key": "send", "executor": "sim", "config": {"lane": "instant"}}]
        with psycopg.connect(bound_conninfo(alice, network, "alice"), autocommit=True) as conn:
            created = procs.create_movement(
                f"{network}-1", Decimal("5"), plan={"nodes": nodes}
            ).one(conn)
        with psycopg.connect(bound_conninfo(bob, network, "bob"), autocommit=True) as conn:
            assert procs.approve_movement(created.movement_id).one(conn) == "APPROVED"
        movements[network] = created.movement_id

    async def both() -> list[str]:
        return list(
            await asyncio.gather(
                *(run_until_completed(runner_dsn[n], n, movements[n]) for n in NETWORKS)
            )
        )

    assert asyncio.run(both()) == ["COMPLETED", "COMPLETED"]

    for network, database in databases.items():
        other = "mainnet" if network == "testnet" else "testnet"
        admin = bind(database.connect(), network)
        assert admin.execute(
            "SELECT count(*), min(request_state::text) FROM movement_requests"
        ).fetchone() == (1, "COMPLETED")
        assert bind(database.connect(), other).execute(
            "SELECT count(*) FROM movement_requests"
        ).fetchone() == (0,)
        # the side effect happened once, by this network's runner login
        [(login,)] = admin.execute(
            "SELECT DISTINCT login FROM audit_outbox WHERE entity = 'node'"
        ).fetchall()
        assert f"runner_{database.name}" == login
        # the other network's logins cannot even connect here
        foreign = credentials.login_dsn(database.dsn, f"runner_{databases[other].name}", passfile)
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            psycopg.connect(foreign)


def test_a_network_never_hears_the_others_notifications_across_databases(
    new_database: NewDatabase,
) -> None:
    """The same channel name in two databases is two channels: NOTIFY is per database.
    Notifications reach a listener in commit order, so the first one it hears,
    sent after the other database's, shows that one never came."""
    one, two = new_database(), new_database()
    listener = one.connect()
    listener.execute("LISTEN qtg_testnet_work")
    two.connect().execute("SELECT pg_notify('qtg_testnet_work', 'ready')")
    one.connect().execute("SELECT pg_notify('qtg_testnet_work', 'approved')")
    got: list[Any] = [n.payload for n in listener.notifies(timeout=10.0, stop_after=1)]
    assert got == ["approved"]
