"""upsert_chain_token: a token contract on a registered chain (symbol, address
stored lower-case, decimals); audited when it changes; QT014 for a chain the
network does not have, QT002 for a bad address, symbol or decimals."""

from __future__ import annotations

import pytest
from engine import assert_rejected
from rows import Conn
from test_upsert_chain import REGISTRY, chain_audit

from qtg_runner.db import procs

USDC = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
TOKEN = "SELECT upsert_chain_token(%s, %s, %s, %s)"


@pytest.fixture
def chain(conn: Conn) -> str:
    procs.upsert_chain("local-a", 31337, "QTG_RPC_LOCAL_A", 0, 1000).one(conn)
    return "local-a"


def test_a_token_is_recorded_lower_case_and_audited_once(conn: Conn, chain: str) -> None:
    procs.upsert_chain_token(chain, "USDC", USDC, 6).one(conn)
    procs.upsert_chain_token(chain, "USDC", USDC.lower(), 6).one(conn)
    assert conn.execute(
        "SELECT chain_key, symbol, address, decimals FROM chain_tokens"
    ).fetchall() == [(chain, "USDC", USDC.lower(), 6)]
    assert [a for a, _ in chain_audit(conn, chain)] == ["chain_registered", "token_set"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("nowhere", "USDC", USDC, 6), "QT014"),
        (("local-a", "USDC", "0x1234", 6), "QT002"),
        (("local-a", "USDC", USDC[2:], 6), "QT002"),
        (("local-a", "US DC", USDC, 6), "QT002"),
        (("local-a", "USDC", USDC, 37), "QT002"),
    ],
)
def test_a_bad_token_is_refused_and_changes_nothing(
    conn: Conn, chain: str, args: tuple[object, ...], code: str
) -> None:
    err = assert_rejected(conn, code, TOKEN, args, tables=REGISTRY)
    assert err.diag.message_hint


def test_one_address_has_one_symbol_per_chain(conn: Conn, chain: str) -> None:
    procs.upsert_chain_token(chain, "USDC", USDC, 6).one(conn)
    assert_rejected(conn, "QT002", TOKEN, (chain, "USDT", USDC, 6), tables=REGISTRY)
