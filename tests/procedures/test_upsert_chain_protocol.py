"""upsert_chain_protocol: a bridge protocol on a registered chain (its id in the
protocol and its contracts, addresses stored lower-case); audited when it
changes, registering the same again changes nothing; QT014 for a chain the
network does not have, QT002 for an unknown protocol, an id out of the
protocol's range or taken by another chain, or malformed contracts. The route
functions read it through chain_protocol (QT014 when missing)."""

from __future__ import annotations

import pytest
from engine import assert_rejected
from rows import Conn
from test_upsert_chain import REGISTRY, chain_audit

from qtg_runner.db import procs

MESSENGER = "0x8FE6B999Dc680CcFDD5Bf7EB0974218be2542DAA"
PROTOCOL = "SELECT upsert_chain_protocol(%s, %s, %s::numeric, %s)"
TABLES = (*REGISTRY, "chain_protocols")


@pytest.fixture
def chain(conn: Conn) -> str:
    procs.upsert_chain("local-a", 31337, "QTG_RPC_LOCAL_A", 0, 1000).one(conn)
    procs.upsert_chain("local-b", 31338, "QTG_RPC_LOCAL_B", 0, 1000).one(conn)
    return "local-a"


def test_a_protocol_is_recorded_lower_case_and_audited_when_it_changes(
    conn: Conn, chain: str
) -> None:
    procs.upsert_chain_protocol(chain, "cctp", 100, {"TokenMessengerV2": MESSENGER}).one(conn)
    procs.upsert_chain_protocol(chain, "cctp", 100, {"TokenMessengerV2": MESSENGER.lower()}).one(
        conn
    )
    # a CCIP chain selector is a uint64
    procs.upsert_chain_protocol(chain, "ccip", 2**64 - 1, {"Router": MESSENGER}).one(conn)
    assert conn.execute(
        "SELECT protocol, remote_id, contracts FROM chain_protocols ORDER BY protocol"
    ).fetchall() == [
        ("ccip", 2**64 - 1, {"Router": MESSENGER.lower()}),
        ("cctp", 100, {"TokenMessengerV2": MESSENGER.lower()}),
    ]
    procs.upsert_chain_protocol(chain, "cctp", 100, {"TokenMessengerV2": "0x" + "1" * 40}).one(conn)
    actions = [a for a, _ in chain_audit(conn, chain)]
    assert actions == ["chain_registered", "protocol_set", "protocol_set", "protocol_set"]
    [(_, detail)] = chain_audit(conn, chain)[-1:]
    assert detail["previous_contracts"] == {"TokenMessengerV2": MESSENGER.lower()}
    row = conn.execute("SELECT (chain_protocol(%s, 'cctp')).remote_id", (chain,)).fetchone()
    assert row == (100,)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("nowhere", "cctp", 1, {"TokenMessengerV2": MESSENGER}), "QT014"),
        ((None, "cctp", 1, {"TokenMessengerV2": MESSENGER}), "QT014"),
        (("local-a", "wormhole", 1, {"TokenMessengerV2": MESSENGER}), "QT002"),
        (("local-a", "cctp", 2**32, {"TokenMessengerV2": MESSENGER}), "QT002"),
        (("local-a", "cctp", -1, {"TokenMessengerV2": MESSENGER}), "QT002"),
        (("local-a", "cctp", "NaN", {"TokenMessengerV2": MESSENGER}), "QT002"),
        (("local-a", "cctp", 1.5, {"TokenMessengerV2": MESSENGER}), "QT002"),
        (("local-a", "cctp", 1, {}), "QT002"),
        (("local-a", "cctp", 1, {"TokenMessengerV2": "0x12"}), "QT002"),
        (("local-a", "cctp", 1, {"Token Messenger": MESSENGER}), "QT002"),
        (("local-a", "cctp", 1, ["TokenMessengerV2", MESSENGER]), "QT002"),
    ],
)
def test_a_bad_protocol_is_refused_and_changes_nothing(
    conn: Conn, chain: str, args: tuple[object, ...], code: str
) -> None:
    from psycopg.types.json import Jsonb

    args = (*args[:3], Jsonb(args[3]))
    err = assert_rejected(conn, code, PROTOCOL, args, tables=TABLES)
    assert err.diag.message_hint


def test_one_id_names_one_chain_per_protocol(conn: Conn, chain: str) -> None:
    procs.upsert_chain_protocol(chain, "stargate", 40161, {"StargatePool": MESSENGER}).one(conn)
    assert_rejected(
        conn,
        "QT002",
        "SELECT upsert_chain_protocol('local-b', 'stargate', 40161, '{\"StargatePool\": \"0x%s\"}')"
        % ("2" * 40),
        tables=TABLES,
    )
    # the same id in another protocol is another namespace
    procs.upsert_chain_protocol("local-b", "cctp", 40161, {"TokenMessengerV2": MESSENGER}).one(conn)


def test_a_route_finds_no_protocol_where_none_is_registered(conn: Conn, chain: str) -> None:
    assert_rejected(conn, "QT014", "SELECT chain_protocol(%s, 'ccip')", (chain,), tables=TABLES)
