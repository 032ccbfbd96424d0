"""The CCIP procedures without a chain: the admin's lanes (upsert_ccip_lane),
what a ccip node may record (ccip_send_route, read through intent_tx_problem's
ccip_send_tx_problem) and the stranded reaper's record (ccip_stranded_sends,
record_ccip_manual_execution).

What a treasury relies on: nothing is sent on a lane the admin has not
recorded, with its CCIP version and ramps; a ccip node's signed bytes are
exactly the Router.ccipSend its route says, byte for byte (receiver, amount,
token, destination, the Router itself, a token-only message with gas limit
0), paying exactly the Router's quote its payload records and the lane's
margin of it, never more than the lane's cap, or refused with nothing kept; a
receiver is judged on the DESTINATION chain; a manual execution is recorded
only for a send whose execution FAILED on a v1.6 lane, only as OffRamp 1.6's
manuallyExecute (0x5e7bb008) of a report of that message alone on the lane's
OffRamp, once per attempt (compare and set on the newest), before anything is
broadcast."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
from conftest import TestDatabase
from engine import assert_rejected, bind, create_started, node, node_ids, pin_clock, plan
from eth_abi.abi import decode, encode
from evm_rows import call, register_transfers
from rows import Conn, iso_at

from qtg_runner.chains.ccip import (
    MANUALLY_EXECUTE_SELECTOR,
    SentMessage,
    TokenTransfer,
    ccip_send_calldata,
    fee_with_margin,
    manually_execute_calldata,
)
from qtg_runner.chains.evm import Fees
from qtg_runner.db import procs
from qtg_runner.db.migrate import MigrationError, applied_migrations, migrate, rollback
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
QUOTE = 10**15
"""The Router's quote the tests' sends record (ccip_fee)."""
MARGIN_BPS = 1_000
PAID = fee_with_margin(QUOTE, MARGIN_BPS)
RECORD = (
    "SELECT record_intent_prepared(%s, %s, p_nonce => %s, p_signed_tx_hash => %s,"
    " p_payload => %s::jsonb, p_chain_key => %s, p_sender => %s, p_raw_tx => %s)"
)
RECORD_BARE = (
    "SELECT record_intent_prepared(%s, %s, p_nonce => %s, p_signed_tx_hash => %s,"
    " p_chain_key => %s, p_sender => %s, p_raw_tx => %s)"
)


def register(conn: Conn, lane: bool = True) -> None:
    """Both chains, the sender a treasury account on the source, the receiver
    allow-listed on the DESTINATION only, CCIP rows on both, and (``lane``)
    the v1.6 lane from the source to the destination: USDC over CCTP, a 10 %
    fee margin, 1 ether at most."""
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
    if lane:
        procs.upsert_ccip_lane(
            SOURCE, DEST, "1.6", token_data="cctp", fee_margin_bps=MARGIN_BPS
        ).one(conn)


@pytest.fixture
def runner(db: TestDatabase) -> Conn:
    """The runner login's connection, the one a dispatcher holds."""
    return bind(db.connect(db.runner_dsn("testnet")))


def ccip_nodes(
    conn: Conn, keys: str, to: str = RECEIVER, claimer: Conn | None = None
) -> dict[str, dict[str, Any]]:
    """The ccip nodes ``keys``, started and claimed (by ``claimer``, default ``conn``)."""
    config = {"chain": SOURCE, "destination_chain": DEST, "from": SENDER, "to": to}
    movement = create_started(
        conn, plan(*(node(k, [], CcipExecutor.key, "ccip", **config) for k in keys)), "m-" + keys
    )
    ids = node_ids(conn, movement)
    claims = procs.claim_ready_nodes("w1", 100, 300).all(claimer or conn)
    claimed = {c.node_id: asdict(c) for c in claims}
    return {key: claimed[node_id] for key, node_id in ids.items()}


def send(
    nonce: int,
    *,
    receiver: str = RECEIVER,
    units: int = UNITS,
    to: str = ROUTER,
    dest: int = SELECTOR_B,
    value: int = PAID,
    gas_limit: int = 0,
) -> tuple[str, str]:
    data = ccip_send_calldata(dest, receiver, TOKEN_A, units, gas_limit)
    return call(SOURCE_ID, nonce, to, data, value)


def honest_payload(conn: Conn, node_id: int, quote: int = QUOTE) -> dict[str, Any]:
    """What the ccip executor records for the node (its own payload builder)."""
    route = _Route.from_row(procs.ccip_send_route(node_id).one(conn))
    return route.payload(200_000, Fees(2 * 10**9, 10**9), quote, 7)


def test_a_ccip_node_records_only_its_routes_token_only_send_paying_quote_and_margin(
    conn: Conn, runner: Conn
) -> None:
    """Played with the runner login: the signed bytes of another receiver,
    amount, contract, destination, gas limit or fee are refused beside the
    honest payload, and nothing changes."""
    register(conn)
    c = ccip_nodes(conn, "abcdefghijk", claimer=runner)

    def args(key: str, nonce: int, signed: tuple[str, str], quote: int = QUOTE) -> tuple[Any, ...]:
        node_id = c[key]["node_id"]
        payload = json.dumps(honest_payload(runner, node_id, quote))
        return (
            node_id,
            c[key]["claim_secret"],
            nonce,
            signed[0],
            payload,
            SOURCE,
            SENDER,
            signed[1],
        )

    runner.execute(RECORD, args("a", 0, send(0)))
    refused = [
        send(1, receiver="0x" + "e5" * 20),  # allowed on the source, not where it lands
        send(1, units=UNITS + 1),
        send(1, to=ONRAMP),  # a registered contract, not the Router
        send(1, dest=SELECTOR_A),  # another destination
        send(1, gas_limit=200_000),  # a message with a receiver callback's gas (extraArgs)
        send(1, value=QUOTE),  # the bare quote: a fee risen since would revert the send
        send(1, value=PAID + 1),  # more than the quote and the margin
        send(1, value=10**18 + 1),
    ]
    for key, signed in zip("bcdefghi", refused, strict=True):
        assert_rejected(runner, "QT032", RECORD, args(key, 1, signed), watcher=conn)
    # a quote whose margin passes the lane's cap of 1 ether: refused too
    big = 10**18 - 10**15
    assert_rejected(
        runner, "QT032", RECORD, args("j", 1, send(1, value=fee_with_margin(big, 1000)), big),
        watcher=conn,
    )  # fmt: skip
    # bytes without the quote they pay: nothing to hold the fee to
    bare = send(1)
    error = assert_rejected(
        runner, "QT032", RECORD_BARE,
        (c["k"]["node_id"], c["k"]["claim_secret"], 1, bare[0], SOURCE, SENDER, bare[1]),
        watcher=conn,
    )  # fmt: skip
    assert "ccip_fee" in str(error)
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
    # the lane's word: its version and ramps, the token-only gas limit, the fee rule
    assert (route.ccip_version, route.onramp, route.gas_limit) == ("1.6", ONRAMP, 0)
    assert (route.fee_margin_bps, int(route.max_fee_wei)) == (MARGIN_BPS, 10**18)
    outsider = ccip_nodes(conn, "c", to="0x" + "e5" * 20)["c"]  # allowed on the source only
    assert_rejected(conn, "QT032", "SELECT * FROM ccip_send_route(%s)", (outsider["node_id"],))


def test_nothing_is_sent_on_a_lane_not_recorded(conn: Conn) -> None:
    register(conn, lane=False)
    c = ccip_nodes(conn, "a")["a"]
    error = assert_rejected(conn, "QT014", "SELECT * FROM ccip_send_route(%s)", (c["node_id"],))
    assert "lane" in str(error)
    tx_hash, raw = send(0)
    assert_rejected(
        conn, "QT014", RECORD_BARE,
        (c["node_id"], c["claim_secret"], 0, tx_hash, SOURCE, SENDER, raw),
    )  # fmt: skip


def test_the_admin_records_a_lane_with_its_version_ramps_and_fee_rule(conn: Conn) -> None:
    register(conn, lane=False)
    lane = "SELECT upsert_ccip_lane(%s, %s, %s, p_onramp => %s, p_offramp => %s)"
    # a v1.6 lane takes the chains' ramps; a v1.5 lane names its own
    procs.upsert_ccip_lane(DEST, SOURCE, "1.6").one(conn)
    row = conn.execute(
        "SELECT version, onramp, offramp, token_data, fee_margin_bps, max_fee_wei FROM ccip_lanes"
        " WHERE source_chain_key = %s",
        (DEST,),
    ).fetchone()
    assert row == ("1.6", "0x" + "c6" * 20, "0x" + "c4" * 20, "none", 1000, 10**18)
    assert_rejected(conn, "QT002", lane, (SOURCE, DEST, "1.5", None, None))
    for version in ("2.0", "1.2", None):
        assert_rejected(conn, "QT002", lane, (SOURCE, DEST, version, None, None))
    assert_rejected(conn, "QT002", lane, (SOURCE, SOURCE, "1.6", None, None))
    assert_rejected(conn, "QT014", lane, (SOURCE, "nowhere", "1.6", None, None))
    procs.upsert_chain("test-c", 31403, "QTG_RPC_TEST_C", 2, 1000).one(
        conn
    )  # registered, but no CCIP there
    assert_rejected(conn, "QT014", lane, (SOURCE, "test-c", "1.6", None, None))
    for bad in (
        "SELECT upsert_ccip_lane(%s, %s, '1.6', p_token_data => 'lock_release')",
        "SELECT upsert_ccip_lane(%s, %s, '1.6', p_fee_margin_bps => 10001)",
        "SELECT upsert_ccip_lane(%s, %s, '1.6', p_fee_margin_bps => -1)",
        "SELECT upsert_ccip_lane(%s, %s, '1.6', p_max_fee_wei => 0)",
        "SELECT upsert_ccip_lane(%s, %s, '1.6', p_max_fee_wei => 1e21)",
        "SELECT upsert_ccip_lane(%s, %s, '1.6', p_onramp => '0x12')",
    ):
        assert_rejected(conn, "QT002", bad, (SOURCE, DEST))
    v15 = ("0x" + "15" * 20, "0x" + "51" * 20)
    conn.execute(lane, (SOURCE, DEST, "1.5", *v15))
    conn.execute(lane, (SOURCE, DEST, "1.5", *v15))  # the same again: nothing changes
    audit = conn.execute(
        "SELECT count(*) FROM audit_outbox WHERE action = 'ccip_lane_set'"
    ).fetchone()
    assert audit is not None and audit[0] == 2
    c = ccip_nodes(conn, "a")["a"]
    route = procs.ccip_send_route(c["node_id"]).one(conn)
    assert (route.ccip_version, route.onramp, route.dest_offramp) == ("1.5", *v15)


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
        {"ccip_version": "1.5"},  # where the observer would read the events
        {"gas_limit": 200_000},
        {"fee_margin_bps": 10_000},
        {"max_fee_wei": str(10**19)},
        {"webhook": "https://example.invalid/"},  # a key the executor never records
        {"gas": {"nested": True}},  # a measured value that is not a plain value
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_ccip_payload_is_its_route_or_refused(
    conn: Conn, runner: Conn, forged: dict[str, Any]
) -> None:
    """The payload recovery and observation read (where to look for the
    message, which RPC and signer NAMES to use) is the route's, with the
    honest signed send beside it: a forged field, recorded by the runner
    login, is refused and named, and nothing changes."""
    register(conn)
    c = ccip_nodes(conn, "a", claimer=runner)["a"]
    tx_hash, raw = send(0)
    payload = honest_payload(runner, c["node_id"]) | forged
    error = assert_rejected(
        runner, "QT032" if "gas" not in forged else "QT002", RECORD,
        (c["node_id"], c["claim_secret"], 0, tx_hash, json.dumps(payload), SOURCE, SENDER, raw),
        watcher=conn,
    )  # fmt: skip
    assert next(iter(forged)) in str(error)
    runner.execute(
        RECORD,
        (
            c["node_id"], c["claim_secret"], 0, tx_hash,
            json.dumps(honest_payload(runner, c["node_id"])), SOURCE, SENDER, raw,
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
    payload = json.dumps(honest_payload(conn, c["node_id"]))
    conn.execute(
        RECORD, (c["node_id"], c["claim_secret"], 0, tx_hash, payload, SOURCE, SENDER, raw)
    )
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


def stranded(conn: Conn, evidence_of: dict[str, str] | None = None) -> int:
    """A ccip node OBSERVING whose evidence says its execution FAILED (of its
    own send, or with ``evidence_of`` what the observer's report says instead)."""
    c = ccip_nodes(conn, "s")["s"]
    tx_hash, raw = send(0)
    payload = json.dumps(honest_payload(conn, c["node_id"]))
    conn.execute(
        RECORD, (c["node_id"], c["claim_secret"], 0, tx_hash, payload, SOURCE, SENDER, raw)
    )
    procs.complete_submit(c["node_id"], c["claim_secret"], tx_hash).one(conn)
    pin_clock(conn, iso_at(600))  # due, and far from the ccip lane's fatal phase
    evidence = {"ccip_state": "FAILURE", "message_id": MESSAGE, "source_chain": SOURCE,
                "dest_chain": DEST, "source_tx": tx_hash} | (evidence_of or {})  # fmt: skip
    with conn.transaction():
        observed = procs.claim_observe(c["node_id"], "obs").one(conn)
        procs.complete_observe(c["node_id"], observed.claim_secret, "PENDING", evidence).one(conn)
    return int(c["node_id"])


def message(message_id: str = MESSAGE, source: int = SELECTOR_A) -> SentMessage:
    return SentMessage(
        version="1.6", message_id=bytes.fromhex(message_id[2:]), source_selector=source,
        dest_selector=SELECTOR_B, sequence_number=1, nonce=0, sender=SENDER, data=b"",
        receiver=RECEIVER, gas_limit=0, extra_args=b"", fee_token="0x" + "00" * 20,
        fee_amount=1, tokens=(TokenTransfer(ONRAMP, TOKEN_B, UNITS, b"\x01" * 320, 180_000),),
        onramp=ONRAMP, tx_hash="0x" + "12" * 32, block_number=1, log_index=0,
    )  # fmt: skip


ATTESTED = [b"\x05" * 600]
"""The USDC pool's offchain data of the message (its CCTP message and attestation)."""


def manual(
    nonce: int, message_id: str = MESSAGE, to: str = OFFRAMP_B, source: int = SELECTOR_A
) -> tuple[str, str]:
    data = manually_execute_calldata(message(message_id, source), ATTESTED)
    return call(DEST_ID, nonce, to, data)


def two_reports(nonce: int) -> tuple[str, str]:
    """A manuallyExecute of the stranded message and another one, in two reports."""
    one = manually_execute_calldata(message(), ATTESTED)
    other = manually_execute_calldata(message("0x" + "cd" * 32), ATTESTED)
    types = [
        "(uint64,((bytes32,uint64,uint64,uint64,uint64),bytes,bytes,address,uint256,"
        "(bytes,address,uint32,bytes,uint256)[])[],bytes[][],bytes32[],uint256)[]",
        "(uint256,uint32[])[][]",
    ]
    reports_a, overrides_a = decode(types, one[4:])
    reports_b, overrides_b = decode(types, other[4:])
    data = MANUALLY_EXECUTE_SELECTOR + encode(
        types, [[*reports_a, *reports_b], [*overrides_a, *overrides_b]]
    )
    return call(DEST_ID, nonce, OFFRAMP_B, data)


def test_a_manual_execution_is_recorded_for_a_stranded_send_once_per_attempt(
    conn: Conn, runner: Conn
) -> None:
    """Played with the runner login, as the stranded reaper holds it: only the
    stranded message's one-report manual execution on the lane's OffRamp is
    recorded, once per attempt, each attempt naming the newest."""
    register(conn)
    node_id = stranded(conn)
    (row,) = procs.ccip_stranded_sends(10).all(runner)
    assert (row.node_id, row.message_id, row.dest_offramp, row.attempts) == (
        node_id,
        MESSAGE,
        OFFRAMP_B,
        [],
    )
    assert (row.source_onramp, row.token_data) == (ONRAMP, "cctp")
    keeper = "0x" + "4e" * 20
    first = manual(0)
    assert bytes.fromhex(first[1][2:])  # signed
    # another message's bytes, not to the lane's OffRamp, another source, two
    # reports: refused
    for bad in (
        manual(0, "0x" + "cd" * 32),
        manual(0, to="0x" + "c5" * 20),
        manual(0, source=SELECTOR_B),
        two_reports(0),
    ):
        assert_rejected(
            runner, "QT002",
            "SELECT record_ccip_manual_execution(%s, %s, %s, %s, %s, %s)",
            (node_id, MESSAGE, keeper, 0, bad[0], bad[1]),
            watcher=conn,
        )  # fmt: skip
    assert procs.record_ccip_manual_execution(node_id, MESSAGE, keeper, 0, first[0], first[1]).one(
        runner
    )
    # the same again changes nothing
    assert not procs.record_ccip_manual_execution(
        node_id, MESSAGE, keeper, 0, first[0], first[1]
    ).one(runner)
    # a second attempt must name the newest: another reaper's is refused
    second = manual(1)
    assert_rejected(
        runner, "QT021",
        "SELECT record_ccip_manual_execution(%s, %s, %s, %s, %s, %s)",
        (node_id, MESSAGE, keeper, 1, second[0], second[1]),
        watcher=conn,
    )  # fmt: skip
    assert procs.record_ccip_manual_execution(
        node_id, MESSAGE, keeper, 1, second[0], second[1], first[0]
    ).one(runner)
    (row,) = procs.ccip_stranded_sends(10).all(conn)
    assert [a["tx_hash"] for a in row.attempts] == [first[0], second[0]]
    audit = conn.execute(
        "SELECT count(*) FROM audit_outbox WHERE action = 'ccip_manual_execution_recorded'"
    ).fetchone()
    assert audit is not None and audit[0] == 2


@pytest.mark.parametrize(
    "evidence_of",
    [
        {"source_tx": "0x" + "3e" * 32},  # another sender's failed message on the lane
        {"dest_chain": SOURCE, "source_chain": DEST},  # another lane
    ],
)
def test_a_stranded_send_of_evidence_not_the_nodes_own_is_not_executed(
    db: TestDatabase, conn: Conn, evidence_of: dict[str, str]
) -> None:
    """A runner login reports a FAILURE whose evidence points at a message that
    is not the node's send: the reaper, whose keeper pays the gas, is handed
    nothing to execute, and a manual execution of it is refused."""
    register(conn)
    runner = bind(db.connect(db.runner_dsn("testnet")))
    node_id = stranded(conn, evidence_of)
    assert procs.ccip_stranded_sends(10).all(runner) == []
    first = manual(0)
    assert_rejected(
        runner, "QT021",
        "SELECT record_ccip_manual_execution(%s, %s, %s, %s, %s, %s)",
        (node_id, MESSAGE, "0x" + "4e" * 20, 0, first[0], first[1]),
        watcher=conn,
    )  # fmt: skip


def test_a_stranded_send_on_a_v1_5_lane_is_left_to_an_operator(conn: Conn) -> None:
    """The reaper executes v1.6 OffRamps: a send stranded on a v1.5 lane is
    not listed, and no manual execution is recorded for it; stuck_nodes tells
    the operator it is theirs to execute (on a v1.6 lane, the reaper's)."""
    register(conn)
    node_id = stranded(conn)
    stuck = "SELECT reason FROM stuck_nodes WHERE node_id = %s"
    [(reason,)] = conn.execute(stuck, (node_id,)).fetchall()
    assert reason.startswith("CCIP execution FAILED") and "stranded reaper's manual" in reason
    procs.upsert_ccip_lane(SOURCE, DEST, "1.5", onramp="0x" + "15" * 20, offramp=OFFRAMP_B).one(
        conn
    )
    assert procs.ccip_stranded_sends(10).all(conn) == []
    [(reason,)] = conn.execute(stuck, (node_id,)).fetchall()
    assert "not a v1.6 lane" in reason and "manuallyExecute" in reason, reason
    first = manual(0)
    assert_rejected(
        conn, "QT014",
        "SELECT record_ccip_manual_execution(%s, %s, %s, %s, %s, %s)",
        (node_id, MESSAGE, "0x" + "4e" * 20, 0, first[0], first[1]),
    )  # fmt: skip


def test_an_upgrade_waits_for_sends_the_previous_version_prepared(
    db: TestDatabase, conn: Conn
) -> None:
    """A send prepared by a version before the lanes has no ccip_version in its
    payload: the new runners could not observe or recover it, so migrating
    past 0055 is refused (QT041, naming the node) and changes nothing, until
    no unfinished node holds such an intent."""
    register(conn)
    c = ccip_nodes(conn, "u")["u"]
    tx_hash, raw = send(0)
    payload = json.dumps(honest_payload(conn, c["node_id"]))
    conn.execute(
        RECORD, (c["node_id"], c["claim_secret"], 0, tx_hash, payload, SOURCE, SENDER, raw)
    )
    procs.complete_submit(c["node_id"], c["claim_secret"], tx_hash).one(conn)
    guard = "0055_upgrade_in_flight_guard"
    applied = applied_migrations(db.dsn)
    since = applied[applied.index(guard) :]  # the guard and the migrations after it
    assert sorted(rollback(db.dsn, len(since))) == sorted(since)
    old = "UPDATE node_intents SET prepared_payload = prepared_payload {} WHERE node_id = %s"
    conn.execute(old.format("- 'ccip_version'"), (c["node_id"],))
    refused = rf"upgrade refused on network testnet.*: {c['node_id']} \(ccip, SUBMITTED\)"
    with pytest.raises(MigrationError, match=refused):
        migrate(db.dsn)
    assert guard not in applied_migrations(db.dsn)
    conn.execute(old.format('|| \'{"ccip_version": "1.6"}\''), (c["node_id"],))
    assert migrate(db.dsn).applied == since
