"""The CCIP procedures without a chain: what a ccip node may record
(ccip_send_route, read through intent_tx_problem's ccip_send_tx_problem) and
the stranded reaper's record (ccip_stranded_sends, record_ccip_manual_execution).

What a treasury relies on: a ccip node's signed bytes are exactly the
Router.ccipSend its route says, byte for byte (receiver, amount, token,
destination, the Router itself, a bounded fee), or refused with nothing kept;
a receiver is judged on the DESTINATION chain; a manual execution is recorded
only for a send whose execution FAILED, only as a manuallyExecute of that
message on the destination's registered OffRamp, once per attempt (compare and
set on the newest), before anything is broadcast."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
from engine import assert_rejected, create_started, node, node_ids, pin_clock, plan
from evm_rows import call, register_transfers
from rows import Conn, iso_at

from qtg_runner.chains.ccip import (
    SentMessage,
    TokenTransfer,
    ccip_send_calldata,
    manually_execute_calldata,
)
from qtg_runner.chains.evm import Fees
from qtg_runner.db import procs
from qtg_runner.executors.ccip import CcipExecutor, _Route

SOURCE, DEST = "test-a", "test-b"
SOURCE_ID, DEST_ID = 31401, 31402
SENDER = "0x" + "a1" * 20
RECEIVER = "0x" + "d4" * 20
TOKEN_A, TOKEN_B = "0x" + "70" * 20, "0x" + "71" * 20
ROUTER, ONRAMP, OFFRAMP_B = "0x" + "c1" * 20, "0x" + "c2" * 20, "0x" + "c3" * 20
SELECTOR_A, SELECTOR_B = 7_700_000_000_000_031_401, 7_700_000_000_000_031_402
UNITS = 100 * 10**6
MESSAGE = "0x" + "ab" * 32
RECORD = (
    "SELECT record_intent_prepared(%s, %s, p_nonce => %s, p_signed_tx_hash => %s,"
    " p_chain_key => %s, p_sender => %s, p_raw_tx => %s)"
)


def register(conn: Conn) -> None:
    """Both chains, the sender a treasury account on the source, the receiver
    allow-listed on the DESTINATION only, CCIP rows on both."""
    register_transfers(conn, SOURCE, SOURCE_ID, SENDER, TOKEN_A, "0x" + "e5" * 20)
    procs.upsert_chain(DEST, DEST_ID, "QTG_RPC_TEST_B", 2, 1000).one(conn)
    procs.upsert_chain_token(DEST, "USDC", TOKEN_B, 6).one(conn)
    procs.allow_destination(DEST, RECEIVER, "the receiver").one(conn)
    procs.upsert_chain_protocol(
        SOURCE, "ccip", SELECTOR_A,
        {"CcipRouter": ROUTER, "CcipOnRamp": ONRAMP, "CcipOffRamp": "0x" + "c4" * 20},
    ).one(conn)  # fmt: skip
    procs.upsert_chain_protocol(
        DEST, "ccip", SELECTOR_B,
        {"CcipRouter": "0x" + "c5" * 20, "CcipOnRamp": "0x" + "c6" * 20, "CcipOffRamp": OFFRAMP_B},
    ).one(conn)  # fmt: skip
    ccip = CcipExecutor
    procs.register_executor(ccip.key, True, ccip.node_config_schema, ccip.description).one(conn)


def ccip_nodes(conn: Conn, keys: str, to: str = RECEIVER) -> dict[str, dict[str, Any]]:
    config = {"chain": SOURCE, "destination_chain": DEST, "from": SENDER, "to": to}
    movement = create_started(
        conn, plan(*(node(k, [], CcipExecutor.key, "ccip", **config) for k in keys)), "m-" + keys
    )
    ids = node_ids(conn, movement)
    claimed = {c.node_id: asdict(c) for c in procs.claim_ready_nodes("w1", 100, 300).all(conn)}
    return {key: claimed[node_id] for key, node_id in ids.items()}


def send(
    nonce: int,
    *,
    receiver: str = RECEIVER,
    units: int = UNITS,
    to: str = ROUTER,
    dest: int = SELECTOR_B,
    value: int = 10**15,
    gas_limit: int = 200_000,
) -> tuple[str, str]:
    data = ccip_send_calldata(dest, receiver, TOKEN_A, units, gas_limit)
    return call(SOURCE_ID, nonce, to, data, value)


def test_a_ccip_node_records_only_its_routes_ccip_send(conn: Conn) -> None:
    register(conn)
    c = ccip_nodes(conn, "abcdefgh")

    def attempt(key: str, nonce: int, signed: tuple[str, str]) -> None:
        conn.execute(
            RECORD,
            (
                c[key]["node_id"],
                c[key]["claim_secret"],
                nonce,
                signed[0],
                SOURCE,
                SENDER,
                signed[1],
            ),
        )

    attempt("a", 0, send(0))
    refused = [
        send(1, receiver="0x" + "e5" * 20),  # allowed on the source, not where it lands
        send(1, units=UNITS + 1),
        send(1, to=ONRAMP),  # a registered contract, not the Router
        send(1, dest=SELECTOR_A),  # another destination
        send(1, value=10**18 + 1),  # a fee beyond the bound
        send(1, gas_limit=5_000),  # another message (extraArgs)
    ]
    for key, signed in zip("bcdefg", refused, strict=True):
        assert_rejected(
            conn,
            "QT032",
            RECORD,
            (c[key]["node_id"], c[key]["claim_secret"], 1, signed[0], SOURCE, SENDER, signed[1]),
        )
    assert procs.evm_next_nonce(SOURCE, SENDER).one(conn) == 1


def test_a_receiver_is_judged_on_the_destination_chain(conn: Conn) -> None:
    register(conn)
    c = ccip_nodes(conn, "ab")
    route = procs.ccip_send_route(c["a"]["node_id"]).one(conn)
    assert (route.dest_chain_key, route.recipient, route.recipient_kind) == (
        DEST,
        RECEIVER,
        "allowed",
    )
    assert (route.router, route.dest_offramp, int(route.amount_units)) == (ROUTER, OFFRAMP_B, UNITS)
    assert int(route.dest_selector) == SELECTOR_B
    outsider = ccip_nodes(conn, "c", to="0x" + "e5" * 20)["c"]  # allowed on the source only
    assert_rejected(conn, "QT032", "SELECT * FROM ccip_send_route(%s)", (outsider["node_id"],))


RECORD_WITH_PAYLOAD = (
    "SELECT record_intent_prepared(%s, %s, p_nonce => %s, p_signed_tx_hash => %s,"
    " p_payload => %s::jsonb, p_chain_key => %s, p_sender => %s, p_raw_tx => %s)"
)


def honest_payload(conn: Conn, node_id: int) -> dict[str, Any]:
    """What the ccip executor records for the node (its own payload builder)."""
    route = _Route.from_row(procs.ccip_send_route(node_id).one(conn))
    return route.payload(200_000, Fees(2 * 10**9, 10**9), 10**15, 7)


@pytest.mark.parametrize(
    "forged",
    [
        {"recipient": "0x" + "e5" * 20},
        {"amount_units": str(UNITS * 10)},
        {"dest_chain_key": SOURCE},
        {"dest_rpc_url_env": "QTG_RPC_TEST_A"},
        {"router": ONRAMP},
        {"signer_id": "env:QTG_OTHER_KEY"},
        {"dest_offramp": "0x" + "c4" * 20},
        {"webhook": "https://example.invalid/"},  # a key the executor never records
        {"gas": {"nested": True}},  # a measured value that is not a plain value
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_ccip_payload_is_its_route_or_refused(conn: Conn, forged: dict[str, Any]) -> None:
    """The payload recovery and observation read (where to look for the
    message, which RPC and signer NAMES to use) is the route's, with the
    honest signed send beside it: a forged field is refused and named."""
    register(conn)
    c = ccip_nodes(conn, "a")["a"]
    tx_hash, raw = send(0)
    payload = honest_payload(conn, c["node_id"]) | forged
    error = assert_rejected(
        conn, "QT032" if "gas" not in forged else "QT002", RECORD_WITH_PAYLOAD,
        (c["node_id"], c["claim_secret"], 0, tx_hash, json.dumps(payload), SOURCE, SENDER, raw),
    )  # fmt: skip
    assert next(iter(forged)) in str(error)
    conn.execute(
        RECORD_WITH_PAYLOAD,
        (
            c["node_id"], c["claim_secret"], 0, tx_hash,
            json.dumps(honest_payload(conn, c["node_id"])), SOURCE, SENDER, raw,
        ),
    )  # fmt: skip


def test_a_recovery_verdict_on_a_send_names_a_transaction_it_signed(conn: Conn) -> None:
    """COMPLETED or FAILED on a side effect that may be out stands on the
    executor's evidence: for an EVM intent, a transaction the intent signed
    (its external reference), with evidence; otherwise refused (QT032, QT002)
    and nothing changes."""
    register(conn)
    c = ccip_nodes(conn, "a")["a"]
    tx_hash, raw = send(0)
    conn.execute(RECORD, (c["node_id"], c["claim_secret"], 0, tx_hash, SOURCE, SENDER, raw))
    conn.execute("SELECT fail_submit(%s, %s, 'no answer', true)", (c["node_id"], c["claim_secret"]))
    pin_clock(conn, iso_at(3600))
    [rec] = procs.claim_recovery_nodes("node_recovery", 1, 120).all(conn)
    verdict = "SELECT complete_recovery(%s, %s, %s, %s::jsonb, %s)"
    seen = json.dumps({"tx_hash": tx_hash, "status": 1})
    for outcome in ("COMPLETED", "FAILED"):
        assert_rejected(
            conn, "QT032", verdict, (rec.node_id, rec.claim_secret, outcome, seen, "0x" + "ab" * 32)
        )
        assert_rejected(
            conn, "QT002", verdict, (rec.node_id, rec.claim_secret, outcome, None, tx_hash)
        )
    conn.execute(verdict, (rec.node_id, rec.claim_secret, "COMPLETED", seen, tx_hash))


def stranded(conn: Conn) -> int:
    """A ccip node OBSERVING whose evidence says its execution FAILED."""
    c = ccip_nodes(conn, "s")["s"]
    tx_hash, raw = send(0)
    conn.execute(
        RECORD, (c["node_id"], c["claim_secret"], 0, tx_hash, SOURCE, SENDER, raw)
    )  # fmt: skip
    procs.complete_submit(c["node_id"], c["claim_secret"], tx_hash).one(conn)
    pin_clock(conn, iso_at(600))  # due, and far from the ccip lane's fatal phase
    observed = procs.claim_observe(c["node_id"], "obs").one(conn)
    evidence = {"ccip_state": "FAILURE", "message_id": MESSAGE, "source_chain": SOURCE,
                "dest_chain": DEST, "source_tx": tx_hash}  # fmt: skip
    procs.complete_observe(c["node_id"], observed.claim_secret, "PENDING", evidence).one(conn)
    return int(c["node_id"])


def manual(nonce: int, message_id: str = MESSAGE, to: str = OFFRAMP_B) -> tuple[str, str]:
    message = SentMessage(
        message_id=bytes.fromhex(message_id[2:]), source_selector=SELECTOR_A,
        dest_selector=SELECTOR_B, sequence_number=1, nonce=0, sender=SENDER, data=b"",
        receiver=RECEIVER, extra_args=b"", fee_token="0x" + "00" * 20, fee_amount=1,
        tokens=(TokenTransfer(ONRAMP, TOKEN_B, UNITS, b""),), onramp=ONRAMP,
        tx_hash="0x" + "12" * 32, block_number=1, log_index=0,
    )  # fmt: skip
    return call(DEST_ID, nonce, to, manually_execute_calldata(message))


def test_a_manual_execution_is_recorded_for_a_stranded_send_once_per_attempt(conn: Conn) -> None:
    register(conn)
    node_id = stranded(conn)
    (row,) = procs.ccip_stranded_sends(10).all(conn)
    assert (row.node_id, row.message_id, row.dest_offramp, row.attempts) == (
        node_id,
        MESSAGE,
        OFFRAMP_B,
        [],
    )
    keeper = "0x" + "4e" * 20
    first = manual(0)
    # another message's bytes, or not to the OffRamp: refused
    for bad in (manual(0, "0x" + "cd" * 32), manual(0, to="0x" + "c5" * 20)):
        assert_rejected(
            conn, "QT002",
            "SELECT record_ccip_manual_execution(%s, %s, %s, %s, %s, %s)",
            (node_id, MESSAGE, keeper, 0, bad[0], bad[1]),
        )  # fmt: skip
    assert procs.record_ccip_manual_execution(node_id, MESSAGE, keeper, 0, first[0], first[1]).one(
        conn
    )
    # the same again changes nothing
    assert not procs.record_ccip_manual_execution(
        node_id, MESSAGE, keeper, 0, first[0], first[1]
    ).one(conn)
    # a second attempt must name the newest: another reaper's is refused
    second = manual(1)
    assert_rejected(
        conn, "QT021",
        "SELECT record_ccip_manual_execution(%s, %s, %s, %s, %s, %s)",
        (node_id, MESSAGE, keeper, 1, second[0], second[1]),
    )  # fmt: skip
    assert procs.record_ccip_manual_execution(
        node_id, MESSAGE, keeper, 1, second[0], second[1], first[0]
    ).one(conn)
    (row,) = procs.ccip_stranded_sends(10).all(conn)
    assert [a["tx_hash"] for a in row.attempts] == [first[0], second[0]]
    audit = conn.execute(
        "SELECT count(*) FROM audit_outbox WHERE action = 'ccip_manual_execution_recorded'"
    ).fetchone()
    assert audit is not None and audit[0] == 2
