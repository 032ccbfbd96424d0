"""What the approver approved is what is sent, played with a runner login (the
Bybit withdrawal end to end, with the real fake venue, is in
tests/chains/test_bybit_executors.py; each bridge's signed call and payload
in its procedure tests).

An evm_transfer node, claimed by the runner login: a payload that names
another recipient, amount, chain, RPC or signer variable, or carries a key of
its own, is refused beside the honest signed transfer (QT032) and nothing
changes; so is the honest transfer recorded under another treasury account.
The honest one is recorded; once it is, the intent handed to observation and
recovery says nothing is wrong with it, until the registry changes under it:
then it names what changed, and neither acts on it."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import bind, create_started, fingerprint, node, pin_clock, plan
from evm_rows import FEES, register_transfers, transfer, transfer_plan
from rows import Conn

from qtg_runner.db import procs
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor
from qtg_runner.executors.evm_transfer import _Route as TransferRoute

CHAIN, CHAIN_ID = "sent-a", 31501
SENDER, RECIPIENT, THIEF = "0x" + "a1" * 20, "0x" + "b2" * 20, "0x" + "c3" * 20
TOKEN = "0x" + "70" * 20
RECORD = (
    "SELECT record_intent_prepared(%s, %s, p_nonce => 0, p_signed_tx_hash => %s,"
    " p_payload => %s::jsonb, p_chain_key => %s, p_sender => %s, p_raw_tx => %s)"
)


@pytest.fixture
def runner(db: TestDatabase) -> Conn:
    return bind(db.connect(db.runner_dsn("testnet")))


def claimed(conn: Conn, runner: Conn) -> tuple[int, str, dict[str, Any]]:
    register_transfers(conn, CHAIN, CHAIN_ID, SENDER, TOKEN, RECIPIENT)
    procs.allow_destination(CHAIN, THIEF, "allowed, but not this movement's").one(conn)
    create_started(conn, transfer_plan(CHAIN, SENDER, RECIPIENT, "pay"), "sent-1")
    [claim] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(runner)
    route = procs.evm_transfer_route(claim.node_id).one(runner)
    return claim.node_id, claim.claim_secret, TransferRoute.from_row(route).payload(60_000, FEES)


@pytest.mark.parametrize(
    "forged",
    [
        {"recipient": THIEF},
        {"amount_units": "500000000"},
        {"chain_key": "sent-b"},
        {"rpc_url_env": "QTG_RPC_ATTACKER"},
        {"signer_id": "env:QTG_SIGNER_OTHER"},
        {"token_address": "0x" + "71" * 20},
        {"finality_depth": 0},
        {"forward_to": THIEF},
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_runner_login_records_only_its_nodes_route_as_payload(
    conn: Conn, runner: Conn, forged: dict[str, Any]
) -> None:
    node_id, secret, payload = claimed(conn, runner)
    tx_hash, raw = transfer(CHAIN_ID, TOKEN, RECIPIENT, 0)
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as refused:
        runner.execute(
            RECORD, (node_id, secret, tx_hash, json.dumps(payload | forged), CHAIN, SENDER, raw)
        )
    assert refused.value.sqlstate == "QT032" and next(iter(forged)) in str(refused.value)
    assert fingerprint(conn) == before
    runner.execute(RECORD, (node_id, secret, tx_hash, json.dumps(payload), CHAIN, SENDER, raw))


@pytest.mark.parametrize("with_payload", [True, False], ids=["with-payload", "bytes-alone"])
def test_a_runner_login_cannot_record_the_call_under_another_treasury_account(
    conn: Conn, runner: Conn, with_payload: bool
) -> None:
    """The nonce reaper signs a stale intent's call again with the key of the
    account it was recorded under: the approved transfer recorded under
    another treasury account of the chain (the reserve) at its next nonce
    would have the reserve pay what the movement approved from the sender.
    Refused (QT032), with or without a payload, and nothing changes."""
    reserve = "0x" + "e5" * 20
    node_id, secret, payload = claimed(conn, runner)
    procs.upsert_treasury_account(CHAIN, reserve, "env:QTG_SIGNER_RESERVE").one(conn)
    tx_hash, raw = transfer(CHAIN_ID, TOKEN, RECIPIENT, 0)
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as refused:
        runner.execute(
            RECORD,
            (
                node_id,
                secret,
                tx_hash,
                json.dumps(payload) if with_payload else None,
                CHAIN,
                reserve,
                raw,
            ),
        )
    assert refused.value.sqlstate == "QT032", refused.value
    assert f"from {SENDER}, as its route says; not on {CHAIN} from {reserve}" in str(refused.value)
    assert fingerprint(conn) == before
    runner.execute(RECORD, (node_id, secret, tx_hash, json.dumps(payload), CHAIN, SENDER, raw))


def test_a_runner_login_cannot_record_a_transfer_by_its_hash_alone(
    conn: Conn, runner: Conn
) -> None:
    """A hash alone would name any transaction of the chain as the node's
    (an earlier transfer of the same amount to the same recipient, say): a
    transfer node's record without its signed bytes is refused (QT002) and
    nothing changes."""
    node_id, secret, payload = claimed(conn, runner)
    someone_elses, _ = transfer(CHAIN_ID, TOKEN, RECIPIENT, 7)
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as refused:
        runner.execute(
            "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => %s, p_payload => %s::jsonb)",
            (node_id, secret, someone_elses, json.dumps(payload)),
        )
    assert refused.value.sqlstate == "QT002" and "signed" in str(refused.value)
    assert fingerprint(conn) == before


def test_a_withdrawal_never_completes_on_a_transaction_the_engine_signed(
    conn: Conn, runner: Conn
) -> None:
    """A venue's record (stale, replayed, hostile) naming the txID of the
    engine's own transfer of the same amount to the same recipient would
    complete a withdrawal the venue never paid: the money stays at the venue
    and the steps after it spend the recipient's balance. A completion on a
    transaction the engine signed is refused (QT032, in the batch's QT050),
    naming the node that sent it; on the venue's own payout it completes."""
    node_id, secret, payload = claimed(conn, runner)
    ours, raw = transfer(CHAIN_ID, TOKEN, RECIPIENT, 0)
    runner.execute(RECORD, (node_id, secret, ours, json.dumps(payload), CHAIN, SENDER, raw))
    bybit = BybitWithdrawExecutor
    procs.register_executor(bybit.key, True, bybit.node_config_schema, "x").one(conn)
    procs.upsert_exchange_venue("bybit", "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE").one(conn)
    procs.upsert_venue_chain("bybit", CHAIN, "ETH").one(conn)
    config = {"venue": "bybit", "chain": CHAIN, "coin": "USDC", "to": RECIPIENT}
    create_started(conn, plan(node("out", executor="bybit_withdraw", **config)), "sent-2")
    [claim] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(runner)
    before = fingerprint(conn)
    for tx_id, says in ((ours, f"signed from {SENDER} (node {node_id})"), (ours.upper(), "node")):
        evidence = {"tx_id": tx_id, "transfer": {"log_index": 0}}
        with pytest.raises(psycopg.Error) as refused:
            procs.complete_submit(
                claim.node_id, claim.claim_secret, "w-1", evidence, settled=True
            ).one(runner)
        assert refused.value.sqlstate == "QT050" and says in str(refused.value), refused.value
        assert fingerprint(conn) == before
    payout = {"tx_id": "0x" + "77" * 32, "transfer": {"log_index": 0}}
    procs.complete_submit(claim.node_id, claim.claim_secret, "w-1", payout, settled=True).one(
        runner
    )


def test_observation_and_recovery_act_on_nothing_once_the_route_changed(
    conn: Conn, runner: Conn
) -> None:
    node_id, secret, payload = claimed(conn, runner)
    tx_hash, raw = transfer(CHAIN_ID, TOKEN, RECIPIENT, 0)
    runner.execute(RECORD, (node_id, secret, tx_hash, json.dumps(payload), CHAIN, SENDER, raw))
    runner.execute("SELECT fail_submit(%s, %s, 'no answer', true)", (node_id, secret))
    pin_clock(runner, "2099-01-01T00:00:00+00:00")
    [rec] = procs.claim_recovery_nodes("node_recovery", 1, 120).all(runner)
    assert rec.intent is not None and rec.intent["route_problem"] is None
    # the admin points the chain at another RPC variable: the recorded intent
    # no longer says what the registry says
    conn.execute(
        "UPDATE chains SET rpc_url_env = 'QTG_RPC_ELSEWHERE' WHERE chain_key = %s", (CHAIN,)
    )
    doc = conn.execute("SELECT intent_document(%s)", (node_id,)).fetchone()
    assert doc is not None and "rpc_url_env" in doc[0]["route_problem"]
    verdict = "SELECT complete_recovery(%s, %s, 'COMPLETED', %s::jsonb, %s)"
    with pytest.raises(psycopg.Error) as refused:
        runner.execute(verdict, (node_id, rec.claim_secret, json.dumps({"tx": tx_hash}), tx_hash))
    assert refused.value.sqlstate == "QT032"
