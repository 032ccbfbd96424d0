"""The selectors and encodings in SQL against the real ABIs: every four-byte
literal of sql/functions (SQL_SELECTORS, found complete by reading the files)
is the real contract's selector; and the bytes the SQL builds or expects are
the real ABI's encoding: stargate_send_calldata's bytes decoded by web3 with
StargatePool's ABI; ccip_send_tx_problem and bridge_call_problem accepting
the call the real ABI encodes for their route, and record_ccip_manual_execution
the OffRamp's own encoding of a stranded message's manuallyExecute (the test
database of tests/conftest.py: no chain)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from conformance_abis import (
    REPO,
    Contract,
    ccip,
    ccip_constant,
    circle,
    node_modules,
    plain,
    stargate,
    usdc,
)
from engine import create, create_started, node, node_ids, pin_clock, plan
from eth_abi.abi import encode
from eth_utils import to_checksum_address
from evm_rows import FEES, call, register_transfers
from rows import Conn, iso_at

from qtg_runner.db import procs
from qtg_runner.executors.ccip import CcipExecutor, _Route
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor

SQL = REPO / "sql" / "functions"

SQL_SELECTORS: dict[str, tuple[Callable[[], Contract], str, tuple[Any, ...]]] = {
    "c7c7f5b3": (lambda: stargate("StargatePool"), "send", ()),
    "96f4e9f9": (lambda: ccip("Router"), "ccipSend", ()),
    "8e0250ee": (lambda: circle("TokenMessengerV2"), "depositForBurn", ()),
    "57ecfd28": (lambda: circle("MessageTransmitterV2"), "receiveMessage", ()),
    "a9059cbb": (usdc, "transfer", ()),
    "5e7bb008": (lambda: ccip("OffRamp"), "manuallyExecute", ()),
}
"""Each four-byte selector written in sql/functions: the real function it stands for."""

NOT_ABI = {
    "181dcf10": "Client.GENERIC_EXTRA_ARGS_V2_TAG (checked on its own)",
    "00005efe": "an IPv6 ISATAP interface id (host_address_problem)",
    "02005efe": "an IPv6 ISATAP interface id (host_address_problem)",
}

_LITERAL = re.compile(r"'(?:\\x)?([0-9a-f]{8})'")


def sql_literals() -> dict[str, list[str]]:
    """Every four-byte hex literal of sql/functions: hex -> ['file:line', ...]."""
    found: dict[str, list[str]] = {}
    for path in sorted(SQL.rglob("*.sql")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for hex_ in _LITERAL.findall(line.split("--")[0]):
                found.setdefault(hex_, []).append(f"{path.relative_to(REPO)}:{number}")
    return found


@pytest.mark.parametrize(
    "hex_", [pytest.param(h, marks=v[2], id=f"{h}-{v[1]}") for h, v in SQL_SELECTORS.items()]
)
def test_the_sql_selectors_are_the_real_contracts(hex_: str) -> None:
    contract, function, _ = SQL_SELECTORS[hex_]
    real = contract().selectors(function)
    where = sql_literals().get(hex_, ["nowhere"])
    assert "0x" + hex_ in real, f"{where}: 0x{hex_}, but {contract()}'s {function} is {real}"


def test_the_table_holds_every_four_byte_literal_of_the_sql() -> None:
    found = sql_literals()
    listed = set(SQL_SELECTORS) | set(NOT_ABI)
    assert not set(found) - listed, {h: found[h] for h in set(found) - listed}
    assert not set(SQL_SELECTORS) - set(found), f"gone: {set(SQL_SELECTORS) - set(found)}"


def test_the_sqls_extra_args_tag_is_v1_6s() -> None:
    node_modules()
    assert sql_literals()["181dcf10"], "ccip_send_tx_problem writes the tag"
    assert ccip_constant("Client.sol", "GENERIC_EXTRA_ARGS_V2_TAG") == "0x181dcf10"


# -- the encoders, on the test database ---------------------------------------------------

SENDER, RECIPIENT = "0x" + "a1" * 20, "0x" + "d4" * 20


@pytest.mark.parametrize("mode", ["taxi", "bus"])
def test_stargate_send_calldata_is_the_pools_send(conn: Conn, mode: str) -> None:
    node_modules()
    route = {
        "sender": SENDER, "dst_eid": 30184, "recipient": RECIPIENT,
        "amount_units": "1000000", "min_amount_units": "999000", "mode": mode,
    }  # fmt: skip
    (data,) = conn.execute(
        "SELECT stargate_send_calldata(%s::jsonb, %s)", (json.dumps(route), 123456)
    ).fetchone()
    func, params = stargate("StargatePool").web3().decode_function_input(bytes(data))
    assert func.fn_name == "send"
    assert {k: plain(v) for k, v in params.items()} == {
        "_sendParam": (
            30184, "0x" + "00" * 12 + RECIPIENT[2:], 1_000_000, 999_000, "0x", "0x",
            "0x00" if mode == "bus" else "0x",
        ),
        "_fee": (123456, 0),
        "_refundAddress": SENDER,
    }  # fmt: skip


def _real_call(contract: Contract, function: str, args: list[Any]) -> bytes:
    """``function(args)`` as the real ABI encodes it (web3)."""
    return bytes.fromhex(contract.web3().encode_abi(function, args)[2:])


CCIP_TOKEN, CCIP_ROUTER, CCIP_ONRAMP = "0x" + "70" * 20, "0x" + "c1" * 20, "0x" + "c2" * 20
CCIP_DEST_TOKEN, CCIP_OFFRAMP_B = "0x" + "71" * 20, "0x" + "f3" * 20
CCIP_SELECTOR_A, CCIP_SELECTOR_B = 11, 22
CCIP_QUOTE = 10**15
"""The Router's quote a send records (ccip_fee); the lane's margin is 10 %."""


def _ccip_node(conn: Conn) -> tuple[int, Any]:
    """A ccip node from test-a to test-b on their v1.6 lane (USDC over CCTP, a
    10 % fee margin), and its route."""
    register_transfers(conn, "test-a", 31401, SENDER, CCIP_TOKEN, "0x" + "e5" * 20)
    procs.upsert_chain("test-b", 31402, "QTG_RPC_TEST_B", 2, 1000).one(conn)
    procs.upsert_chain_token("test-b", "USDC", CCIP_DEST_TOKEN, 6).one(conn)
    procs.allow_destination("test-b", RECIPIENT, "the receiver").one(conn)
    for chain, selector, contracts in (
        ("test-a", CCIP_SELECTOR_A,
         {"CcipRouter": CCIP_ROUTER, "CcipOnRamp": CCIP_ONRAMP, "CcipOffRamp": "0x" + "c3" * 20}),
        ("test-b", CCIP_SELECTOR_B,
         {"CcipRouter": "0x" + "f1" * 20, "CcipOnRamp": "0x" + "f2" * 20,
          "CcipOffRamp": CCIP_OFFRAMP_B}),
    ):  # fmt: skip
        procs.upsert_chain_protocol(chain, "ccip", selector, contracts).one(conn)
    procs.upsert_ccip_lane("test-a", "test-b", "1.6", "cctp", fee_margin_bps=1000).one(conn)
    procs.register_executor(
        CcipExecutor.key, True, CcipExecutor.node_config_schema, CcipExecutor.description
    ).one(conn)
    config = {"chain": "test-a", "destination_chain": "test-b", "from": SENDER, "to": RECIPIENT}
    movement = create_started(conn, plan(node("a", [], CcipExecutor.key, "ccip", **config)), "m")
    node_id = node_ids(conn, movement)["a"]
    return node_id, procs.ccip_send_route(node_id).one(conn)


def _ccip_send(route: Any) -> bytes:
    """The Router's own encoding of ccipSend(dest, EVM2AnyMessage{abi.encode(
    receiver), "", [(token, amount)], native fee, GenericExtraArgsV2(the
    route's gas limit, true)})."""
    tag = bytes.fromhex(ccip_constant("Client.sol", "GENERIC_EXTRA_ARGS_V2_TAG")[2:])
    message = (
        encode(["address"], [RECIPIENT]),
        b"",
        [(to_checksum_address(CCIP_TOKEN), int(route.amount_units))],
        to_checksum_address("0x" + "00" * 20),
        tag + encode(["uint256", "bool"], [int(route.gas_limit), True]),
    )
    return _real_call(ccip("Router"), "ccipSend", [int(route.dest_selector), message])


def test_ccip_send_tx_problem_accepts_the_routers_encoding(conn: Conn) -> None:
    """The bytes a ccip node must sign are the Router's own encoding of the
    token-only ccipSend of its route, paying the recorded quote and the
    lane's margin."""
    node_modules()
    node_id, route = _ccip_node(conn)
    (problem,) = conn.execute(
        "SELECT ccip_send_tx_problem(%s, 'test-a', %s, %s, %s, %s::jsonb)",
        (
            node_id,
            CCIP_ROUTER,
            CCIP_QUOTE + CCIP_QUOTE // 10,
            _ccip_send(route),
            json.dumps({"ccip_fee": str(CCIP_QUOTE)}),
        ),
    ).fetchone()
    assert problem is None


def test_record_ccip_manual_execution_accepts_the_offramps_encoding(conn: Conn) -> None:
    """The manual execution of a stranded send the reaper may record is
    OffRamp 1.6's own encoding of manuallyExecute([a report of the message
    alone], [[no overrides]]) to the lane's OffRamp on the destination."""
    node_modules()
    node_id, route = _ccip_node(conn)
    claimed = {c.node_id: c for c in procs.claim_ready_nodes("w1", 100, 300).all(conn)}
    payload = _Route.from_row(route).payload(200_000, FEES, CCIP_QUOTE, 7)
    tx_hash, raw = call(31401, 0, CCIP_ROUTER, _ccip_send(route), CCIP_QUOTE + CCIP_QUOTE // 10)
    procs.record_intent_prepared(
        node_id, claimed[node_id].claim_secret, nonce=0, signed_tx_hash=tx_hash,
        payload=payload, chain_key="test-a", sender=SENDER, raw_tx=raw,
    ).one(conn)  # fmt: skip
    procs.complete_submit(node_id, claimed[node_id].claim_secret, tx_hash).one(conn)
    pin_clock(conn, iso_at(600))
    message_id = bytes([0xAB] * 32)
    evidence = {"ccip_state": "FAILURE", "message_id": "0x" + message_id.hex(),
                "source_chain": "test-a", "dest_chain": "test-b", "source_tx": tx_hash}  # fmt: skip
    with conn.transaction():
        observed = procs.claim_observe(node_id, "obs").one(conn)
        procs.complete_observe(node_id, observed.claim_secret, "PENDING", evidence).one(conn)

    any2evm = (
        (message_id, CCIP_SELECTOR_A, CCIP_SELECTOR_B, 1, 0),
        encode(["address"], [SENDER]),
        b"",
        to_checksum_address(RECIPIENT),
        0,
        [(encode(["address"], [CCIP_ONRAMP]), to_checksum_address(CCIP_DEST_TOKEN), 180_000,
          b"\x01" * 320, int(route.amount_units))],
    )  # fmt: skip
    report = (CCIP_SELECTOR_A, [any2evm], [[b"\x05" * 600]], [], 0)
    data = _real_call(ccip("OffRamp"), "manuallyExecute", [[report], [[(0, [0])]]])
    manual_hash, manual_raw = call(31402, 0, CCIP_OFFRAMP_B, data)
    assert procs.record_ccip_manual_execution(
        node_id, "0x" + message_id.hex(), "0x" + "4e" * 20, 0, manual_hash, manual_raw
    ).one(conn)


def test_bridge_call_problem_accepts_circles_deposit_for_burn(conn: Conn) -> None:
    """The bytes a cctp_burn node must sign are Circle's TokenMessengerV2
    encoding of depositForBurn for its route (no destination caller)."""
    messenger = circle("TokenMessengerV2")
    usdc_a, messenger_a, treasury, other = ("0x" + c * 40 for c in "13de")
    for key, chain_id, usdc_address, contracts, domain in (
        ("chain-a", 1, usdc_a, {"TokenMessengerV2": messenger_a,
                                "MessageTransmitterV2": "0x" + "6" * 40}, 100),
        ("chain-b", 2, "0x" + "2" * 40, {"TokenMessengerV2": "0x" + "4" * 40,
                                         "MessageTransmitterV2": "0x" + "7" * 40}, 101),
    ):  # fmt: skip
        procs.upsert_chain(key, chain_id, f"QTG_RPC_{key[-1].upper()}", 2, 1000).one(conn)
        procs.upsert_chain_token(key, "USDC", usdc_address, 6).one(conn)
        for address in (treasury, other):
            procs.upsert_treasury_account(key, address, "env:KEY").one(conn)
        procs.upsert_chain_protocol(key, "cctp", domain, contracts).one(conn)
    for executor in (CctpBurnExecutor, CctpMintExecutor):
        procs.register_executor(
            executor.key, True, executor.node_config_schema, executor.description
        ).one(conn)
    burn = node(
        "burn",
        [],
        CctpBurnExecutor.key,
        "cctp-fast",
        chain="chain-a",
        destination_chain="chain-b",
        to=other,
        finality="fast",
        **{"from": treasury},
    )
    mint = node("mint", ["burn"], CctpMintExecutor.key, chain="chain-b", source_chain="chain-a",
                to=other, **{"from": treasury})  # fmt: skip
    ids = node_ids(conn, create(conn, plan(burn, mint), "burn", "2.5"))
    route = procs.cctp_burn_route(ids["burn"]).one(conn)
    data = _real_call(
        messenger,
        "depositForBurn",
        [
            int(route.amount_units),
            int(route.destination_domain),
            encode(["address"], [route.mint_recipient]),
            to_checksum_address(route.token_address),
            bytes(32),
            int(route.max_fee_units),
            int(route.min_finality_threshold),
        ],
    )
    (problem,) = conn.execute(
        "SELECT bridge_call_problem(%s, 'cctp_burn', 'chain-a', %s, 0, %s)",
        (ids["burn"], route.token_messenger, data),
    ).fetchone()
    assert problem is None
