"""allow_destination / disallow_destination: the allow-list of addresses outside
the treasury that money may go to, per registered chain, each with a label and
who added it; both audited; taking off an address that is not listed changes
nothing and says so."""

from __future__ import annotations

from engine import assert_rejected
from rows import Conn
from test_upsert_chain import REGISTRY, chain_audit

from qtg_runner.db import procs

DEST = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


def test_an_address_is_allowed_relabelled_and_taken_off(conn: Conn) -> None:
    procs.upsert_chain("local-b", 31338, "QTG_RPC_LOCAL_B", 2, 2000).one(conn)
    procs.allow_destination("local-b", DEST, "exchange deposit").one(conn)
    procs.allow_destination("local-b", DEST, "exchange deposit").one(conn)
    assert conn.execute(
        "SELECT address, label, added_by = session_user FROM allowed_destinations"
    ).fetchall() == [(DEST.lower(), "exchange deposit", True)]
    assert procs.disallow_destination("local-b", DEST).one(conn) is True
    assert procs.disallow_destination("local-b", DEST).one(conn) is False
    assert conn.execute("SELECT count(*) FROM allowed_destinations").fetchone() == (0,)
    assert [a for a, _ in chain_audit(conn, "local-b")] == [
        "chain_registered",
        "destination_allowed",
        "destination_removed",
    ]


def test_a_bad_destination_is_refused_and_changes_nothing(conn: Conn) -> None:
    procs.upsert_chain("local-b", 31338, "QTG_RPC_LOCAL_B", 2, 2000).one(conn)
    allow = "SELECT allow_destination(%s, %s, %s)"
    assert_rejected(conn, "QT014", allow, ("nowhere", DEST, "x"), tables=REGISTRY)
    assert_rejected(conn, "QT002", allow, ("local-b", "0xZZ", "x"), tables=REGISTRY)
    assert_rejected(conn, "QT002", allow, ("local-b", DEST, "  "), tables=REGISTRY)
    assert_rejected(
        conn, "QT014", "SELECT disallow_destination(%s, %s)", ("nowhere", DEST), REGISTRY
    )
