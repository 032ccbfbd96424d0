"""The bad-input suite: every public procedure (operator, runner, and the owner's
deploy steps) called with bad values of its own argument types gets a refusal
with a documented QT SQLSTATE, never PostgreSQL's own 22xxx, 23xxx or 42883 and
never a silent acceptance, and the refused call writes nothing. Each call is
a statement of its own on an autocommit connection, so a call that raises is
rolled back whole by PostgreSQL (no routine commits or writes outside its
transaction); a call that answers with per-row refusals has committed, and a
count and digest of every table in the database, the same as before the
test's first call, prove that it wrote nothing.

Each procedure has a valid call against one shared world (a pending movement,
a claimed node, a submitted node, a node in recovery, an open proposal, a
template); its bad inputs replace one argument at a time. After its bad
inputs, the valid call itself must succeed (in a transaction rolled back
after it): the refusals were the bad value's, not a broken baseline's. The
batch procedures refuse an element in its own row: every row must carry a QT
code and nothing may change. The operator's procedures (procs.CALL_FORMS:
CALL movement_approve(21) in psql) are CALLed with their functions' valid
calls and bad inputs.

`test_any_value_gets_a_result_or_a_qt_code` adds hypothesis: random values of
each argument's type (NULL, NaN, Infinity, huge and tiny numbers, any text,
any JSON, arrays with NULLs) for random procedures, each call answered with a
result or a QT code (one that raises is rolled back whole): 120 examples, the same on
every run; QTG_BAD_INPUT_EXAMPLES=3000 QTG_BAD_INPUT_RANDOM=1 explores further
(3,000 random examples passed in 42 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

import psycopg
import pytest
from conftest import TestDatabase, module_database
from engine import (
    SIM_SCHEMA,
    as_person,
    bind,
    create,
    create_started,
    fingerprint,
    forged_secret,
    node,
    node_ids,
    pin_clock,
    plan,
    register_sim,
)
from eth_account import Account
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from rows import iso_at

from qtg_runner.chains.ccip import (
    SentMessage,
    TokenTransfer,
    ccip_send_calldata,
    ccip_transaction,
    manually_execute_calldata,
)
from qtg_runner.chains.evm import Fees, build_transfer, self_transfer, tx_hash_of
from qtg_runner.db import procs
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor
from qtg_runner.executors.ccip import CcipExecutor
from qtg_runner.executors.ccip import _Route as CcipRoute
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.executors.stargate import StargateExecutor

Conn = psycopg.Connection[Any]
T = TypeVar("T")

NOW = 1000  # the world's clock: T0 + 1000 s (the submitted node is due, no lease ran out)
BIG_TEXT = "x" * 5000  # beyond max_text_bytes (4 KiB)
UNPRINTABLE = "done\x1b[2J\x1b[1;1Happroved"  # rewrites the terminal that shows it
BIG_JSON = json.dumps({"log": "x" * 70_000})  # beyond max_json_bytes (64 KiB)
BIGINT_MAX = 2**63 - 1
BAD_NUMBERS = ("NaN", "Infinity", "-Infinity", "1e300")


def one_node(**config: Any) -> str:
    return json.dumps(plan(node("a", **config)))


def nodes(*the_nodes: dict[str, Any]) -> str:
    return json.dumps(plan(*the_nodes))


def raw_config(entry: str) -> str:
    """A one-node plan whose config holds ``entry`` as written (JSON numbers Python cannot hold)."""
    config = '{"lane": "default", ' + entry + "}"
    return '{"nodes": [{"key": "a", "executor": "sim", "config": ' + config + "}]}"


def intake_item(external_id: str, **change: Any) -> dict[str, Any]:
    """An item of create_movements: a valid one, or one with ``change``."""
    return {"external_id": external_id, "amount": 5, "plan": plan(node("a")), **change}


def bad_items(code: str, *changes: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """create_movements' p_items with a good item, then one with each change (refused whole)."""
    return [
        ("p_items", json.dumps([intake_item("good"), {**intake_item("bad"), **change}]), code)
        for change in changes
    ]


TEMPLATE_PLAN = {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": {"$param": "lane"}}}]}


@dataclass(frozen=True)
class ObserverClaim:
    """The secret of an observer's claim of ``node_id``, made in the call's own
    transaction before the call: an observer's secret proves nothing in another."""

    node_id: int


def observer_claims(conn: Conn, value: Any) -> Any:
    """``value`` with each ObserverClaim in it claimed on ``conn`` (in its transaction)."""
    if isinstance(value, ObserverClaim):
        claimed = procs.claim_observe(value.node_id, "obs").one_or_none(conn)
        # (an earlier call of the hypothesis test may have finished the node)
        return "0" * 64 if claimed is None else claimed.claim_secret
    if isinstance(value, list):
        return [observer_claims(conn, v) for v in value]
    return value


@dataclass(frozen=True)
class World:
    pending: int  # a movement PENDING_APPROVAL, created by alice
    claimed: int  # a node SUBMITTING, claimed by w1 (lease an hour)
    claimed_secret: str
    observed: int  # a node SUBMITTED, due for an observer
    observed_secret: ObserverClaim
    recovering: int  # a node UNKNOWN with a PREPARED intent, claimed by recovery
    recovering_secret: str
    proposal: int  # a lane proposal PROPOSED by alice
    quarantined: int  # a node SUBMITTING, quarantined by its dispatcher w1
    transfer: int = 0  # an evm_transfer node between the treasury accounts of world-a
    replaced: int = 0  # a PREPARED intent at nonce 6 of world-a's 0xdd..; nonce 5 FAILED (a gap)
    callback: int = 0  # a callback claimed by the dispatcher cb1
    callback_secret: str = ""
    dead_callback: int = 0  # a callback DEAD after its one attempt
    ccip_send: int = 0  # a ccip node world-a -> world-c, treasury 0xff.. -> 0xdd.., not started
    ccip_stranded: int = (
        0  # a ccip node 0xff.. -> 0xdd.. OBSERVING, evidence: FAILED (CCIP_MESSAGE)
    )
    withdraw: int = 0  # a bybit_withdraw node from the venue bybit to world-a's 0xff..
    deposit: int = 0  # a bybit_deposit node at the venue bybit on world-a
    landed: int = 0  # an evm_transfer COMPLETED into bybit's deposit address, followed
    cctp_burn: int = 0  # a cctp_burn node world-a -> world-b, treasury 0xdd.. -> 0xff..
    cctp_mint: int = 0  # its cctp_mint child on world-b
    stargate: int = 0  # a stargate node world-a -> world-b, treasury 0xdd.. -> 0xff..
    balance_read: int = 0  # a balance read handed out, not recorded
    drift_alert: int = 0  # an OPEN drift alert of world-a's 0xdd.. (baselined at 1000)
    baseline: int = 0  # the snapshot of that baseline (unconfirmed)
    running: int = 0  # a movement EXECUTING (its nodes: claimed, observed, recovering, ...)
    rehearsal: int = 0  # a passed rehearsal of the pending movement
    rehearsal_request: int = 0  # a rehearsal request of it, claimed by the world's login


WORLD_SENDER = "0x" + "d" * 40
WORLD_HOOK = "https://hooks.world.test/cb"
WORLD_DEPOSIT = "0x" + "de" * 20
WORLD_KEY = Account.from_key(
    "0x" + "4f" * 32
)  # signs the world's bytes (SQL reads, never recovers, the sender)


def world_tx(tx: dict[str, Any]) -> tuple[str, str]:
    raw = bytes(WORLD_KEY.sign_transaction(tx).raw_transaction)
    return tx_hash_of(raw), "0x" + raw.hex()


CCIP_SELECTORS = {"world-a": 7_700_000_000_000_000_001, "world-c": 7_700_000_000_000_000_003}
CCIP_OFFRAMP_C = "0x" + "9" * 39 + "7"
CCIP_MESSAGE = "0x" + "ab" * 32


def ccip_manual_execution(nonce: int = 0) -> tuple[str, str]:
    """A keeper's manuallyExecute of CCIP_MESSAGE on world-c's OffRamp."""
    message = SentMessage(
        version="1.6",
        message_id=bytes.fromhex(CCIP_MESSAGE[2:]),
        source_selector=CCIP_SELECTORS["world-a"],
        dest_selector=CCIP_SELECTORS["world-c"],
        sequence_number=1,
        nonce=0,
        sender="0x" + "f" * 40,
        data=b"",
        receiver=WORLD_SENDER,
        gas_limit=0,
        extra_args=b"",
        fee_token="0x" + "0" * 40,
        fee_amount=1,
        tokens=(TokenTransfer("0x" + "8" * 39 + "6", "0x" + "2" * 40, 10**8, b"", 180_000),),
        onramp="0x" + "8" * 39 + "6",
        tx_hash="0x" + "12" * 32,
        block_number=1,
        log_index=0,
    )
    data = manually_execute_calldata(message, [b"\x05" * 300])
    return world_tx(
        ccip_transaction(3, CCIP_OFFRAMP_C, data, 0, nonce, Fees(2 * 10**9, 10**9), 500_000)
    )


def world_transfer(
    nonce: int, max_fee: int = 2 * 10**9, amount: int = 100 * 10**6
) -> tuple[str, str]:
    """world-a's 0xdd.. pays 0xff.. a movement's default amount (100 USDC)."""
    fees = Fees(max_fee, 10**9)
    return world_tx(
        build_transfer(1, "0x" + "1" * 40, "0x" + "f" * 40, amount, nonce, fees, 60_000)
    )


def world_fill(nonce: int) -> tuple[str, str]:
    return world_tx(self_transfer(1, WORLD_SENDER, nonce, Fees(2 * 10**9, 10**9)))


def build_world(conn: Conn) -> World:
    """The rows every valid call aims at, made through the procedures at T0."""
    pin_clock(conn, iso_at(0))
    register_sim(conn)
    procs.register_template("one", TEMPLATE_PLAN, "a lane as a parameter").one(conn)
    procs.upsert_chain("world-a", 1, "QTG_RPC_WORLD_A", 2, 1000).one(conn)
    procs.upsert_treasury_account("world-a", "0x" + "d" * 40, "env:WORLD_KEY").one(conn)
    procs.upsert_treasury_account("world-a", "0x" + "f" * 40, "env:WORLD_KEY_2").one(conn)
    procs.upsert_chain_token("world-a", "USDC", "0x" + "1" * 40, 6).one(conn)
    evm = EvmTransferExecutor
    procs.register_executor(evm.key, True, evm.node_config_schema, evm.description).one(conn)
    # CCTP between world-a and world-b (domains 100 / 101), the same treasury on both
    procs.upsert_chain("world-b", 2, "QTG_RPC_WORLD_B", 2, 1000).one(conn)
    procs.upsert_treasury_account("world-b", "0x" + "d" * 40, "env:WORLD_KEY").one(conn)
    procs.upsert_treasury_account("world-b", "0x" + "f" * 40, "env:WORLD_KEY_2").one(conn)
    procs.upsert_chain_token("world-b", "USDC", "0x" + "2" * 40, 6).one(conn)
    for chain, domain, digit in (("world-a", 100, "3"), ("world-b", 101, "5")):
        contracts = {
            "MessageTransmitterV2": "0x" + digit * 40,
            "TokenMessengerV2": "0x" + "4" * 39 + digit,
        }
        procs.upsert_chain_protocol(chain, "cctp", domain, contracts).one(conn)
    for cctp in (CctpBurnExecutor, CctpMintExecutor):
        procs.register_executor(cctp.key, True, cctp.node_config_schema, cctp.description).one(conn)
    cctp_ends = {"from": "0x" + "d" * 40, "to": "0x" + "f" * 40}
    cctp_nodes = node_ids(
        conn,
        create(
            conn,
            plan(
                node(
                    "burn",
                    [],
                    CctpBurnExecutor.key,
                    chain="world-a",
                    destination_chain="world-b",
                    finality="fast",
                    **cctp_ends,
                ),
                node(
                    "mint",
                    ["burn"],
                    CctpMintExecutor.key,
                    chain="world-b",
                    source_chain="world-a",
                    **cctp_ends,
                ),
            ),
            "cctp",
        ),
    )
    # a Stargate pool and TokenMessaging on each chain, for a stargate node
    for chain, eid, digit in (("world-a", 50901, "7"), ("world-b", 50902, "8")):
        contracts = {"StargatePool": "0x" + digit * 40, "TokenMessaging": "0x" + digit * 39 + "e"}
        procs.upsert_chain_protocol(chain, "stargate", eid, contracts).one(conn)
    sg = StargateExecutor
    procs.register_executor(sg.key, True, sg.node_config_schema, sg.description).one(conn)
    stargate = node_ids(
        conn,
        create(
            conn,
            plan(node("s", [], sg.key, source="world-a", destination="world-b", **cctp_ends)),
            "stargate",
        ),
    )["s"]
    pending = create(conn, plan(node("a")), "pending")
    rehearsal = procs.record_rehearsal(pending, "passed", {"outcome": "passed"}).one(conn)
    procs.request_rehearsal(pending).one(conn)
    rehearsal_request = procs.claim_rehearsal_request().one(conn).request_id
    procs.upsert_callback_target("world", WORLD_HOOK, "env:QTG_CB_WORLD").one(conn)
    for external_id in ("called", "dead-call"):
        with as_person(conn, "alice"):
            procs.create_movement(
                external_id, Decimal(1), plan=plan(node("a")), callback_url=WORLD_HOOK
            ).one(conn)
    conn.execute("UPDATE callback_settings SET max_attempts = 1")
    callback, dying = procs.claim_callbacks("cb1", 10).all(conn)
    procs.complete_callback(dying.callback_id, dying.claim_secret, 500).one(conn)
    conn.execute("UPDATE callback_settings SET max_attempts = DEFAULT")
    transfer = node_ids(
        conn,
        create(
            conn,
            plan(
                node(
                    "t",
                    [],
                    evm.key,
                    chain="world-a",
                    **{"from": "0x" + "d" * 40, "to": "0x" + "f" * 40},
                )
            ),
            "transfer",
        ),
    )["t"]
    running = create_started(conn, plan(node("a"), node("b"), node("c"), node("d")), "running")
    ids = node_ids(conn, running)
    claimed = {c.node_id: c for c in procs.claim_ready_nodes("w1", 10, 3600).all(conn)}
    claims = {key: {"claim_secret": claimed[ids[key]].claim_secret} for key in ("a", "b", "c", "d")}
    procs.quarantine_nodes([ids["d"]], [claims["d"]["claim_secret"]], ["poison"]).all(conn)
    procs.complete_submit(ids["b"], claims["b"]["claim_secret"], "ref-b").one(conn)
    procs.record_intent_prepared(
        ids["c"], claims["c"]["claim_secret"], nonce=3, signed_tx_hash="0xcc"
    ).one(conn)
    procs.fail_submit(ids["c"], claims["c"]["claim_secret"], "timeout", True).one(conn)
    # EVM nonces of world-a's 0xdd..: 5 held by a FAILED intent (a gap), 6 by a PREPARED one
    between_treasury = {"chain": "world-a", "from": WORLD_SENDER, "to": "0x" + "f" * 40}
    evm_nodes = node_ids(
        conn,
        create_started(
            conn,
            plan(
                node("e", [], evm.key, **between_treasury),
                node("f", [], evm.key, **between_treasury),
            ),
            "nonces",
        ),
    )
    evm_claims = {
        c.node_id: c.claim_secret for c in procs.claim_ready_nodes("w2", 10, 3600).all(conn)
    }
    intents = {}
    for key, nonce in (("e", 5), ("f", 6)):
        tx_hash, raw = world_transfer(nonce)
        intents[key] = procs.record_intent_prepared(
            evm_nodes[key],
            evm_claims[evm_nodes[key]],
            nonce=nonce,
            signed_tx_hash=tx_hash,
            chain_key="world-a",
            sender=WORLD_SENDER,
            raw_tx=raw,
        ).one(conn)
    procs.fail_submit(evm_nodes["e"], evm_claims[evm_nodes["e"]], "refused", False).one(conn)
    # CCIP between world-a and world-c, the same treasury on both
    procs.upsert_chain("world-c", 3, "QTG_RPC_WORLD_C", 2, 1000).one(conn)
    procs.upsert_treasury_account("world-c", WORLD_SENDER, "env:WORLD_KEY").one(conn)
    procs.upsert_treasury_account("world-c", "0x" + "f" * 40, "env:WORLD_KEY_2").one(conn)
    procs.upsert_chain_token("world-c", "USDC", "0x" + "2" * 40, 6).one(conn)
    for chain, digit in (("world-a", "6"), ("world-c", "7")):
        contracts = {
            "CcipRouter": "0x" + digit * 40,
            "CcipOnRamp": "0x" + "8" * 39 + digit,
            "CcipOffRamp": "0x" + "9" * 39 + digit,
        }
        procs.upsert_chain_protocol(chain, "ccip", CCIP_SELECTORS[chain], contracts).one(conn)
    # the v1.6 lane world-a -> world-c, paying the quote without a margin
    procs.upsert_ccip_lane("world-a", "world-c", "1.6", "cctp", fee_margin_bps=0).one(conn)
    ccip = CcipExecutor
    procs.register_executor(ccip.key, True, ccip.node_config_schema, ccip.description).one(conn)
    # from world-a's 0xff.. (0xdd..'s nonces are the nonce procedures' world), to 0xdd..
    ccip_ends = {"destination_chain": "world-c", "from": "0x" + "f" * 40, "to": WORLD_SENDER}
    ccip_send = node_ids(
        conn,
        create(conn, plan(node("s", [], ccip.key, "ccip", chain="world-a", **ccip_ends)), "ccip"),
    )["s"]
    ccip_stranded = node_ids(
        conn,
        create_started(
            conn, plan(node("s", [], ccip.key, "ccip", chain="world-a", **ccip_ends)), "ccip-f"
        ),
    )["s"]
    (ccip_claim,) = procs.claim_ready_nodes("w3", 10, 3600).all(conn)
    send_hash, send_raw = world_tx(
        ccip_transaction(
            1,
            "0x" + "6" * 40,
            ccip_send_calldata(CCIP_SELECTORS["world-c"], WORLD_SENDER, "0x" + "1" * 40, 10**8),
            10**15,
            0,
            Fees(2 * 10**9, 10**9),
            500_000,
        )
    )
    ccip_route = CcipRoute.from_row(procs.ccip_send_route(ccip_stranded).one(conn))
    procs.record_intent_prepared(
        ccip_stranded, ccip_claim.claim_secret, nonce=0, signed_tx_hash=send_hash,
        payload=ccip_route.payload(500_000, Fees(2 * 10**9, 10**9), 10**15, 0),
        chain_key="world-a", sender="0x" + "f" * 40, raw_tx=send_raw,
    ).one(conn)  # fmt: skip
    procs.complete_submit(ccip_stranded, ccip_claim.claim_secret, send_hash).one(conn)
    # the exchange venue bybit on world-a: a withdrawal, a deposit step, a followed transfer
    procs.upsert_exchange_venue("bybit", "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE").one(conn)
    procs.upsert_venue_chain("bybit", "world-a", "ETH").one(conn)
    procs.upsert_venue_deposit_address("bybit", "world-a", "USDC", WORLD_DEPOSIT).one(conn)
    for e in (BybitWithdrawExecutor, BybitDepositExecutor):
        procs.register_executor(e.key, e.has_side_effect, e.node_config_schema, "x").one(conn)
    venue_nodes = node_ids(
        conn,
        create(
            conn,
            plan(
                node("w", [], BybitWithdrawExecutor.key, venue="bybit", coin="USDC",
                     chain="world-a", to="0x" + "f" * 40),
                node("d", [], BybitDepositExecutor.key, venue="bybit", chain="world-a"),
            ),
            "venue",
        ),
    )  # fmt: skip
    landed = node_ids(
        conn,
        create_started(
            conn,
            plan(
                node(
                    "p", [], evm.key, chain="world-a", **{"from": WORLD_SENDER, "to": WORLD_DEPOSIT}
                )
            ),
            "landed",
        ),
    )["p"]
    [landing] = procs.claim_ready_nodes("w3", 10, 3600).all(conn)
    procs.complete_submit(landed, landing.claim_secret, "0x" + "ab" * 32, settled=True).one(conn)
    procs.claim_capital_transfers(10, 60).all(conn)
    with as_person(conn, "alice"):
        proposal = procs.propose_lane_baseline("default", 120).one(conn).proposal_id
    # a tripped breaker for reset_breaker, of a venue no node of the world uses
    conn.execute(
        "INSERT INTO breakers (scope, name, tripped_at, tripped_by, reason)"
        " VALUES ('venue', 'unused', clock(), 'test', 'tripped for the test')"
    )
    # a baseline of world-a's 0xdd.., an open drift alert on it, a read not recorded
    account = ("chain", "world-a", "0x" + "d" * 40, "USDC")
    baseline = procs.begin_balance_read().all(conn)[0].read_id
    procs.record_balance_snapshots(
        baseline, *([v] for v in account), [Decimal(1000)], [7], [None]
    ).one(conn)
    procs.verify_drift("drift", 1000).all(conn)
    baseline_snapshot = conn.execute(
        "SELECT snapshot_id FROM balance_baselines WHERE account_key = 'world-a'"
    ).fetchone()[0]  # type: ignore[index]
    drift_alert = conn.execute(
        "INSERT INTO balance_drift_alerts (account_kind, account_key, address, asset, alert_state,"
        "   baseline_snapshot_id, first_snapshot_id, last_snapshot_id, expected_low, expected_high,"
        "   actual, raised_at, last_seen_at, raised_by)"
        " SELECT account_kind, account_key, address, asset, 'OPEN', id, id, id, 1000, 1000, 900,"
        "        clock(), clock(), 'test'"
        "   FROM balance_snapshots WHERE read_id = %s RETURNING id",
        (baseline,),
    ).fetchone()[0]  # type: ignore[index]
    balance_read = procs.begin_balance_read().all(conn)[0].read_id
    pin_clock(conn, iso_at(NOW))
    failed = {"ccip_state": "FAILURE", "message_id": CCIP_MESSAGE, "source_chain": "world-a",
              "dest_chain": "world-c", "source_tx": send_hash}  # fmt: skip
    with conn.transaction():
        ccip_observed = procs.claim_observe(ccip_stranded, "obs").one(conn)
        procs.complete_observe(ccip_stranded, ccip_observed.claim_secret, "PENDING", failed).one(
            conn
        )
    [recovering] = procs.claim_recovery_nodes("rec", 10).all(conn)
    assert recovering.node_id == ids["c"]
    return World(
        pending=pending,
        claimed=ids["a"],
        claimed_secret=claims["a"]["claim_secret"],
        observed=ids["b"],
        observed_secret=ObserverClaim(ids["b"]),
        recovering=ids["c"],
        recovering_secret=recovering.claim_secret,
        proposal=proposal,
        quarantined=ids["d"],
        transfer=transfer,
        stargate=stargate,
        replaced=intents["f"],
        callback=callback.callback_id,
        callback_secret=callback.claim_secret,
        dead_callback=dying.callback_id,
        ccip_send=ccip_send,
        ccip_stranded=ccip_stranded,
        withdraw=venue_nodes["w"],
        deposit=venue_nodes["d"],
        landed=landed,
        cctp_burn=cctp_nodes["burn"],
        cctp_mint=cctp_nodes["mint"],
        balance_read=balance_read,
        drift_alert=drift_alert,
        baseline=baseline_snapshot,
        running=running,
        rehearsal=rehearsal,
        rehearsal_request=rehearsal_request,
    )


def valid_calls(w: World) -> dict[str, dict[str, Any]]:
    """A call of each procedure that succeeds against the world (arguments by SQL name)."""
    settings_ = {
        "p_min_poll_seconds": 2,
        "p_max_poll_seconds": 100,
        "p_first_poll_fraction": 0.5,
        "p_poll_fraction": 0.1,
        "p_over_factor": 2,
        "p_fatal_factor": 10,
        "p_observe_error_retry_seconds": 5,
        "p_recovery_retry_seconds": 5,
        "p_release_retry_seconds": 5,
    }
    schema = json.dumps(SIM_SCHEMA)
    calls: dict[str, dict[str, Any]] = {
        # operator
        "create_movement": {
            "p_external_id": "new",
            "p_amount": "5",
            "p_plan": one_node(),
            "p_asset": "USDC",
            "p_expires_at": iso_at(NOW + 3600),
            "p_callback_url": "https://example.test/cb",
            "p_priority": 0,
        },
        "create_movements": {"p_items": json.dumps([intake_item("new-1"), intake_item("new-2")])},
        "approve_movement": {"p_movement_id": w.pending},
        "approve_movements": {"p_movement_ids": [w.pending]},
        "cancel_movement": {"p_movement_id": w.pending, "p_reason": "not today"},
        "set_priority": {"p_movement_id": w.pending, "p_priority": 7, "p_reason": "due at noon"},
        "requeue_node": {"p_node_id": w.recovering, "p_reason": "the transaction was dropped"},
        "propose_lane_baseline": {"p_lane": "fast", "p_baseline_seconds": 30, **settings_},
        "propose_template": {"p_template_name": "two", "p_plan": one_node(), "p_description": "d"},
        "propose_executor_config": {
            "p_executor_key": "sim",
            "p_node_config_schema": json.dumps({**SIM_SCHEMA, "required": []}),
            "p_description": "d",
        },
        "approve_proposal": {"p_proposal_id": w.proposal},
        "reject_proposal": {"p_proposal_id": w.proposal, "p_reason": "not now"},
        "release_quarantine": {"p_node_id": w.quarantined, "p_reason": "the executor was fixed"},
        # runner
        "start_approved_movements": {"p_max": 10, "p_actor": "dispatcher"},
        "claim_ready_nodes": {
            "p_worker": "w2",
            "p_max": 10,
            "p_lease_seconds": 60,
            "p_instance_id": "host:1:a",
            "p_start": 10,
        },
        "record_intent_prepared": {
            "p_node_id": w.claimed,
            "p_claim_secret": w.claimed_secret,
            "p_nonce": 1,
            "p_signed_tx_hash": "0xab",
            "p_external_request_id": "req-1",
            "p_payload": json.dumps({"to": "0x1"}),
        },
        "record_intent_prepared_batch": {
            "p_node_ids": [w.claimed],
            "p_claim_secrets": [w.claimed_secret],
            "p_nonces": [1],
            "p_signed_tx_hashes": ["0xab"],
            "p_external_request_ids": ["req-1"],
            "p_payloads": [json.dumps({"to": "0x1"})],
        },
        "complete_submit": {
            "p_node_id": w.claimed,
            "p_claim_secret": w.claimed_secret,
            "p_external_ref": "0xref",
            "p_evidence": "{}",
            "p_settled": False,
        },
        "check_claims": {"p_node_ids": [w.claimed], "p_claim_secrets": [w.claimed_secret]},
        "end_stalled_sessions": {
            "p_worker": "watchdog",
            "p_idle_seconds": 60,
            "p_statement_seconds": 120,
        },
        "complete_submit_batch": {
            "p_node_ids": [w.claimed],
            "p_claim_secrets": [w.claimed_secret],
            "p_external_refs": ["0xref"],
            "p_evidence": ["{}"],
            "p_settled": [False],
        },
        "fail_submit": {
            "p_node_id": w.claimed,
            "p_claim_secret": w.claimed_secret,
            "p_error": "busy",
            "p_retryable": True,
            "p_retry_after_seconds": 5,
        },
        "release_nodes": {
            "p_node_ids": [w.claimed],
            "p_claim_secrets": [w.claimed_secret],
            "p_reason": "no executor here",
            "p_wait_seconds": 5,
        },
        "lease_endpoints": {
            "p_instance": "host:4242:a1b2c3",
            "p_endpoints": ["iris", "rpc:world-a"],
            "p_slowed_until": [None, iso_at(NOW + 30)],
            "p_ttl_seconds": 15,
        },
        "observe_candidates": {"p_max": 10},
        "claim_observe": {"p_node_id": w.observed, "p_worker": "obs2"},
        "complete_observe": {
            "p_node_id": w.observed,
            "p_claim_secret": w.observed_secret,
            "p_outcome": "PENDING",
            "p_evidence": "{}",
            "p_retry_after_seconds": 5,
        },
        "claim_observe_batch": {"p_node_ids": [w.observed], "p_worker": "obs2"},
        "complete_observe_batch": {
            "p_node_ids": [w.observed],
            "p_claim_secrets": [w.observed_secret],
            "p_outcomes": ["PENDING"],
            "p_evidence": ["{}"],
            "p_retry_after_seconds": [5],
        },
        "claim_recovery_nodes": {
            "p_worker": "rec2",
            "p_max": 10,
            "p_lease_seconds": 60,
            "p_instance_id": "host:2:b",
        },
        "quarantine_nodes": {
            "p_node_ids": [w.claimed],
            "p_claim_secrets": [w.claimed_secret],
            "p_errors": ["prepare: SimCrash"],
        },
        "complete_recovery": {
            "p_node_id": w.recovering,
            "p_claim_secret": w.recovering_secret,
            "p_outcome": "STILL_UNKNOWN",
            "p_evidence": "{}",
            "p_external_ref": "0xcc",
            "p_retry_after_seconds": 5,
        },
        "expire_movements": {"p_max": 10, "p_actor": "expiry"},
        "expire_proposals": {"p_max": 10, "p_actor": "expiry"},
        "heartbeat": {
            "p_worker_name": "node_dispatcher",
            "p_instance_id": "i-1",
            "p_tier": "core",
            "p_expected_interval_seconds": 1,
            "p_processed": 3,
            "p_consecutive_errors": 0,
            "p_last_error": None,
            "p_host": "h",
            "p_pid": 42,
        },
        "worker_stopped": {"p_worker_name": "node_dispatcher", "p_instance_id": "i-1"},
        "registered_executors": {},
        "refresh_lane_pacing": {},
        "roll_up_pipeline_counts": {"p_max": 1000},
        "evm_next_nonce": {"p_chain_key": "world-a", "p_sender": "0x" + "d" * 40},
        "evm_chains": {},
        "evm_transfer_route": {"p_node_id": w.transfer},
        "ccip_send_route": {"p_node_id": w.ccip_send},
        "ccip_stranded_sends": {"p_max": 10},
        "record_ccip_manual_execution": dict(
            zip(
                ("p_node_id", "p_message_id", "p_executor", "p_nonce", "p_tx_hash", "p_raw_tx"),
                (w.ccip_stranded, CCIP_MESSAGE, "0x" + "e" * 40, 0, *ccip_manual_execution(0)),
                strict=True,
            )
        ),
        "bybit_withdraw_route": {"p_node_id": w.withdraw},
        "bybit_deposit_route": {"p_node_id": w.deposit},
        "paid_in_deposits": {"p_node_id": w.withdraw},
        "abandoned_transactions": {"p_node_id": w.claimed},
        "exchange_venue_list": {},
        "claim_capital_transfers": {"p_max": 10, "p_lease_seconds": 60},
        "record_capital_transfer_check": {
            "p_node_id": w.landed,
            "p_status": "CREDITED",
            "p_credited_amount": "100",
            "p_record": '{"deposits": []}',
            "p_error": None,
            "p_retry_after_seconds": 5,
        },
        "cctp_burn_route": {"p_node_id": w.cctp_burn},
        "cctp_mint_route": {"p_node_id": w.cctp_mint},
        "stargate_send_route": {"p_node_id": w.stargate},
        "evm_nonce_gaps": {"p_max": 10},
        "settle_evm_nonces": {"p_max": 1000},
        "evm_stale_transactions": {"p_blocks": 20, "p_min_seconds": 60, "p_max": 10},
        "record_nonce_fill": dict(
            zip(
                ("p_chain_key", "p_sender", "p_nonce", "p_tx_hash", "p_raw_tx"),
                ("world-a", WORLD_SENDER, 5, *world_fill(5)),
                strict=True,
            )
        ),
        "record_evm_replacement": dict(
            zip(
                ("p_intent_id", "p_tx_hash", "p_raw_tx"),
                (w.replaced, *world_transfer(6, max_fee=3 * 10**9)),
                strict=True,
            )
        ),
        "record_nonce_closed": {
            "p_chain_key": "world-a",
            "p_sender": WORLD_SENDER,
            "p_nonce": 5,
            "p_how": "consumed",
            "p_evidence": '{"latest_count": 9}',
        },
        "register_executor": {
            "p_executor_key": "sim2",
            "p_has_side_effect": True,
            "p_node_config_schema": schema,
            "p_description": "d",
        },
        "report_executor_health": {
            "p_executor_key": "sim",
            "p_status": "HEALTHY",
            "p_detail": "{}",
            "p_reported_by": "executor_health",
        },
        # the owner's deploy steps
        "register_template": {
            "p_template_name": "three",
            "p_plan": one_node(),
            "p_description": "",
        },
        "upsert_lane_baseline": {"p_lane": "fast", "p_baseline_seconds": 0.5, **settings_},
        "set_executor_config": {
            "p_executor_key": "sim",
            "p_node_config_schema": schema,
            "p_description": "d",
        },
        # the chain registry's admin steps (the world has the chain world-a)
        "upsert_chain": {
            "p_chain_key": "world-b",
            "p_chain_id": 2,
            "p_rpc_url_env": "QTG_RPC_WORLD_B",
            "p_finality_depth": 2,
            "p_block_time_ms": 2000,
        },
        "propose_registry_change": {
            "p_subject": "chain/world-a",
            "p_change": json.dumps({"finality_depth": 3}),
        },
        "upsert_chain_token": {
            "p_chain_key": "world-a",
            "p_symbol": "USDC",
            "p_address": "0x" + "A" * 40,
            "p_decimals": 6,
        },
        "set_value_limit": {
            "p_scope": "lane",
            "p_name": "default",
            "p_max_in_flight": 1000,
            "p_max_per_day": None,
            "p_max_per_movement": None,
        },
        "reset_breaker": {"p_scope": "venue", "p_name": "unused"},
        "trip_breaker": {"p_scope": "venue", "p_name": "sim", "p_reason": "the sim paused"},
        "limit_held_nodes": {},
        "begin_balance_read": {},
        "record_balance_snapshots": {
            "p_read_id": w.balance_read,
            "p_account_kinds": ["chain", "venue"],
            "p_account_keys": ["world-a", "bybit"],
            "p_addresses": ["0x" + "d" * 40, "FUND"],
            "p_assets": ["USDC", "USDC"],
            "p_balances": [1000, None],
            "p_block_numbers": [7, None],
            "p_errors": [None, "the venue is down"],
        },
        "verify_drift": {"p_worker": "drift", "p_max": 10, "p_anchor_lag_seconds": 300},
        "prune_balance_snapshots": {"p_worker": "drift", "p_max": 10},
        "prune_callbacks": {"p_worker": "cb", "p_max": 10},
        "acknowledge_drift_alert": {"p_alert_id": w.drift_alert, "p_reason": "topped up"},
        "confirm_balance_baseline": {
            "p_account_kind": "chain",
            "p_account_key": "world-a",
            "p_address": "0x" + "d" * 40,
            "p_asset": "USDC",
            "p_snapshot_id": w.baseline,
            "p_reason": "matches the explorer",
        },
        "set_balance_settings": {
            "p_drift_threshold": "0.02",
            "p_venue_withdraw_fee_cap": 2,
            "p_max_balance": "1e15",
            "p_snapshot_keep_days": 400,
        },
        "set_callback_settings": {
            "p_max_attempts": 12,
            "p_max_age_seconds": 259200,
            "p_backoff_base_seconds": 5,
            "p_backoff_cap_seconds": 3600,
            "p_lease_seconds": 60,
            "p_keep_days": 90,
        },
        "promote_audit": {"p_worker": "promoter", "p_max": 10},
        "claim_callbacks": {"p_worker": "cb2", "p_max": 10},
        "complete_callback": {
            "p_callback_id": w.callback,
            "p_claim_secret": w.callback_secret,
            "p_status_code": 200,
            "p_error": None,
        },
        "replay_callback": {"p_callback_id": w.dead_callback, "p_reason": "the receiver is back"},
        "rehearsal_input": {"p_movement_id": w.pending},
        "request_rehearsal": {"p_movement_id": w.pending},  # asked already: that request
        "claim_rehearsal_request": {},  # the one there is claimed already: none
        "finish_rehearsal_request": {
            "p_request_id": w.rehearsal_request,
            "p_claim": 1,
            "p_rehearsal_id": w.rehearsal,
            "p_problem": None,
        },
        "record_rehearsal": {
            "p_movement_id": w.pending,
            "p_outcome": "failed",
            "p_summary": json.dumps({"outcome": "failed", "lines": ["a: reverted"]}),
        },
        # the world's nodes name its executors and chains: a registry of the limits
        "load_rehearsal_registry": {
            "p_registry": json.dumps(
                {
                    "value_limits": [
                        {
                            "scope": "lane",
                            "name": "default",
                            "max_in_flight": 1000,
                            "updated_by": "admin",
                            "updated_at": iso_at(0),
                        }
                    ]
                }
            )
        },
        "propose_callback_target": {
            "p_target_name": "proposed",
            "p_url": "https://proposed.test/cb",
            "p_secret_ref": "env:QTG_CB_PROPOSED",
            "p_allow_private": False,
            "p_enabled": True,
        },
        "upsert_callback_target": {
            "p_target_name": "other",
            "p_url": "https://other.test/cb",
            "p_secret_ref": "env:QTG_CB_OTHER",
            "p_allow_private": False,
            "p_enabled": True,
        },
        "verify_audit_chain": {"p_expected_seq": None, "p_expected_hash": None},
        "audit_export": {"p_after_seq": 0, "p_max": 10},
        "upsert_chain_protocol": {
            "p_chain_key": "world-a",
            "p_protocol": "cctp",
            "p_remote_id": 7,
            "p_contracts": json.dumps({"TokenMessengerV2": "0x" + "A" * 40}),
        },
        "upsert_ccip_lane": {
            "p_source_chain_key": "world-c",
            "p_dest_chain_key": "world-a",
            "p_version": "1.6",
            "p_token_data": "none",
            "p_fee_margin_bps": 500,
            "p_max_fee_wei": 10**17,
            "p_onramp": None,
            "p_offramp": "0x" + "B" * 40,
        },
        "upsert_treasury_account": {
            "p_chain_key": "world-a",
            "p_address": "0x" + "b" * 40,
            "p_signer_id": "local:treasury-1",
        },
        "allow_destination": {
            "p_chain_key": "world-a",
            "p_address": "0x" + "c" * 40,
            "p_label": "exchange deposit",
        },
        "disallow_destination": {"p_chain_key": "world-a", "p_address": "0x" + "c" * 40},
        "upsert_exchange_venue": {
            "p_venue_key": "bybit2",
            "p_kind": "bybit",
            "p_base_url_env": "QTG_BYBIT2_URL",
            "p_key_file_env": "QTG_BYBIT2_KEY_FILE",
        },
        "upsert_venue_chain": {
            "p_venue_key": "bybit",
            "p_chain_key": "world-a",
            "p_venue_chain": "ETH2",
        },
        "upsert_venue_deposit_address": {
            "p_venue_key": "bybit",
            "p_chain_key": "world-a",
            "p_coin": "USDT",
            "p_address": "0x" + "e" * 40,
        },
    }
    return with_call_forms(calls)


def bad_inputs(w: World) -> dict[str, list[tuple[str, Any, str]]]:
    """Per procedure: (argument, bad value, the SQLSTATE it is refused with)."""

    def each(arg: str, code: str, *values: Any) -> list[tuple[str, Any, str]]:
        return [(arg, value, code) for value in values]

    def lease(arg: str) -> list[tuple[str, Any, str]]:
        return each(arg, "QT002", None, 0, -1, "-Infinity") + each(
            arg, "QT005", "NaN", "Infinity", "1e300", "0.5", "1e-300", 3601
        )

    def hint(arg: str) -> list[tuple[str, Any, str]]:
        return each(arg, "QT002", -1, "-Infinity") + each(
            arg, "QT005", "NaN", "Infinity", "1e300", 3601, "1e-7", "1e-400"
        )

    def worker(arg: str) -> list[tuple[str, Any, str]]:
        # not a worker's name; a person's (engine.PEOPLE's alice, in any case)
        return each(arg, "QT002", None, "", "   ", "a worker", "alice", "ALICE@h:1") + each(
            arg, "QT005", BIG_TEXT
        )

    def instance(arg: str) -> list[tuple[str, Any, str]]:  # NULL: the claim names none
        return each(arg, "QT002", "", "   ") + each(arg, "QT005", BIG_TEXT)

    def secret(arg: str, node_arg: str) -> list[tuple[str, Any, str]]:
        return (
            each(arg, "QT002", None, "", "zz", "f" * 65)
            + each(arg, "QT030", forged_secret(), "g" * 64)  # of a secret's length: not the claim's
            + each(node_arg, "QT011", -1, 0, BIGINT_MAX)
        )

    def chain_keys(arg: str) -> list[tuple[str, Any, str]]:
        return each(arg, "QT014", None, "", "nowhere", BIG_TEXT)

    def addresses(arg: str) -> list[tuple[str, Any, str]]:
        return each(arg, "QT002", None, "", "0x12", "a" * 40, "0x" + "g" * 40, BIG_TEXT)

    def bad_schemas(arg: str, code: str = "QT002") -> list[tuple[str, Any, str]]:
        return each(
            arg,
            code,
            None,
            "[]",
            '"schema"',
            '{"properties": []}',
            '{"required": "lane"}',
            '{"required": [1]}',
            '{"additionalProperties": "no"}',
            '{"properties": {"a": []}}',
            '{"properties": {"a": {"type": "float"}}}',
            '{"properties": {"a": {"type": []}}}',
            '{"properties": {"a": {"pattern": "("}}}',
            '{"properties": {"a": {"pattern": 5}}}',
            '{"properties": {"a": {"minimum": "x"}}}',
            '{"properties": {"a": {"exclusiveMaximum": null}}}',
            '{"properties": {"a": {"minLength": -1}}}',
            '{"properties": {"a": {"maxLength": 1.5}}}',
            '{"properties": {"a": {"enum": "x"}}}',
        ) + each(arg, "QT005", BIG_JSON)

    lane_settings = (
        each("p_lane", "QT002", None, "", "  ", "l" * 201)
        + each("p_baseline_seconds", "QT002", None)
        + each("p_baseline_seconds", "QT005", "NaN", "Infinity", "1e300", 86401, "1e-7")
        + each("p_max_poll_seconds", "QT005", "NaN", "Infinity", 1e9)
        + each("p_first_poll_fraction", "QT005", "NaN", 0, 2, "1e-7")
        + each("p_poll_fraction", "QT005", "NaN", "-Infinity", 1.5)
        + each("p_over_factor", "QT005", "NaN", 0.5, 2000)
        + each("p_fatal_factor", "QT005", "NaN", "Infinity", 1)
        + each("p_observe_error_retry_seconds", "QT005", "NaN", 0, 1e9)
        + each("p_recovery_retry_seconds", "QT005", "Infinity", -1)
        + each("p_release_retry_seconds", "QT005", "NaN", "1e-7")
    )
    bad_plans = each(
        "p_plan",
        "QT001",
        "[]",
        "{}",
        '{"nodes": []}',
        '{"nodes": "a"}',
        '{"nodes": [1]}',
        nodes({"executor": "sim", "config": {"lane": "default"}}),  # no key
        nodes({**node("a"), "key": 5}),
        nodes(node("k" * 65)),
        nodes(node("a"), node("a")),
        nodes(node("a", executor="teleport")),
        nodes({**node("a"), "executor": None}),
        one_node(lane="cctp_fsat"),  # an unknown lane does not fall back to the default's pacing
        nodes({**node("a"), "config": {"lane": 5}}),
        nodes({**node("a"), "config": "lane"}),
        one_node(colour="red"),
        one_node(amount=0),
        one_node(amount="1e400"),  # a string, where the schema says number
        # numbers a double cannot hold: Infinity or 0 in the runner
        raw_config('"amount": 1e400'),
        raw_config('"amount": 1e-400'),
        raw_config('"latency_s": -1e309'),
        nodes({**node("b"), "depends_on": [None]}, node("a")),
        nodes({**node("b"), "depends_on": [1]}, node("a")),
        nodes({**node("b"), "depends_on": "a"}, node("a")),
        nodes({**node("b"), "depends_on": [["a"]]}, node("a")),
        nodes(node("b", ["nope"])),
        nodes(node("a", ["a"])),
        nodes(node("a", ["b"]), node("b", ["a"])),
        nodes(node("r"), node("a", ["r", "c"]), node("b", ["a"]), node("c", ["b"])),
    ) + each(
        "p_plan",
        "QT005",
        json.dumps(plan(*(node(f"n{i}") for i in range(201)))),
        json.dumps(plan({**node("a"), "config": {"lane": "default", "pad": "x" * 1_100_000}})),
    )
    # a callback target, as an operator proposes it or the admin registers it
    a_target = (
        each("p_target_name", "QT002", None, "", "Other", "a" * 64, BIG_TEXT)
        + each("p_url", "QT002", None, "", "ftp://other.test/", "https://u:p@other.test/")
        + each("p_url", "QT002", "other.test", WORLD_HOOK, "https://o.test/" + BIG_TEXT)
        + each(
            "p_secret_ref",
            "QT002",
            None,
            "",
            "whsec_c2VjcmV0",
            "env:",
            "env:HOME",
            "env:QTG_DATABASE_URL",
            "vault:x",
            BIG_TEXT,
        )
        + each("p_allow_private", "QT002", None)
        + each("p_enabled", "QT002", None)
    )
    plan_args = {"p_plan", "p_template"}

    calls: dict[str, list[tuple[str, Any, str]]] = {
        "create_movement": (
            each("p_external_id", "QT002", None, "", "   ", "e" * 201)
            + each("p_amount", "QT002", None, 0, -1, "-0", "-Infinity", "0.0000001")
            + each("p_amount", "QT005", "NaN", "Infinity", "1e300", "1000000000000.000001")
            + each("p_asset", "QT002", None, "usdc", "U", "U" * 17)
            + each("p_expires_at", "QT005", "infinity", "-infinity")
            + each("p_expires_at", "QT002", iso_at(NOW), iso_at(-1))
            + each("p_callback_url", "QT005", BIG_TEXT)
            + each("p_plan", "QT002", None)  # neither a plan nor a template
            + each("p_template", "QT002", "one")  # both
            + bad_plans
        ),
        "create_movements": (
            each("p_items", "QT002", None, "{}", "[]", '"items"', "[5]")
            + each("p_items", "QT002", json.dumps([intake_item(f"n-{i}") for i in range(1001)]))
            + bad_items(
                "QT002",
                {"external_id": None},
                {"external_id": 5},
                {"amount": 0},
                {"amount": "ten"},
                {"amount": "NaN"},
                {"amount": "1e3"},
                {"amount": " 7"},
                {"asset": "usdc"},
                {"expires_at": "soon"},
                {"expires_at": iso_at(NOW)},
                {"priority": 0.5},
                {"priority": 2**31},
                {"plan": None},
                {"colour": "red"},
            )
            + bad_items(
                "QT005",
                {"amount": "1" + "0" * 30},
                {"expires_at": "infinity"},
                {"callback_url": BIG_TEXT},
            )
            + bad_items("QT001", {"plan": json.loads(nodes(node("a", ["a"])))})
            + bad_items("QT003", {"plan": None, "template": "nope"})
            + bad_items(
                "QT004", {"external_id": "pending", "amount": 5}
            )  # the world's, another amount
        ),
        "approve_movement": each("p_movement_id", "QT010", None, -1, 0, BIGINT_MAX),
        "approve_movements": (
            each("p_movement_ids", "QT002", None, [], [None], [w.pending, w.pending])
            + each("p_movement_ids", "QT002", list(range(1, 1002)))
            + each("p_movement_ids", "QT010", [-1], [w.pending, BIGINT_MAX])
        ),
        "cancel_movement": (
            each("p_movement_id", "QT010", None, -1, BIGINT_MAX)
            + each("p_reason", "QT005", BIG_TEXT)
        ),
        "set_priority": (
            each("p_movement_id", "QT010", None, -1, BIGINT_MAX)
            + each("p_priority", "QT002", None)
            + each("p_reason", "QT002", None, "", "  ", UNPRINTABLE)
            + each("p_reason", "QT005", BIG_TEXT)
        ),
        "requeue_node": (
            each("p_node_id", "QT011", None, -1, BIGINT_MAX)
            + each("p_node_id", "QT021", w.claimed, w.observed)
            + each("p_reason", "QT002", None, "", "  ", UNPRINTABLE)
            + each("p_reason", "QT005", BIG_TEXT)
        ),
        "propose_lane_baseline": (
            lane_settings
            + each("p_baseline_seconds", "QT005", 0, -1, "-Infinity")
            + each("p_min_poll_seconds", "QT005", 0.5, "NaN")
        ),
        "propose_template": (
            each("p_template_name", "QT002", None, "", "Two", "t w o", "t" * 64)
            + [(arg, value, code) for arg, value, code in bad_plans if arg in plan_args]
            + each("p_plan", "QT001", None)
            + each("p_description", "QT005", BIG_TEXT)
        ),
        "propose_executor_config": (
            each("p_executor_key", "QT012", None, "", "nope")
            + bad_schemas("p_node_config_schema")
            + each("p_description", "QT005", BIG_TEXT)
        ),
        "approve_proposal": each("p_proposal_id", "QT013", None, -1, BIGINT_MAX),
        "reject_proposal": (
            each("p_proposal_id", "QT013", None, -1, BIGINT_MAX)
            + each("p_reason", "QT002", None, "", " ", UNPRINTABLE)
            + each("p_reason", "QT005", BIG_TEXT)
        ),
        "start_approved_movements": (
            each("p_max", "QT002", None, 0, -1, 10001) + worker("p_actor")
        ),
        "claim_ready_nodes": (
            worker("p_worker")
            + each("p_max", "QT002", None, 0, -5, 1001)
            + lease("p_lease_seconds")
            + instance("p_instance_id")
            + each("p_start", "QT002", None, -1, 10001)
        ),
        "claim_recovery_nodes": (
            worker("p_worker")
            + each("p_max", "QT002", None, 0, 1001)
            + lease("p_lease_seconds")
            + instance("p_instance_id")
        ),
        "quarantine_nodes": (
            secret("p_claim_secrets", "p_node_ids")
            + each("p_errors", "QT002", None, [None], [""], [" "], ["a", "b"])
            + each("p_errors", "QT005", [BIG_TEXT])
        ),
        "release_quarantine": (
            each("p_node_id", "QT011", None, -1, BIGINT_MAX)
            + each("p_node_id", "QT021", w.claimed, w.recovering)  # not quarantined
            + each("p_reason", "QT002", None, "", "  ", UNPRINTABLE)
            + each("p_reason", "QT005", BIG_TEXT)
        ),
        "record_intent_prepared": (
            secret("p_claim_secret", "p_node_id")
            + each("p_node_id", "QT030", w.observed)  # its secret is another node's
            + each("p_nonce", "QT002", -1, -(2**63))
            + each("p_signed_tx_hash", "QT005", BIG_TEXT)
            + each("p_external_request_id", "QT005", BIG_TEXT)
            + each("p_payload", "QT005", BIG_JSON)
        ),
        "record_intent_prepared_batch": (
            secret("p_claim_secrets", "p_node_ids")
            + each("p_nonces", "QT002", [-1])
            + each("p_signed_tx_hashes", "QT005", [BIG_TEXT])
            + each("p_payloads", "QT005", [BIG_JSON])
        ),
        "complete_submit": (
            secret("p_claim_secret", "p_node_id")
            + each("p_external_ref", "QT002", None, "", "   ")
            + each("p_external_ref", "QT005", BIG_TEXT)
            + each("p_evidence", "QT005", BIG_JSON)
        ),
        "check_claims": (
            secret("p_claim_secrets", "p_node_ids")
            + each("p_claim_secrets", "QT002", [w.claimed_secret, w.claimed_secret])
        ),
        "end_stalled_sessions": (
            worker("p_worker")
            + each("p_idle_seconds", "QT002", None, 29, -1, "NaN", "Infinity", 86401)
            + each("p_statement_seconds", "QT002", None, 59, "NaN", "-Infinity", 86401)
        ),
        "complete_submit_batch": (
            secret("p_claim_secrets", "p_node_ids")
            + each("p_external_refs", "QT002", [None], [""], [" "])
            + each("p_external_refs", "QT005", [BIG_TEXT])
            + each("p_evidence", "QT005", [BIG_JSON])
        ),
        "fail_submit": (
            secret("p_claim_secret", "p_node_id")
            + each("p_retryable", "QT002", None)
            + each("p_error", "QT005", BIG_TEXT)
            + hint("p_retry_after_seconds")
        ),
        "release_nodes": (
            secret("p_claim_secrets", "p_node_ids")
            + each("p_reason", "QT002", None, "", " ")
            + each("p_reason", "QT005", BIG_TEXT)
            + hint("p_wait_seconds")
        ),
        "lease_endpoints": (
            each("p_instance", "QT002", None, "", " ", "a host", "h" * 201)
            + each("p_instance", "QT005", BIG_TEXT)
            # NULL, fewer than the slowed_until, a NULL, not a name, twice, over 100
            + each("p_endpoints", "QT002", None, ["iris"], ["iris", None], ["iris", "IRIS"])
            + each("p_endpoints", "QT002", ["iris", "iris"], [f"rpc:{i}" for i in range(101)])
            + each("p_endpoints", "QT005", ["iris", BIG_TEXT])
            + each("p_slowed_until", "QT002", None, [None], [None, None, None])
            # not finite, or more than an hour ahead of the clock
            + each("p_slowed_until", "QT005", [None, "infinity"], [None, "-infinity"])
            + each("p_slowed_until", "QT005", [None, iso_at(NOW + 3601)])
            + each("p_ttl_seconds", "QT002", None, 0, -1, "-Infinity")
            + each("p_ttl_seconds", "QT005", "NaN", "Infinity", "1e300", "0.5", 601)
        ),
        "observe_candidates": each("p_max", "QT002", None, 0, -1, 1001),
        "claim_observe": worker("p_worker"),
        "complete_observe": (
            secret("p_claim_secret", "p_node_id")
            + each("p_outcome", "QT002", None, "", "pending", "DONE")
            + each("p_evidence", "QT005", BIG_JSON)
            + hint("p_retry_after_seconds")
        ),
        "claim_observe_batch": (
            worker("p_worker") + each("p_node_ids", "QT002", list(range(1, 34)))
        ),
        "complete_observe_batch": (
            secret("p_claim_secrets", "p_node_ids")
            + each("p_outcomes", "QT002", [None], [""], ["pending"], ["DONE"])
            + each("p_evidence", "QT005", [BIG_JSON])
            + each("p_retry_after_seconds", "QT002", ["-1"], ["-Infinity"])
            + each("p_retry_after_seconds", "QT005", ["NaN"], ["Infinity"], ["1e300"], ["3601"])
            + each("p_retry_after_seconds", "QT005", ["1e-7"], ["1e-400"])
        ),
        "complete_recovery": (
            secret("p_claim_secret", "p_node_id")
            + each("p_outcome", "QT002", None, "", "OK")
            + each("p_outcome", "QT021", "NOT_SUBMITTED")  # its side effect was prepared
            + each("p_evidence", "QT005", BIG_JSON)
            + each("p_external_ref", "QT005", BIG_TEXT)
            + hint("p_retry_after_seconds")
        ),
        "expire_movements": each("p_max", "QT002", None, 0, 10001) + worker("p_actor"),
        "expire_proposals": each("p_max", "QT002", None, 0, 10001) + worker("p_actor"),
        "heartbeat": (
            worker("p_worker_name")
            + each("p_instance_id", "QT002", None, "")
            + each("p_tier", "QT002", None, "CORE", "main")
            + each("p_expected_interval_seconds", "QT002", None, 0, -1, "-Infinity")
            + each(
                "p_expected_interval_seconds", "QT005", "NaN", "Infinity", "1e300", "1e-300", 3601
            )
            + each("p_processed", "QT002", -1)
            + each("p_consecutive_errors", "QT002", -1)
            + each("p_pid", "QT002", 0, -1)
            + each("p_last_error", "QT005", BIG_TEXT)
            + each("p_host", "QT005", BIG_TEXT)
        ),
        "register_executor": (
            each("p_executor_key", "QT002", None, "", "Sim", "sim-2", "s" * 64)
            + each("p_has_side_effect", "QT002", None)
            + bad_schemas("p_node_config_schema")
            + each("p_description", "QT005", BIG_TEXT)
        ),
        "report_executor_health": (
            each("p_executor_key", "QT012", None, "nope")
            + each("p_status", "QT002", None, "", "healthy", "UP")
            + worker("p_reported_by")
            + each("p_detail", "QT005", BIG_JSON)
        ),
        "register_template": (
            each("p_template_name", "QT002", None, "", "One Two")
            + [(arg, value, code) for arg, value, code in bad_plans if arg in plan_args]
            + each("p_description", "QT005", BIG_TEXT)
        ),
        "upsert_lane_baseline": (
            lane_settings
            + each("p_baseline_seconds", "QT002", 0, -1, "-Infinity")
            + each("p_min_poll_seconds", "QT005", "NaN", "1e-7", -1)
        ),
        "set_executor_config": (
            each("p_executor_key", "QT012", None, "nope")
            + bad_schemas("p_node_config_schema")
            + each("p_description", "QT005", BIG_TEXT)
        ),
        "upsert_chain": (
            each("p_chain_key", "QT002", None, "", "World-B", "b" * 64, BIG_TEXT)
            + each("p_chain_id", "QT002", None, 0, -1, 1)  # 1 is world-a's
            + each("p_rpc_url_env", "QT002", None, "", "qtg_rpc", "https://rpc.test/KEY", BIG_TEXT)
            + each("p_finality_depth", "QT002", None, -1, 10001)
            + each("p_block_time_ms", "QT002", None, 0, -1, 3600001)
            + each("p_max_fee_per_gas", "QT005", 0, -1, 10**17, "NaN")
            + each("p_max_fee_per_gas", "QT002", 1.5)
            + each("p_max_priority_fee_per_gas", "QT005", 0, "Infinity")
            # a tip above the fee cap (200 gwei unless given)
            + each("p_max_priority_fee_per_gas", "QT002", 10**15)
        ),
        "propose_registry_change": (
            each("p_subject", "QT002", None, "", "chain", "chain/world-z", "nope/world-a")
            + each("p_subject", "QT002", "token/world-a", "chain/world-a/x", BIG_TEXT)
            + each("p_change", "QT002", None, "[]", '"x"', "{}", '{"no_such_field": 1}')
            + each("p_change", "QT002", '{"finality_depth": "three"}', '{"chain_id": 1}')
            + each("p_change", "QT002", '{"finality_depth": 1e20}')
        ),
        "upsert_chain_token": (
            chain_keys("p_chain_key")
            + each("p_symbol", "QT002", None, "", "US DC", BIG_TEXT)
            + addresses("p_address")
            + each("p_decimals", "QT002", None, -1, 37)
        ),
        "set_value_limit": (
            each("p_scope", "QT002", None, "", "planet", BIG_TEXT)
            + each("p_name", "QT002", None, "", "*", "a b", BIG_TEXT)
            + each("p_max_in_flight", "QT005", 0, -1, "NaN", "Infinity", "1e15")
            + each("p_max_per_day", "QT005", 0, "NaN")
            + each("p_max_per_movement", "QT005", -5, "Infinity")
            + each("p_trip_after_failures", "QT005", 0, 100001)
            + each("p_trip_window_seconds", "QT005", 0, "NaN", 2592001)
        ),
        "reset_breaker": each("p_scope", "QT061", None, "nowhere")
        + each("p_name", "QT005", BIG_TEXT),
        "trip_breaker": (
            each("p_scope", "QT002", None, "", "network", "Venue", "planet")
            + each("p_scope", "QT005", BIG_TEXT)
            # no executor; a lane, not a venue; an executor without a side effect
            + each("p_name", "QT002", None, "", "nowhere", "default", "bybit_deposit")
            + each("p_name", "QT005", BIG_TEXT)
            + each("p_reason", "QT002", None, "", "  ", UNPRINTABLE)
            + each("p_reason", "QT005", BIG_TEXT)
        ),
        "record_balance_snapshots": (
            each("p_read_id", "QT080", None, -1, 2**62)
            + each("p_balances", "QT005", ["NaN", None], ["Infinity", None], [-1, None])
            + each("p_balances", "QT005", ["1e300", None], ["1e16", None])
            + each("p_account_kinds", "QT002", [None, "venue"], ["moon", "venue"], ["chain"], [])
            + each("p_addresses", "QT014", ["0x" + "9" * 40, "FUND"], ["0x" + "D" * 40, "FUND"])
            + each("p_account_keys", "QT014", ["world-z", "bybit"], ["world-a", "kraken"])
            + each("p_errors", "QT005", [None, BIG_TEXT])
            + each("p_errors", "QT002", [None, None], [None, " "], ["and a balance", "down"])
            + each("p_block_numbers", "QT002", [-1, None], [None, None], [7, 7])
        ),
        "verify_drift": (
            worker("p_worker")
            + each("p_max", "QT002", None, 0, -1, 1001)
            + each(
                "p_anchor_lag_seconds", "QT002", None, 0, 0.5, 86401, "NaN", "Infinity", "-Infinity"
            )
        ),
        "prune_balance_snapshots": worker("p_worker") + each("p_max", "QT002", None, 0, 10001),
        "roll_up_pipeline_counts": each("p_max", "QT002", None, 0, 1000001),
        "prune_callbacks": worker("p_worker") + each("p_max", "QT002", None, 0, 10001),
        "confirm_balance_baseline": (
            each("p_account_kind", "QT002", None)
            + each("p_account_key", "QT083", "world-z", "")
            + each("p_address", "QT083", "0x" + "e" * 40)
            + each("p_snapshot_id", "QT002", None)
            + each("p_snapshot_id", "QT083", -1, 2**62)
            + each("p_reason", "QT002", None, "", "   ", UNPRINTABLE)
            + each("p_reason", "QT005", BIG_TEXT)
            + each("p_address", "QT005", BIG_TEXT)
        ),
        "rehearsal_input": each("p_movement_id", "QT010", None, -1, 0, BIGINT_MAX),
        "request_rehearsal": (
            each("p_movement_id", "QT010", None, -1, 0, BIGINT_MAX)
            + each("p_movement_id", "QT020", w.running)
        ),
        "finish_rehearsal_request": (
            each("p_request_id", "QT026", None, -1, 0, BIGINT_MAX)
            + each("p_claim", "QT026", None, -1, 0, 2, 2**31 - 1)  # not the claim it holds
            # neither a rehearsal nor a problem; one that does not exist
            + each("p_rehearsal_id", "QT002", None, -1, BIGINT_MAX)
            + each("p_problem", "QT002", "both", BIG_TEXT)  # with the rehearsal: both
        ),
        "record_rehearsal": (
            each("p_movement_id", "QT010", None, -1, BIGINT_MAX)
            + each("p_outcome", "QT002", None, "", "PASSED", "ok", BIG_TEXT)
            + each("p_summary", "QT002", None, "[]", '"failed"', "5")
            + each("p_summary", "QT005", BIG_JSON)
        ),
        "load_rehearsal_registry": each(
            "p_registry",
            "QT002",
            None,
            "[]",
            '"registry"',
            '{"movement_requests": []}',
            '{"chains": [1]}',
            '{"value_limits": [{"scope": "planet", "name": "x"}]}',
            '{"value_limits": [{"scope": "lane", "name": "x", "no_such_column": 1}]}',
            '{"executors": []}',  # the world's nodes name them
        ),
        "acknowledge_drift_alert": (
            each("p_alert_id", "QT081", None, -1, 2**62)
            + each("p_reason", "QT002", None, "", "   ", UNPRINTABLE)
            + each("p_reason", "QT005", BIG_TEXT)
        ),
        "set_balance_settings": (
            each("p_drift_threshold", "QT005", "NaN", "Infinity", -1, "1e300")
            + each("p_venue_withdraw_fee_cap", "QT005", "NaN", -1, "1e12")
            + each("p_max_balance", "QT005", 0, -1, "NaN", "1e31")
            + each("p_snapshot_keep_days", "QT005", -1, 36501)
        ),
        "set_callback_settings": (
            each("p_max_attempts", "QT005", 0, 1001)
            + each("p_max_age_seconds", "QT005", 0, "NaN", "Infinity", "1e10")
            + each("p_backoff_base_seconds", "QT005", 0, -1, "NaN", 3601)
            + each("p_backoff_cap_seconds", "QT005", 4, "NaN", 86401)
            + each("p_lease_seconds", "QT005", 0, 39, "NaN", 3601)
            + each("p_keep_days", "QT005", -1, 36501)
        ),
        "promote_audit": worker("p_worker") + each("p_max", "QT002", None, 0, 10001),
        "claim_callbacks": worker("p_worker") + each("p_max", "QT002", None, 0, -1, 1001),
        "complete_callback": (
            each("p_claim_secret", "QT002", None, "", "zz", "f" * 65)
            + each("p_claim_secret", "QT030", forged_secret(), "g" * 64)
            + each("p_callback_id", "QT070", None, -1, 0, BIGINT_MAX)
            + each("p_callback_id", "QT030", w.dead_callback)
            + each("p_status_code", "QT002", None, -1, 0, 99, 600)
            + each("p_error", "QT005", BIG_TEXT)
        ),
        "replay_callback": (
            each("p_callback_id", "QT070", None, -1, 0, BIGINT_MAX)
            + each("p_callback_id", "QT071", w.callback)
            + each("p_reason", "QT002", None, "", "  ", UNPRINTABLE)
            + each("p_reason", "QT005", BIG_TEXT)
        ),
        "propose_callback_target": a_target,
        "upsert_callback_target": a_target,
        "verify_audit_chain": (
            each("p_expected_seq", "QT002", 1) + each("p_expected_hash", "QT002", "0x" + "a" * 64)
        ),
        "audit_export": (
            each("p_after_seq", "QT002", None, -1) + each("p_max", "QT002", None, 0, 10001)
        ),
        "upsert_chain_protocol": (
            chain_keys("p_chain_key")
            + each("p_protocol", "QT002", None, "", "wormhole", BIG_TEXT)
            + each("p_remote_id", "QT002", None, -1, 1.5, "NaN", 2**32, "1e300")
            + each("p_contracts", "QT002", None)
            + each(
                "p_contracts",
                "QT002",
                *map(
                    json.dumps,
                    [
                        {},
                        [],
                        "x",
                        {"TokenMessengerV2": "0x12"},
                        {"TokenMessengerV2": 5},
                        {"Token Messenger": "0x" + "a" * 40},
                        {f"C{i}": "0x" + "a" * 40 for i in range(17)},
                        {"TokenMessengerV2": BIG_TEXT},
                    ],
                ),
            )
        ),
        "upsert_ccip_lane": (
            chain_keys("p_source_chain_key")
            + chain_keys("p_dest_chain_key")
            + each("p_dest_chain_key", "QT002", "world-c")  # the source itself
            + each("p_dest_chain_key", "QT014", "world-b")  # registered, no CCIP there
            + each("p_version", "QT002", None, "", "2.0", "1.2", BIG_TEXT)
            + each("p_token_data", "QT002", None, "", "lock_release", BIG_TEXT)
            + each("p_fee_margin_bps", "QT002", None, -1, 10001)
            + each("p_max_fee_wei", "QT002", None, 0, -1, 1.5, "NaN", "Infinity", "1e21")
            + each("p_onramp", "QT002", "", "0x12", "0x" + "g" * 40, BIG_TEXT)
            + each("p_offramp", "QT002", "", "0x12", "0x" + "g" * 40, BIG_TEXT)
        ),
        "upsert_treasury_account": (
            chain_keys("p_chain_key")
            + addresses("p_address")
            + each("p_signer_id", "QT002", None, "", "a b", "0x" + "ab" * 32, BIG_TEXT)
        ),
        "allow_destination": (
            chain_keys("p_chain_key")
            + addresses("p_address")
            + each("p_label", "QT002", None, "", "  ", BIG_TEXT)
        ),
        "disallow_destination": chain_keys("p_chain_key") + addresses("p_address"),
        "bybit_withdraw_route": (
            each("p_node_id", "QT011", None, 0, -1, 2**62) + each("p_node_id", "QT002", w.claimed)
        ),
        "bybit_deposit_route": (
            each("p_node_id", "QT011", None, 0, -1, 2**62) + each("p_node_id", "QT002", w.claimed)
        ),
        "paid_in_deposits": each("p_node_id", "QT011", None, 0, -1, 2**62),
        "abandoned_transactions": each("p_node_id", "QT011", None, 0, -1, 2**62),
        "claim_capital_transfers": (
            each("p_max", "QT002", None, 0, -1, 1001)
            + each("p_lease_seconds", "QT002", None)
            + each("p_lease_seconds", "QT005", "NaN", "Infinity", "1e300", "0.5", 3601)
        ),
        "record_capital_transfer_check": (
            each("p_node_id", "QT011", None, -1, 2**62, w.claimed)
            + each("p_status", "QT002", None, "", "credited", BIG_TEXT)
            + each("p_credited_amount", "QT005", "NaN", "Infinity", -1, "1e300")
            + each("p_record", "QT005", BIG_JSON)
            + each("p_error", "QT005", BIG_TEXT)
            + each("p_retry_after_seconds", "QT002", -1)
            + each("p_retry_after_seconds", "QT005", "NaN", "1e300")
        ),
        "upsert_exchange_venue": (
            each("p_venue_key", "QT002", None, "", "By bit", "b" * 64, BIG_TEXT)
            + each("p_kind", "QT002", None, "", "okx", BIG_TEXT)
            + each("p_base_url_env", "QT002", None, "", "https://api.bybit.com/KEY", BIG_TEXT)
            + each("p_key_file_env", "QT002", None, "", "/etc/qtg/key.json", BIG_TEXT)
        ),
        "upsert_venue_chain": (
            each("p_venue_key", "QT014", None, "", "nope", BIG_TEXT)
            + chain_keys("p_chain_key")
            + each("p_venue_chain", "QT002", None, "", "E T H", "x" * 65, BIG_TEXT)
        ),
        "upsert_venue_deposit_address": (
            each("p_venue_key", "QT014", None, "", "nope", BIG_TEXT)
            + chain_keys("p_chain_key")
            + each("p_coin", "QT002", None, "", "US DT", BIG_TEXT)
            + addresses("p_address")
        ),
        "evm_transfer_route": (
            # a node that is not a transfer step: its config names no chain
            each("p_node_id", "QT011", None, 0, -1, 2**62) + each("p_node_id", "QT002", w.claimed)
        ),
        "ccip_send_route": (
            # a transfer step names no destination chain
            each("p_node_id", "QT011", None, 0, -1, 2**62)
            + each("p_node_id", "QT002", w.claimed, w.transfer)
        ),
        "ccip_stranded_sends": each("p_max", "QT002", None, 0, -1, 1001),
        "record_ccip_manual_execution": (
            each("p_node_id", "QT011", None, 0, 2**62)
            # not stranded: a transfer, a ccip node not observed
            + each("p_node_id", "QT021", w.transfer, w.ccip_send)
            + each("p_message_id", "QT021", "0x" + "cd" * 32)
            + each("p_message_id", "QT002", None, "", "0xAB", "0x" + "AB" * 32)
            + each("p_executor", "QT002", None, "", "0x12", "0x" + "g" * 40)
            + each("p_nonce", "QT002", None, -1, 1)  # 1: the bytes are signed at 0
            + each("p_tx_hash", "QT002", None, "", "0x" + "AB" * 32)
            + each("p_raw_tx", "QT002", None, "", "0x00", world_transfer(0)[1])
            + each("p_raw_tx", "QT005", "0x" + "ab" * 140_000)
            + each("p_replaces", "QT021", "0x" + "ef" * 32)
        ),
        "cctp_burn_route": (
            # a node that is not a burn step: its config names no chains
            each("p_node_id", "QT011", None, 0, -1, 2**62) + each("p_node_id", "QT002", w.claimed)
        ),
        "cctp_mint_route": (
            each("p_node_id", "QT011", None, 0, -1, 2**62) + each("p_node_id", "QT002", w.claimed)
        ),
        "stargate_send_route": (
            # a node that is not a stargate step: its config names no source
            each("p_node_id", "QT011", None, 0, -1, 2**62) + each("p_node_id", "QT002", w.claimed)
        ),
        "evm_next_nonce": (
            chain_keys("p_chain_key")
            + addresses("p_sender")
            + each("p_sender", "QT014", "0x" + "e" * 40)  # not a treasury account
        ),
        "evm_nonce_gaps": each("p_max", "QT002", None, 0, -1, 1001),
        "settle_evm_nonces": each("p_max", "QT002", None, 0, -1, 100001),
        "evm_stale_transactions": (
            each("p_blocks", "QT002", None, 0, -1, 100001)
            + each("p_min_seconds", "QT002", None, -1, 86401)
            + each("p_max", "QT002", None, 0, 1001)
        ),
        "record_nonce_fill": (
            chain_keys("p_chain_key")
            + addresses("p_sender")
            + each("p_sender", "QT014", "0x" + "e" * 40)
            + each("p_nonce", "QT002", None, -1)
            # the valid bytes are at nonce 5: another nonce does not match them
            # (a fill at a live intent's nonce: tests/procedures/test_evm_nonce_reaper.py)
            + each("p_nonce", "QT002", 6, 7, 4)
            + each("p_tx_hash", "QT002", None, "", "0xcc", "0x" + "AB" * 32)
            + each(
                "p_raw_tx",
                "QT002",
                None,
                "",
                "0x02",
                "0x02c0",
                world_transfer(5)[1],
                world_fill(6)[1],
            )
            + each("p_raw_tx", "QT005", "0x" + "00" * 131073)
            + each("p_replaces", "QT002", "0xcc")
            + each("p_replaces", "QT033", "0x" + "ab" * 32)  # no fill there to replace
        ),
        "record_evm_replacement": (
            each("p_intent_id", "QT011", None, -1, 2**62)
            + each("p_tx_hash", "QT002", None, "", "0xcc")
            + each("p_raw_tx", "QT002", None, "0x02", world_transfer(6, 3 * 10**9, amount=2)[1])
            + each("p_raw_tx", "QT033", world_transfer(7, 3 * 10**9)[1])
            + each("p_raw_tx", "QT005", "0x" + "00" * 131073)
        ),
        "record_nonce_closed": (
            chain_keys("p_chain_key")
            + addresses("p_sender")
            + each("p_sender", "QT014", "0x" + "e" * 40)
            + each("p_nonce", "QT002", None, -1)
            + each("p_nonce", "QT033", 7)
            + each("p_how", "QT002", None, "", "mined", "found")
            + each("p_evidence", "QT002", None, "[]", "5")
            + each("p_evidence", "QT005", BIG_JSON)
        ),
    }
    return with_call_forms(calls)


def with_call_forms(by_function: dict[str, T]) -> dict[str, T]:
    """``by_function`` with the operator's procedures (procs.CALL_FORMS: CALL
    movement_approve(21) in psql) added, each with its function's entry: it
    takes the same arguments, succeeds on the same call and refuses the same
    values with the same codes (its body is the function's call)."""
    forms = {name: by_function[f] for name, f in procs.CALL_FORMS.items() if f in by_function}
    return by_function | forms


TEMPLATE_BAD_PARAMS: list[tuple[Any, str]] = [
    ("[]", "QT002"),
    ('"lane"', "QT002"),
    ("{}", "QT003"),  # the parameter is missing
    ('{"lane": "cctp_fsat"}', "QT001"),
    ('{"lane": 5}', "QT001"),
    ('{"lane": null}', "QT001"),
]


# --- the calls --------------------------------------------------------------------------------


def wrapped(name: str) -> procs.Procedure:
    """The function ``name`` is, or calls when it is a procedure (procs.CALL_FORMS)."""
    return procs.PROCEDURES[procs.CALL_FORMS.get(name, name)]


def call_query(name: str, args: dict[str, Any]) -> tuple[sql.Composed, list[Any]]:
    """SELECT * FROM name(p_a => %s::type, ...) for the arguments given; CALL
    name(...) for a procedure."""
    procedure = wrapped(name)
    parts, params = [], []
    for arg in procedure.args:
        if arg.name in args:
            parts.append(
                sql.SQL("{} => %s::{}").format(sql.Identifier(arg.name), sql.SQL(arg.type))
            )
            params.append(args[arg.name])
    call = "CALL {}({})" if name in procs.CALL_FORMS else "SELECT * FROM {}({})"
    query = sql.SQL(call).format(sql.Identifier(name), sql.SQL(", ").join(parts))
    return query, params


class Outcome:
    """What one call did: its rows, or the SQLSTATE and message it was refused with."""

    def __init__(self, conn: Conn, name: str, args: dict[str, Any]) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.columns: list[str] = []
        self.sqlstate: str | None = None
        self.message = ""
        claims = any(isinstance(v, ObserverClaim) or (isinstance(v, list) and any(
            isinstance(e, ObserverClaim) for e in v)) for v in args.values())  # fmt: skip
        try:
            # an observer's claim (ObserverClaim) and the call share one transaction
            with conn.transaction() if claims else contextlib.nullcontext():
                query, params = call_query(
                    name, {key: observer_claims(conn, v) for key, v in args.items()}
                )
                cur = conn.execute(query, params)
                self.columns = [c.name for c in cur.description or ()]
                self.rows = cur.fetchall()
        except psycopg.Error as exc:
            self.sqlstate, self.message = exc.sqlstate, str(exc).splitlines()[0]

    def refusals(self) -> list[str | None]:
        """The codes a batch call refused its elements with (None: an element went on)."""
        if "error_code" not in self.columns:
            return []
        at = self.columns.index("error_code")
        return [row[at] for row in self.rows]


UNCHANGED: weakref.WeakKeyDictionary[Conn, dict[str, tuple[int, str]]] = weakref.WeakKeyDictionary()
"""Each connection's fingerprint before its first refused call: every refusal
leaves the database as it was."""


def assert_refused(conn: Conn, name: str, args: dict[str, Any], code: str, what: str) -> None:
    assert conn.autocommit  # the call alone in its transaction
    if conn not in UNCHANGED:
        UNCHANGED[conn] = fingerprint(conn)
    outcome = Outcome(conn, name, args)
    codes = outcome.refusals()
    if outcome.sqlstate is None and codes and all(c is not None for c in codes):
        assert set(codes) == {code}, f"{what}: refused in its rows with {codes}, expected {code}"
        # the call committed: it must have written nothing
        assert fingerprint(conn) == UNCHANGED[conn], (
            f"{what}: refused with {code} in its rows, but a table changed"
        )
    else:
        # raised: its transaction was rolled back whole
        assert outcome.sqlstate == code, f"{what}: expected {code}, got " + (
            f"{outcome.sqlstate}: {outcome.message}" if outcome.sqlstate else f"{outcome.rows}"
        )


# --- the world, once for the module --------------------------------------------------------------


@pytest.fixture(scope="module")
def world_db(pg_server: str, template_db: str) -> Iterator[tuple[str, World]]:
    with module_database(pg_server, template_db, "qtg_bad_input") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            world = build_world(bind(conn))
        yield dsn, world


@pytest.fixture
def world_conn(world_db: tuple[str, World]) -> Iterator[Conn]:
    with psycopg.connect(world_db[0], autocommit=True) as conn:
        bind(conn)
        pin_clock(conn, iso_at(NOW))
        yield conn


WORLD_PROCEDURES = sorted([*procs.PROCEDURES, *procs.CALL_FORMS])
"""Every function with a wrapper, and every procedure."""


def test_every_routine_a_runner_or_an_operator_may_call_is_in_the_suite(
    world_conn: Conn,
) -> None:
    granted = world_conn.execute(
        """SELECT p.proname FROM pg_proc p
            WHERE p.pronamespace = 'testnet'::regnamespace
              AND (has_function_privilege('qtg_testnet_runner', p.oid, 'EXECUTE')
                OR has_function_privilege('qtg_testnet_operator', p.oid, 'EXECUTE'))"""
    ).fetchall()
    assert {name for (name,) in granted} - set(WORLD_PROCEDURES) == set()


def test_every_public_procedure_is_in_the_suite() -> None:
    """A procedure added to procs.py (or procs.CALL_FORMS) without bad inputs
    here fails this test."""
    placeholder = World(0, 0, "", 0, "", 0, "", 0, 0)
    assert set(valid_calls(placeholder)) == set(WORLD_PROCEDURES)
    # worker_stopped: any name is a valid name (it stops nothing that is not
    # there); registered_executors and refresh_lane_pacing take no argument
    no_bad_inputs = {
        "worker_stopped",
        "registered_executors",
        "refresh_lane_pacing",
        "evm_chains",
        "limit_held_nodes",
        "exchange_venue_list",
        "begin_balance_read",
        "claim_rehearsal_request",
    }
    assert set(bad_inputs(placeholder)) == set(WORLD_PROCEDURES) - no_bad_inputs


@pytest.mark.parametrize("name", WORLD_PROCEDURES)
def test_bad_inputs_are_refused_with_a_qt_code_and_write_nothing(
    world_db: tuple[str, World], world_conn: Conn, name: str
) -> None:
    world = world_db[1]
    valid = valid_calls(world)[name]
    for arg, value, code in bad_inputs(world).get(name, []):
        args = dict(valid)
        if arg in ("p_node_ids", "p_claim_secrets", "p_external_refs"):
            value = value if isinstance(value, list) or value is None else [value]
        args[arg] = value
        shown = repr(value) if len(repr(value)) < 80 else repr(value)[:77] + "..."
        assert_refused(world_conn, name, args, code, f"{name}({arg}={shown})")
    # the valid call succeeds: each refusal was its bad value's
    with world_conn.transaction(force_rollback=True):
        outcome = Outcome(world_conn, name, valid)
        assert outcome.sqlstate is None, f"{name}: the valid call failed: {outcome.message}"
        assert all(code is None for code in outcome.refusals()), outcome.rows


def test_a_template_filled_with_bad_params_is_refused(world_conn: Conn) -> None:
    for params, code in TEMPLATE_BAD_PARAMS:
        args = {"p_external_id": "t", "p_amount": 5, "p_template": "one", "p_params": params}
        assert_refused(world_conn, "create_movement", args, code, f"params {params}")
    good = {
        "p_external_id": "t",
        "p_amount": 5,
        "p_template": "one",
        "p_params": '{"lane": "default"}',
    }
    with world_conn.transaction(force_rollback=True):
        assert Outcome(world_conn, "create_movement", good).sqlstate is None


def test_the_batch_calls_refuse_a_bad_batch_whole(
    world_db: tuple[str, World], world_conn: Conn
) -> None:
    """Arrays of unequal length, a node twice, a NULL id or over 1000 nodes: QT002, and
    nothing changed."""
    w = world_db[1]
    batches = {
        "record_intent_prepared_batch": ("p_signed_tx_hashes", ["0xab"]),
        "complete_submit_batch": ("p_external_refs", ["0xref"]),
        "complete_observe_batch": ("p_outcomes", ["PENDING"]),
        "release_nodes": (None, None),
        "quarantine_nodes": ("p_errors", ["poison"]),
    }
    for name, (extra_arg, extra) in batches.items():
        base = valid_calls(w)[name]
        wrong = [
            {"p_node_ids": [w.claimed, w.claimed], "p_claim_secrets": [w.claimed_secret] * 2},
            {"p_node_ids": [None], "p_claim_secrets": [w.claimed_secret]},
            {"p_node_ids": [w.claimed], "p_claim_secrets": []},
            {"p_node_ids": list(range(1, 1002)), "p_claim_secrets": [w.claimed_secret] * 1001},
        ]
        for change in wrong:
            args = {k: v for k, v in base.items() if k in ("p_reason",)}
            args.update(change)
            if extra_arg is not None:
                args[extra_arg] = extra * len(change["p_node_ids"])
            assert_refused(
                world_conn, name, args, "QT002", f"{name}({change['p_node_ids'][:3]}...)"
            )


def test_a_dense_and_a_chain_plan_of_200_nodes_are_created_whole(world_conn: Conn) -> None:
    """The plan limit is 200 nodes; the densest plan names 19,900 parents, and
    every edge is there. How long it takes is the bench's to say, not a test's."""
    dense = plan(*(node(f"n{i}", [f"n{j}" for j in range(i)]) for i in range(200)))
    chain = plan(*(node(f"n{i}", [f"n{i - 1}"] if i else []) for i in range(200)))
    for label, the_plan in (("dense", dense), ("chain", chain)):
        with world_conn.transaction(force_rollback=True):
            created = procs.create_movement(label, Decimal(10), plan=the_plan).one(world_conn)
            edges = world_conn.execute(
                "SELECT count(*) FROM movement_plan_edges WHERE request_id = %s",
                (created.movement_id,),
            ).fetchone()
            nodes = world_conn.execute(
                "SELECT count(*) FROM movement_request_nodes WHERE request_id = %s",
                (created.movement_id,),
            ).fetchone()
        assert (edges, nodes) == (((19_900 if label == "dense" else 199),), (200,))


# --- hypothesis: any value of the argument's type ---------------------------------------------

SPECIAL_NUMBERS = ["NaN", "Infinity", "-Infinity", "-0", "0", "1e300", "-1e300", "1e-300", "1e-400"]
texts = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "numeric": st.none()
    | st.sampled_from(SPECIAL_NUMBERS)
    | st.decimals(min_value=-(10**40), max_value=10**40, allow_nan=False, allow_infinity=False).map(
        str
    )
    | st.integers(min_value=-(10**40), max_value=10**40),
    "integer": st.none() | st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "bigint": st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "boolean": st.none() | st.booleans(),
    "text": st.none() | texts | st.just(BIG_TEXT),
    "jsonb": st.none() | json_values.map(json.dumps),
    "timestamp with time zone": st.none()
    | st.sampled_from(["infinity", "-infinity"])
    | st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
    "bigint[]": st.none() | st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=3),
    "numeric[]": st.none()
    | st.lists(
        st.none() | st.sampled_from(SPECIAL_NUMBERS) | st.integers(-(10**40), 10**40), max_size=3
    ),
    "text[]": st.none() | st.lists(st.none() | texts, max_size=3),
    "jsonb[]": st.none() | st.lists(st.none() | json_values.map(json.dumps), max_size=3),
    "boolean[]": st.none() | st.lists(st.none() | st.booleans(), max_size=3),
    "timestamp with time zone[]": st.none()
    | st.lists(
        st.none()
        | st.sampled_from(["infinity", "-infinity"])
        | st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
        max_size=3,
    ),
}


@pytest.fixture
def fresh_world(db: TestDatabase) -> tuple[Conn, World]:
    conn = bind(db.connect())
    return conn, build_world(conn)


@settings(
    max_examples=int(os.environ.get("QTG_BAD_INPUT_EXAMPLES", "120")),
    deadline=None,
    derandomize=os.environ.get("QTG_BAD_INPUT_RANDOM") is None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_value_gets_a_result_or_a_qt_code(fresh_world: tuple[Conn, World], data: Any) -> None:
    conn, world = fresh_world
    name = data.draw(st.sampled_from(WORLD_PROCEDURES), label="procedure")
    procedure = wrapped(name)
    args = dict(valid_calls(world)[name])
    for arg in procedure.args:
        if data.draw(st.booleans(), label=f"replace {arg.name}"):
            args[arg.name] = data.draw(STRATEGIES[arg.type], label=arg.name)
    outcome = Outcome(conn, name, args)
    if outcome.sqlstate is not None:
        # (a call that raises is rolled back whole: conn is autocommit)
        assert outcome.sqlstate.startswith("QT"), (
            f"{name}{args}: {outcome.sqlstate} {outcome.message}"
        )
        assert outcome.sqlstate != "QT099"  # internal, never a caller's
    for code in outcome.refusals():
        assert code is None or code.startswith("QT"), f"{name}{args}: {outcome.rows}"
