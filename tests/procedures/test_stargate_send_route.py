"""stargate_send_route: what a Stargate send node may sign, from the registry:
both chains with their Stargate rows, the token on both, a treasury sender on
the source, a recipient that is a treasury account or allow-listed on the
DESTINATION (QT032 otherwise, even when the source allows it), the amount and
the least to receive in base units (min_amount, else max_slippage_bps, 50 by
default), taxi or bus. Refusals change nothing (it only reads)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from engine import assert_rejected, create, node, node_ids, plan
from rows import Conn

from qtg_runner.db import procs
from qtg_runner.executors.stargate import StargateExecutor

SENDER = "0x" + "d" * 40
TREASURY_B = "0x" + "e" * 40
COUNTERPARTY = "0x" + "c" * 40
ROUTE = "SELECT * FROM stargate_send_route(%s)"


@pytest.fixture
def chains(conn: Conn) -> Conn:
    for key, chain_id, eid, digit in (("sg-a", 1, 50901, "1"), ("sg-b", 2, 50902, "2")):
        procs.upsert_chain(key, chain_id, f"QTG_RPC_{key.upper().replace('-', '_')}", 2, 1000).one(
            conn
        )
        procs.upsert_chain_token(key, "USDC", "0x" + digit * 40, 6).one(conn)
        procs.upsert_chain_protocol(
            key, "stargate", eid, {"StargatePool": "0x" + digit * 39 + "f"}
        ).one(conn)
    procs.upsert_treasury_account("sg-a", SENDER, "env:KEY_A").one(conn)
    procs.upsert_treasury_account("sg-b", TREASURY_B, "env:KEY_B").one(conn)
    sg = StargateExecutor
    procs.register_executor(sg.key, True, sg.node_config_schema, sg.description).one(conn)
    return conn


def send_node(conn: Conn, amount: str = "100", **config: Any) -> int:
    fields: dict[str, Any] = {
        "source": "sg-a",
        "destination": "sg-b",
        "from": SENDER,
        "to": TREASURY_B,
    } | config
    movement = create(conn, plan(node("s", [], "stargate", **fields)), f"sg-{id(config)}", amount)
    return node_ids(conn, movement)["s"]


def test_a_taxi_to_a_treasury_account_of_the_destination(chains: Conn) -> None:
    row = procs.stargate_send_route(send_node(chains, "12.5")).one(chains)
    assert (row.chain_key, row.dst_chain_key, row.src_eid, row.dst_eid) == (
        "sg-a", "sg-b", 50901, 50902,
    )  # fmt: skip
    assert (row.src_pool, row.dst_pool) == ("0x" + "1" * 39 + "f", "0x" + "2" * 39 + "f")
    assert (row.sender, row.recipient, row.recipient_kind, row.mode) == (
        SENDER, TREASURY_B, "treasury", "taxi",
    )  # fmt: skip
    assert (row.amount_units, row.min_amount_units) == (12_500_000, 12_500_000 - 62_500)
    assert row.dst_token_address == "0x" + "2" * 40 and row.next_nonce is None


def test_a_bus_with_a_minimum_or_a_slippage(chains: Conn) -> None:
    row = procs.stargate_send_route(send_node(chains, "10", mode="bus", min_amount="9.99")).one(
        chains
    )
    assert (row.mode, row.amount_units, row.min_amount_units) == ("bus", 10_000_000, 9_990_000)
    row = procs.stargate_send_route(send_node(chains, "10", max_slippage_bps=0)).one(chains)
    assert row.min_amount_units == 10_000_000


def test_a_recipient_allowed_only_on_the_source_is_refused(chains: Conn) -> None:
    procs.allow_destination("sg-a", COUNTERPARTY, "on the source only").one(chains)
    node_id = send_node(chains, to=COUNTERPARTY)
    error = assert_rejected(chains, "QT032", ROUTE, (node_id,))
    assert "to, on the destination chain" in str(error) and "on chain sg-b" in str(error)
    procs.allow_destination("sg-b", COUNTERPARTY, "on the destination").one(chains)
    row = procs.stargate_send_route(node_id).one(chains)
    assert (row.recipient, row.recipient_kind) == (COUNTERPARTY, "allowed")


@pytest.mark.parametrize(
    ("config", "amount", "code"),
    [
        ({"destination": "sg-a"}, "1", "QT002"),  # the same chain at both ends
        ({"mode": "plane"}, "1", "QT002"),
        ({"min_amount": "2"}, "1", "QT002"),  # above the amount
        ({"min_amount": "0.0000001"}, "1", "QT002"),  # finer than 6 decimals
        ({"min_amount": "-1"}, "1", "QT002"),
        ({"max_slippage_bps": 10001}, "1", "QT002"),
        ({"destination": "nowhere"}, "1", "QT014"),
        ({"from": TREASURY_B}, "1", "QT014"),  # not a treasury account of the source
        ({"token": "EURC"}, "1", "QT014"),
    ],
)
def test_refusals(chains: Conn, config: dict[str, Any], amount: str, code: str) -> None:
    node_id = send_node(chains, amount)
    # the config as the route would read it (the node config schema is the
    # first line of defence; the route does not rely on it)
    chains.execute(
        "UPDATE movement_request_nodes SET node_config = node_config || %s::jsonb WHERE id = %s",
        (json.dumps(config), node_id),
    )
    assert_rejected(chains, code, ROUTE, (node_id,))


def test_no_stargate_on_the_destination_is_qt014(chains: Conn) -> None:
    chains.execute("DELETE FROM chain_protocols WHERE chain_key = 'sg-b'")
    assert_rejected(chains, "QT014", ROUTE, (send_node(chains),))
    assert_rejected(chains, "QT011", ROUTE, (0,))
