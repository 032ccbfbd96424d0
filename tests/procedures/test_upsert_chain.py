"""upsert_chain: the admin registers an EVM chain of the network (migration
0017_chain_registry). The RPC URL never enters the table: only the name of the
environment variable that holds it. A change is audited (entity 'chain'), the
same registration again changes nothing, a chain keeps its chain id. The
routine is in sql/functions/admin/: an operator login cannot call it, but reads
the registry (through its membership in the reader role)."""

from __future__ import annotations

import psycopg
import pytest
from conftest import TestDatabase
from engine import assert_rejected, bind
from rows import Conn

from qtg_runner.db import procs

UPSERT = "SELECT upsert_chain(%s, %s, %s, %s, %s)"
REGISTRY = ("chains", "chain_tokens", "treasury_accounts", "allowed_destinations", "audit_outbox")


def chain_audit(conn: Conn, key: str) -> list[tuple[str, dict[str, object]]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "SELECT action, detail FROM audit_outbox WHERE entity = 'chain' AND entity_id = %s"
            " ORDER BY id",
            (key,),
        ).fetchall()
    ]


def test_a_chain_is_registered_updated_and_audited(conn: Conn) -> None:
    procs.upsert_chain("base", 8453, "QTG_RPC_BASE", 64, 2000).one(conn)
    procs.upsert_chain("base", 8453, "QTG_RPC_BASE", 64, 2000).one(conn)
    assert conn.execute(
        "SELECT chain_key, chain_id, rpc_url_env, finality_depth, block_time_ms FROM chains"
    ).fetchall() == [("base", 8453, "QTG_RPC_BASE", 64, 2000)]
    procs.upsert_chain("base", 8453, "QTG_RPC_BASE_2", 32, 2000).one(conn)
    assert conn.execute("SELECT rpc_url_env, finality_depth FROM chains").fetchone() == (
        "QTG_RPC_BASE_2",
        32,
    )
    audit = chain_audit(conn, "base")
    assert [a for a, _ in audit] == ["chain_registered", "chain_updated"]
    assert audit[1][1]["rpc_url_env"] == "QTG_RPC_BASE_2"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("Base", 8453, "QTG_RPC_BASE", 64, 2000), "chain key"),
        (("base", 0, "QTG_RPC_BASE", 64, 2000), "chain id"),
        (("base", 8453, "https://rpc.example/v1/SECRETKEY", 64, 2000), "environment variable"),
        (("base", 8453, "qtg_rpc_base", 64, 2000), "environment variable"),
        (("base", 8453, "QTG_RPC_BASE", -1, 2000), "finality depth"),
        (("base", 8453, "QTG_RPC_BASE", 64, 0), "block time"),
        (("base", 8453, None, 64, 2000), "environment variable"),
    ],
)
def test_a_bad_argument_is_refused_and_changes_nothing(
    conn: Conn, args: tuple[object, ...], needle: str
) -> None:
    err = assert_rejected(conn, "QT002", UPSERT, args, tables=REGISTRY)
    assert needle in str(err)
    assert err.diag.message_hint
    # a URL given where its variable's name belongs is never echoed back
    assert "SECRETKEY" not in str(err) and "SECRETKEY" not in (err.diag.message_hint or "")


def test_a_chain_keeps_its_chain_id_and_an_id_has_one_key(conn: Conn) -> None:
    procs.upsert_chain("base", 8453, "QTG_RPC_BASE", 64, 2000).one(conn)
    err = assert_rejected(conn, "QT002", UPSERT, ("base", 1, "QTG_RPC_BASE", 64, 2000), REGISTRY)
    assert "chain id 8453" in str(err)
    err = assert_rejected(conn, "QT002", UPSERT, ("base2", 8453, "QTG_RPC_B", 64, 2000), REGISTRY)
    assert "another key" in str(err)


def test_an_operator_reads_the_registry_but_cannot_change_it(conn: Conn, db: TestDatabase) -> None:
    procs.upsert_chain("base", 8453, "QTG_RPC_BASE", 64, 2000).one(conn)
    operator = bind(db.connect(db.operator_dsn("testnet")))
    assert operator.execute("SELECT chain_key FROM chains").fetchall() == [("base",)]
    for table in REGISTRY[1:4]:
        operator.execute(f"SELECT * FROM {table}").fetchall()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        operator.execute(UPSERT, ("evil", 1, "QTG_RPC_EVIL", 0, 1))
    runner = bind(db.connect(db.runner_dsn("testnet")))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runner.execute(UPSERT, ("evil", 1, "QTG_RPC_EVIL", 0, 1))
    assert conn.execute("SELECT chain_key FROM chains").fetchall() == [("base",)]
