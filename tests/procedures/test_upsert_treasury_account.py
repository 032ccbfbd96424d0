"""upsert_treasury_account: one of our accounts on a registered chain, with the
id of the signer that holds its key; a key itself (or anything shaped like one)
is refused and never echoed."""

from __future__ import annotations

from engine import assert_rejected
from rows import Conn
from test_upsert_chain import REGISTRY, chain_audit

from qtg_runner.db import procs

ACCOUNT = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
SQL = "SELECT upsert_treasury_account(%s, %s, %s)"


def test_an_account_is_recorded_with_its_signer_and_audited_when_it_changes(conn: Conn) -> None:
    procs.upsert_chain("local-a", 31337, "QTG_RPC_LOCAL_A", 0, 1000).one(conn)
    procs.upsert_treasury_account("local-a", ACCOUNT, "local:treasury-1").one(conn)
    procs.upsert_treasury_account("local-a", ACCOUNT, "local:treasury-1").one(conn)
    procs.upsert_treasury_account("local-a", ACCOUNT, "kms:treasury-1").one(conn)
    assert conn.execute("SELECT address, signer_id FROM treasury_accounts").fetchall() == [
        (ACCOUNT.lower(), "kms:treasury-1")
    ]
    actions = chain_audit(conn, "local-a")
    assert [a for a, _ in actions] == [
        "chain_registered",
        "treasury_account_set",
        "treasury_account_set",
    ]
    assert actions[2][1]["previous_signer_id"] == "local:treasury-1"


def test_a_private_key_for_a_signer_id_is_refused_and_not_echoed(conn: Conn) -> None:
    procs.upsert_chain("local-a", 31337, "QTG_RPC_LOCAL_A", 0, 1000).one(conn)
    key = "0x" + "ab" * 32
    err = assert_rejected(conn, "QT002", SQL, ("local-a", ACCOUNT, key), tables=REGISTRY)
    assert "ab" * 32 not in str(err) and "ab" * 32 not in (err.diag.message_hint or "")
    for inside in ("env:" + "ab" * 32, "keystore:" + "AB" * 32 + ".json"):
        err = assert_rejected(conn, "QT002", SQL, ("local-a", ACCOUNT, inside), tables=REGISTRY)
        assert "ab" * 32 not in str(err).lower()
    err = assert_rejected(conn, "QT002", SQL, ("local-a", ACCOUNT, "a key with spaces"), REGISTRY)
    assert "spaces" not in str(err)
    assert_rejected(conn, "QT014", SQL, ("nowhere", ACCOUNT, "local:t"), tables=REGISTRY)
