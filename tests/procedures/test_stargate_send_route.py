"""stargate_send_route: what a Stargate send node may sign, from the registry:
both chains with their Stargate rows (the pool on both, the source's
TokenMessaging, where a bus ride's events are read), the token on both, a treasury sender on
the source, a recipient that is a treasury account or allow-listed on the
DESTINATION (QT032 otherwise, even when the source allows it), the amount and
the least to receive in base units (min_amount, else max_slippage_bps, 50 by
default), taxi or bus. Refusals change nothing (it only reads)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import TestDatabase
from engine import approve, assert_rejected, bind, create, node, node_ids, plan
from eth_abi import encode
from evm_rows import call
from rows import Conn

from qtg_runner.db import procs
from qtg_runner.executors.evm_tx import ChainLeg
from qtg_runner.executors.stargate import SEND, SEND_PARAM, StargateExecutor, _send_param

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
            key,
            "stargate",
            eid,
            {"StargatePool": "0x" + digit * 39 + "f", "TokenMessaging": "0x" + digit * 38 + "ee"},
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
    assert row.src_token_messaging == "0x" + "1" * 38 + "ee"
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


def test_a_source_without_its_token_messaging_is_qt014(chains: Conn) -> None:
    """A bus ride's ticket and its bus are TokenMessaging's events: a source
    whose row names no TokenMessaging is no route (its sends could not be
    followed). The destination needs only its pool."""
    node_id = send_node(chains)
    procs.upsert_chain_protocol(
        "sg-b", "stargate", 50902, {"StargatePool": "0x" + "2" * 39 + "f"}
    ).one(chains)
    assert procs.stargate_send_route(node_id).one(chains).dst_pool == "0x" + "2" * 39 + "f"
    procs.upsert_chain_protocol("sg-a", "stargate", 50901, {"StargatePool": POOL_A}).one(chains)
    error = assert_rejected(chains, "QT014", ROUTE, (node_id,))
    assert "TokenMessaging" in str(error)


# -- what a send may record: the route's own send, nothing else ------------------

RECORD = (
    "SELECT record_intent_prepared(%s, %s, p_nonce => 0, p_signed_tx_hash => %s,"
    " p_payload => %s::jsonb, p_chain_key => 'sg-a', p_sender => %s, p_raw_tx => %s)"
)
POOL_A = "0x" + "1" * 39 + "f"
NATIVE_FEE = 3 * 10**14


@pytest.fixture
def runner(db: TestDatabase) -> Conn:
    """The runner login's connection, the one a dispatcher holds."""
    return bind(db.connect(db.runner_dsn("testnet")))


def claimed_send(conn: Conn, runner: Conn, **config: Any) -> tuple[int, str, Any]:
    """A started send node, claimed by the runner login, and its route."""
    node_id = send_node(conn, "10", **config)
    approve(conn, request_of(conn, node_id))
    procs.start_approved_movements(10).one(conn)
    [claim] = procs.claim_ready_nodes("w1", 1, 300).all(runner)
    assert claim.node_id == node_id
    return node_id, claim.claim_secret, procs.stargate_send_route(node_id).one(runner)


def request_of(conn: Conn, node_id: int) -> int:
    row = conn.execute(
        "SELECT request_id FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def send_calldata(route: Any, fee: int = NATIVE_FEE, refund: str = SENDER, **change: Any) -> bytes:
    """StargatePool.send as the executor encodes it, with ``change`` made to the route."""
    fields = {k: getattr(route, k) for k in route.__dataclass_fields__} | change
    row = type(route)(**fields)
    return SEND + encode(
        [SEND_PARAM, "(uint256,uint256)", "address"], [_send_param(row), (fee, 0), refund]
    )


def payload_of(route: Any, data: bytes) -> str:
    """The payload the executor records for ``route`` (its prepare's keys),
    carrying ``data`` as its calldata."""
    return json.dumps(
        ChainLeg.from_row(route).payload()
        | {
            "protocol": "stargate",
            "token": route.token,
            "token_address": route.token_address,
            "recipient": route.recipient,
            "amount_units": str(route.amount_units),
            "gas": 300_000,
            "max_fee_per_gas": "2000000000",
            "max_priority_fee_per_gas": "1000000000",
            "mode": route.mode,
            "pool": route.src_pool,
            "token_messaging": route.src_token_messaging,
            "src_eid": route.src_eid,
            "min_amount_units": str(route.min_amount_units),
            "quoted_received_units": str(route.min_amount_units),
            "native_fee": str(NATIVE_FEE),
            "calldata": "0x" + data.hex(),
            "dst_chain_key": route.dst_chain_key,
            "dst_rpc_url_env": route.dst_rpc_url_env,
            "dst_finality_depth": route.dst_finality_depth,
            "dst_block_time_s": route.dst_block_time_ms / 1000,
            "dst_eid": route.dst_eid,
            "dst_pool": route.dst_pool,
            "dst_from_block": 7,
        }
    )


@pytest.mark.parametrize(
    "forged",
    [
        {"recipient": COUNTERPARTY},
        {"dst_eid": 50903},
        {"amount_units": 10_000_001},
        {"min_amount_units": 1},
        {"mode": "bus"},
        {"refund": COUNTERPARTY},
        {"to": "0x" + "2" * 39 + "f"},  # the destination's pool
        {"to": "0x" + "1" * 38 + "ee"},  # the source's TokenMessaging
        {"value": NATIVE_FEE + 1},  # ether beyond the fee the call names
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_send_records_only_its_routes_send(
    chains: Conn, runner: Conn, forged: dict[str, Any]
) -> None:
    """The signed bytes of a stargate node are its route's send, byte for byte:
    SendParam's endpoint, recipient, amount, least to receive and mode, the
    refund address, on the source pool, paying in ether exactly the fee the
    call names. Anything else, recorded by the runner login, is refused
    (QT032) and nothing is kept; the payload's calldata must be the same send."""
    node_id, secret, route = claimed_send(chains, runner)
    change = dict(forged)
    to = change.pop("to", POOL_A)
    value = change.pop("value", NATIVE_FEE)
    refund = change.pop("refund", SENDER)
    data = send_calldata(route, refund=refund, **change)
    tx_hash, raw = call(1, 0, to, data, value)
    assert_rejected(
        runner, "QT032", RECORD, (node_id, secret, tx_hash, None, SENDER, raw), watcher=chains
    )
    honest = send_calldata(route)
    tx_hash, raw = call(1, 0, POOL_A, honest, NATIVE_FEE)
    if change or refund != SENDER:
        # the honest bytes beside a payload whose calldata (what a replacement
        # is signed from) is the forged send
        error = assert_rejected(
            runner, "QT032", RECORD,
            (node_id, secret, tx_hash, payload_of(route, data), SENDER, raw),
            watcher=chains,
        )  # fmt: skip
        assert "calldata" in str(error)
    runner.execute(RECORD, (node_id, secret, tx_hash, payload_of(route, honest), SENDER, raw))


def test_a_payload_names_the_routes_token_messaging(chains: Conn, runner: Conn) -> None:
    """Observation reads a bus ride's BusRode and BusDriven where the payload
    says TokenMessaging is: a payload naming another contract is not the route."""
    node_id, secret, route = claimed_send(chains, runner, mode="bus")
    honest = send_calldata(route)
    tx_hash, raw = call(1, 0, POOL_A, honest, NATIVE_FEE)
    forged = json.loads(payload_of(route, honest)) | {"token_messaging": "0x" + "3" * 40}
    error = assert_rejected(
        runner, "QT032", RECORD, (node_id, secret, tx_hash, json.dumps(forged), SENDER, raw),
        watcher=chains,
    )  # fmt: skip
    assert "token_messaging" in str(error)
    runner.execute(RECORD, (node_id, secret, tx_hash, payload_of(route, honest), SENDER, raw))
