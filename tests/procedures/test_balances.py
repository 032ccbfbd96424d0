"""Balances and drift (SQL only, migration 0028_balances): the snapshots a
runner login records (begin_balance_read, record_balance_snapshots), their
verification against the engine's own records (verify_drift, through
node_balance_effects and balance_expectations), the drift alert and the
breakers it trips, the two operators who acknowledge it and re-baseline the
account (acknowledge_drift_alert), and the refusals of bad reports.

The clock is pinned on both connections and moved together (``at``): a node
claimed at 10 s and finished at 20 s is certainly in a read that starts at
30 s, perhaps in one that starts at 15 s, and not in one recorded at 5 s."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import dsn_for
from engine import as_person, bind, claim, create, create_started, fingerprint, node, node_ids, plan
from plans import explained, rows_read
from rich.console import Console
from rows import T0, Conn, iso_at, person, plant_history, set_clock

from qtg_runner.commands.status import render
from qtg_runner.db import procs
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor
from qtg_runner.executors.ccip import CcipExecutor
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.executors.stargate import StargateExecutor

T1 = "0x" + "a1" * 20
T2 = "0x" + "a2" * 20
DEPOSIT = "0x" + "de" * 20
TOKEN_A = "0x" + "0a" * 20
TOKEN_B = "0x" + "0b" * 20
VENUE = ("venue", "bybit", "FUND")

Account = tuple[str, str, str]
BALANCE_TABLES = ("balance_reads", "balance_snapshots", "balance_baselines", "balance_drift_alerts")


def chain(key: str, address: str) -> Account:
    return ("chain", key, address)


@pytest.fixture
def world(conn: Conn) -> None:
    """Two chains with USDC and the treasury accounts T1 and T2 on each, the venue
    bybit with a deposit address on local-a, the executors and their lanes."""
    for key, chain_id, token in (("local-a", 31337, TOKEN_A), ("local-b", 31338, TOKEN_B)):
        procs.upsert_chain(key, chain_id, f"QTG_RPC_{key[-1].upper()}", 2, 1000).one(conn)
        procs.upsert_chain_token(key, "USDC", token, 6).one(conn)
        for t in (T1, T2):
            procs.upsert_treasury_account(key, t, "env:TREASURY").one(conn)
    procs.upsert_exchange_venue("bybit", "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE").one(conn)
    procs.upsert_venue_chain("bybit", "local-a", "ETH").one(conn)
    procs.upsert_venue_deposit_address("bybit", "local-a", "USDC", DEPOSIT).one(conn)
    for e in (
        EvmTransferExecutor,
        BybitDepositExecutor,
        BybitWithdrawExecutor,
        CctpBurnExecutor,
        CctpMintExecutor,
    ):
        procs.register_executor(e.key, e.has_side_effect, e.node_config_schema, "x").one(conn)
    for lane in ("evm", "cctp-fast", "bybit-deposit", "bybit-withdraw"):
        procs.upsert_lane_baseline(lane, 60).one(conn)


@pytest.fixture
def runner(db: Any, world: None) -> Conn:
    """The runner's own login, its clock pinned at T0."""
    return person(db, "runner1", "qtg_testnet_runner")


def transfer(key: str, src: str, dst: str, on: str = "local-a", *after: str) -> dict[str, Any]:
    config = {"chain": on, "from": src, "to": dst}
    return node(key, after, executor="evm_transfer", lane="evm", **config)


def clocks(conn: Conn, runner: Conn) -> Callable[[float], None]:
    def at(seconds: float) -> None:
        set_clock(conn, seconds)
        set_clock(runner, seconds)

    return at


def read(runner: Conn, balances: Mapping[Account, str | None]) -> int:
    """One read as the runner: begin_balance_read, then each account's balance from
    ``balances`` (a missing one, or None, is a failed read); returns the read id."""
    return record(runner, procs.begin_balance_read().all(runner), balances)


def record(runner: Conn, accounts: list[Any], balances: Mapping[Account, str | None]) -> int:
    """record_balance_snapshots of a read begun (``accounts``: what
    begin_balance_read handed out) with the balances of ``balances``."""
    rows = [(a, balances.get((a.account_kind, a.account_key, a.address))) for a in accounts]
    procs.record_balance_snapshots(
        accounts[0].read_id,
        [a.account_kind for a, _ in rows],
        [a.account_key for a, _ in rows],
        [a.address for a, _ in rows],
        [a.asset for a, _ in rows],
        [Decimal(b) if b is not None else None for _, b in rows],
        [7 if a.account_kind == "chain" and b is not None else None for a, b in rows],
        [None if b is not None else "down" for _, b in rows],
    ).one(runner)
    return accounts[0].read_id


def verify(runner: Conn) -> dict[Account, tuple[str, Decimal | None, Decimal | None]]:
    """verify_drift as the runner: each account's (outcome, expected low, high).
    Its anchors trail the clock by a second, so each call moves them over what
    was decided before the last one; every range is also computed again from
    the baseline alone (no anchor), and must be the same."""
    rows = procs.verify_drift("verify_drift_worker@test", anchor_lag_seconds=1).all(runner)
    ranges = {
        r.snapshot_id: (r.expected_low, r.expected_high)
        for r in rows
        if r.outcome in ("OK", "DRIFT")
    }
    assert ranges == from_the_baseline(list(ranges))
    return {
        (r.account_kind, r.account_key, r.address): (r.outcome, r.expected_low, r.expected_high)
        for r in rows
    }


def from_the_baseline(snapshot_ids: list[int]) -> dict[int, tuple[Decimal | None, Decimal | None]]:
    """balance_expectations of the snapshots without the anchors (read on the
    test's own connection, rolled back): every effect since the baseline
    counted again."""
    owner = OWNER[0]
    with owner.transaction(force_rollback=True):
        owner.execute("DELETE FROM balance_anchors")
        rows = owner.execute(
            "SELECT snapshot_id, expected_low, expected_high"
            " FROM balance_expectations(%s::bigint[])",
            (snapshot_ids,),
        ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


OWNER: list[Conn] = []
"""The test's own connection (the database's owner), for from_the_baseline."""


@pytest.fixture(autouse=True)
def _owner(conn: Conn) -> None:
    OWNER[:] = [conn]


def run(conn: Conn, nodes: list[dict[str, Any]], name: str, amount: str) -> dict[str, int]:
    """A started movement whose READY nodes are claimed now (their intents recorded)."""
    ids = node_ids(conn, create_started(conn, plan(*nodes), name, amount=amount))
    claim_ready(conn)
    return ids


CLAIMS: dict[int, str] = {}
"""The secrets of the nodes claimed and not landed yet in this test."""


@pytest.fixture(autouse=True)
def _claims() -> None:
    CLAIMS.clear()


def landing(conn: Conn, node_id: int) -> procs.Call[Any]:
    """The claimed node's completion at submit, with what its executor's
    completion shows: a burn its message's nonce, a withdrawal its Transfer,
    and a mint its bytes recorded (marked here, by the owner)."""
    tx = f"0x{node_id:064x}"
    row = conn.execute(
        "SELECT executor_key FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    if row[0] == "cctp_mint":
        marked = "UPDATE node_intents SET signed_tx_hash = %s WHERE node_id = %s"
        conn.execute(marked, (tx, node_id))
    evidence = {
        "cctp_burn": {"nonce": tx},
        "bybit_withdraw": {"tx_id": tx, "transfer": {"log_index": 0}},
    }.get(row[0])
    return procs.complete_submit(node_id, CLAIMS.pop(node_id), tx, evidence, settled=True)


def land(conn: Conn, node_id: int) -> None:
    """The claimed node COMPLETED now (settled at submit)."""
    landing(conn, node_id).one(conn)


def claim_ready(conn: Conn) -> None:
    for c in claim(conn):
        CLAIMS[c["node_id"]] = c["claim_secret"]


def confirm_baselines(conn: Conn, person: str = "alice") -> list[str]:
    """An operator confirms every account's baseline, as balance_status shows it."""
    rows = conn.execute(
        "SELECT account_kind, account_key, address, asset, baseline_snapshot_id"
        " FROM balance_status WHERE baseline_snapshot_id IS NOT NULL"
    ).fetchall()
    with as_person(conn, person):
        return [
            procs.confirm_balance_baseline(*row, "matches the explorer").one(conn) for row in rows
        ]


BASE: dict[Account, str | None] = {
    chain("local-a", T1): "1000",
    chain("local-a", T2): "0",
    chain("local-b", T1): "0",
    chain("local-b", T2): "300",
    VENUE: "500",
}


def test_each_executor_moves_the_accounts_its_table_says(conn: Conn, world: None) -> None:
    """node_balance_effects, executor by executor, as its header's table: the
    sender's chain account -amount, the recipient's +amount (a CCTP mint's
    less at most its burn's fee cap, a Stargate send's at least its minimum),
    the venue's FUND account -(amount + fee cap) .. -amount for a withdrawal,
    and nothing for a node that moves another asset than USDC."""
    for e in (CcipExecutor, StargateExecutor):
        procs.register_executor(e.key, e.has_side_effect, e.node_config_schema, "x").one(conn)
    ends = {"from": T1, "to": T2}
    movement = create(
        conn,
        plan(
            transfer("pay", T1, T2),
            node("weth", (), executor="evm_transfer", lane="evm", chain="local-a", token="WETH",
                 **ends),
            node("burn", (), executor="cctp_burn", lane="cctp-fast", chain="local-a",
                 destination_chain="local-b", finality="fast", max_fee_bps=20, **ends),
            node("mint", ["burn"], executor="cctp_mint", lane="evm", chain="local-b",
                 source_chain="local-a", **ends),
            node("ccip", (), executor="ccip", lane="evm", chain="local-a",
                 destination_chain="local-b", **ends),
            node("sg", (), executor="stargate", lane="evm", source="local-a",
                 destination="local-b", max_slippage_bps=100, **ends),
            node("sg-min", (), executor="stargate", lane="evm", source="local-b",
                 destination="local-a", min_amount="95.5", **ends),
            node("sg-eth", (), executor="stargate", lane="evm", source="local-a",
                 destination="local-b", token="ETH", **ends),
            node("withdraw", (), executor="bybit_withdraw", lane="bybit-withdraw", venue="bybit",
                 chain="local-a", coin="USDC", to=T2),
            node("withdraw-eth", (), executor="bybit_withdraw", lane="bybit-withdraw",
                 venue="bybit", chain="local-a", coin="ETH", to=T2),
        ),
        "effects",
        amount="100",
    )  # fmt: skip
    rows = conn.execute(
        """SELECT n.node_key, e.account_kind, e.account_key, e.address, e.asset,
                  e.low::text, e.high::text, e.reversible
             FROM node_balance_effects(ARRAY(SELECT id FROM movement_request_nodes
                                               WHERE request_id = %s)) e
             JOIN movement_request_nodes n ON n.id = e.node_id""",
        (movement,),
    ).fetchall()
    fee_cap = conn.execute("SELECT venue_withdraw_fee_cap FROM balance_settings").fetchone()
    assert fee_cap is not None
    a1, b1, a2, b2 = ("local-a", T1), ("local-b", T1), ("local-a", T2), ("local-b", T2)
    expected = {
        ("pay", *a1, "-100", "-100"), ("pay", *a2, "100", "100"),
        ("burn", *a1, "-100", "-100"),
        ("mint", *b2, "99.8", "100"),  # the burn's 20 bps cap
        ("ccip", *a1, "-100", "-100"), ("ccip", *b2, "100", "100"),
        ("sg", *a1, "-100", "-100"), ("sg", *b2, "99", "100"),
        ("sg-min", *b1, "-100", "-100"), ("sg-min", *a2, "95.5", "100"),
        ("withdraw", *a2, "100", "100"),
    }  # fmt: skip
    chains = {
        (key, account, address, Decimal(low), Decimal(high))
        for key, kind, account, address, asset, low, high, reversible in rows
        if kind == "chain" and asset == "USDC" and not reversible
    }
    assert chains == {(k, c, ad.lower(), Decimal(lo), Decimal(hi)) for k, c, ad, lo, hi in expected}
    venue = [(*r[:5], Decimal(r[5]), Decimal(r[6]), r[7]) for r in rows if r[1] == "venue"]
    withdrawn = -(100 + fee_cap[0])
    assert venue == [("withdraw", "venue", "bybit", "FUND", "USDC", withdrawn, -100, True)]
    assert len(rows) == len(expected) + 1


def test_balances_that_follow_the_movements_raise_no_alert(conn: Conn, runner: Conn) -> None:
    at = clocks(conn, runner)
    read(runner, BASE)
    assert {v[0] for v in verify(runner).values()} == {"BASELINE"}

    # a transfer landed, one in flight (landed or not, both explained), a CCTP fast
    # burn -> mint (the mint brings the amount less at most 10 bps), a deposit
    # into the venue and a withdrawal from it
    at(10)
    done = run(conn, [transfer("pay", T1, T2)], "done", "100")["pay"]
    flying = run(conn, [transfer("pay", T1, T2)], "flying", "50")["pay"]
    cctp = run(
        conn,
        [
            node("burn", (), executor="cctp_burn", lane="cctp-fast", chain="local-a",
                 destination_chain="local-b", finality="fast", **{"from": T1, "to": T2}),
            node("mint", ["burn"], executor="cctp_mint", lane="evm", chain="local-b",
                 source_chain="local-a", **{"from": T1, "to": T2}),
        ],
        "cctp", "200",
    )  # fmt: skip
    at(20)
    land(conn, done)
    land(conn, cctp["burn"])
    at(30)
    before = {**BASE, chain("local-a", T1): "700", chain("local-a", T2): "100"}
    read(runner, before)
    assert {v[0] for v in verify(runner).values()} == {"OK"}
    at(31)
    read(runner, {**before, chain("local-a", T1): "650", chain("local-a", T2): "150"})
    checked = verify(runner)
    assert {v[0] for v in checked.values()} == {"OK"}
    # the in-flight transfer is 0 or -50 on T1
    assert checked[chain("local-a", T1)][1:] == (Decimal("650"), Decimal("700"))
    # the mint is not claimed, but anyone may mint the burn's attested message
    assert checked[chain("local-b", T2)][1:] == (Decimal("300"), Decimal("500"))

    at(40)
    land(conn, flying)
    claim_ready(conn)  # the mint, claimed at 40
    mint = cctp["mint"]
    at(45)
    land(conn, mint)
    deposit = run(
        conn,
        [
            transfer("deposit", T2, DEPOSIT),
            node("credited", ["deposit"], executor="bybit_deposit", lane="bybit-deposit",
                 venue="bybit", chain="local-a", coin="USDC"),
        ],
        "deposit", "40",
    )  # fmt: skip
    withdraw = run(
        conn,
        [node("withdraw", (), executor="bybit_withdraw", lane="bybit-withdraw", venue="bybit",
              chain="local-a", coin="USDC", to=T1)],
        "withdraw", "30",
    )["withdraw"]  # fmt: skip
    at(50)
    land(conn, deposit["deposit"])
    at(60)
    # the mint paid a 0.12 USDC fee (under the 0.2 cap); the deposit left T2 and
    # the exchange has not credited it yet; the withdrawal is taken, not paid out
    after = {
        **BASE,
        chain("local-a", T1): "650",
        chain("local-a", T2): "110",
        chain("local-b", T2): "499.88",
        VENUE: "470",
    }
    read(runner, after)
    checked = verify(runner)
    assert {v[0] for v in checked.values()} == {"OK"}, checked
    assert checked[chain("local-b", T2)][1:] == (Decimal("499.8"), Decimal("500"))
    # the venue: +40 perhaps credited, -30 (and at most a 1 USDC fee) perhaps taken
    assert checked[VENUE][1:] == (Decimal("469"), Decimal("540"))

    claim_ready(conn)  # the deposit step
    at(70)
    land(conn, deposit["credited"])
    land(conn, withdraw)
    at(80)
    read(runner, {**after, chain("local-a", T1): "680", VENUE: "510"})
    checked = verify(runner)
    assert {v[0] for v in checked.values()} == {"OK"}, checked
    assert checked[VENUE][1:] == (Decimal("509"), Decimal("510"))
    assert conn.execute("SELECT count(*) FROM balance_drift_alerts").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM breakers").fetchone() == (0,)

    # a failed read (the chain down) is recorded as such and concludes nothing
    at(90)
    read(runner, {VENUE: "510"})
    checked = verify(runner)
    assert checked[chain("local-a", T1)][0] == "FAILED_READ" and checked[VENUE][0] == "OK"
    status = conn.execute(
        "SELECT balance, latest_read_error, expected_low, expected_high, open_alert_id"
        " FROM balance_status WHERE account_key = 'local-a' AND address = %s",
        (T1,),
    ).fetchone()
    assert status == (Decimal("680"), "down", Decimal("680"), Decimal("680"), None)


def test_a_drift_trips_the_breakers_an_operator_had_paused_for_a_while(
    conn: Conn, runner: Conn
) -> None:
    """One operator's timed pause of the account's lane and venue, just before
    the drift is seen, does not stand in for the drift's breakers: they become
    the engine's, with no end, and one operator cannot resume them."""
    at = clocks(conn, runner)
    read(runner, BASE)
    verify(runner)
    confirm_baselines(conn)
    at(10)
    paid = run(conn, [transfer("pay", T1, T2)], "paid", "100")["pay"]
    at(20)
    land(conn, paid)
    at(25)
    with as_person(conn, "alice"):
        procs.trip_breaker("lane", "evm", "maintenance", 15).one(conn)
        procs.trip_breaker("venue", "evm_transfer", "maintenance", 15).one(conn)
    at(30)
    read(runner, {**BASE, chain("local-a", T1): "700", chain("local-a", T2): "100"})
    assert verify(runner)[chain("local-a", T1)][0] == "DRIFT"
    breakers = conn.execute(
        "SELECT scope || ':' || name, tripped_by, by_operator, expires_at FROM breakers ORDER BY 1"
    ).fetchall()
    assert breakers == [
        ("lane:evm", "verify_drift_worker@test", False, None),
        ("venue:evm_transfer", "verify_drift_worker@test", False, None),
    ]
    audit = conn.execute(
        "SELECT entity_id, from_state, to_state, detail ->> 'replaces_pause_by' FROM audit_outbox"
        " WHERE entity = 'breaker' AND action = 'breaker_tripped' AND actor <> 'alice' ORDER BY id"
    ).fetchall()
    assert audit == [
        ("lane:evm", "TRIPPED", "TRIPPED", "alice"),
        ("venue:evm_transfer", "TRIPPED", "TRIPPED", "alice"),
    ]
    # the pause's end passes, and one operator asks to resume: still held
    at(60)
    with as_person(conn, "bob"):
        assert procs.reset_breaker("lane", "evm").one(conn) == "RESET_REQUESTED"
    held = run(conn, [transfer("pay", T2, T1)], "held", "1")["pay"]
    assert held not in CLAIMS
    assert "breaker" in procs.limit_held_nodes().all(conn)[0].reason


def test_an_unexplained_loss_raises_one_alert_trips_the_breakers_and_two_operators_rebaseline(
    conn: Conn, runner: Conn
) -> None:
    at = clocks(conn, runner)
    read(runner, BASE)
    verify(runner)
    assert set(confirm_baselines(conn)) == {"alice"}
    at(10)
    paid = run(conn, [transfer("pay", T1, T2)], "paid", "100")["pay"]
    at(20)
    land(conn, paid)

    # T1 lost 200 more than the transfer explains (a stolen key, a transfer sent
    # twice); T2 on local-b lost 300 with nothing of ours touching it
    at(30)
    stolen = {
        **BASE,
        chain("local-a", T1): "700",
        chain("local-a", T2): "100",
        chain("local-b", T2): "0",
    }
    read(runner, stolen)
    checked = verify(runner)
    assert checked[chain("local-a", T1)] == ("DRIFT", Decimal("900"), Decimal("900"))
    assert checked[chain("local-b", T2)] == ("DRIFT", Decimal("300"), Decimal("300"))
    assert checked[chain("local-a", T2)][0] == "OK"
    alerts = conn.execute(
        "SELECT alert_id, account_key, address, actual, unexplained, breakers"
        " FROM drift_alerts WHERE alert_state = 'OPEN' ORDER BY account_key"
    ).fetchall()
    assert [(a[1], a[2], a[3], a[4]) for a in alerts] == [
        ("local-a", T1, Decimal("700"), Decimal("-200")),
        ("local-b", T2, Decimal("0"), Decimal("-300")),
    ]
    # the account's own lanes and venues; an account nothing touched: none (one
    # runner's reading may not stop every scope of the network)
    assert alerts[0][5] == ["lane:evm", "venue:evm_transfer"]
    assert alerts[1][5] == []
    tripped = conn.execute(
        "SELECT scope || ':' || name, tripped_by FROM breakers ORDER BY 1"
    ).fetchall()
    assert [r[0] for r in tripped] == sorted(set(alerts[0][5]) | set(alerts[1][5]))
    assert {r[1] for r in tripped} == {"verify_drift_worker@test"}
    # qtg status shows the open alerts
    console = Console(record=True, width=300)
    console.print(render(conn))
    shown = console.export_text()
    assert "open drift alerts" in shown and T1 in shown and "-200" in shown
    # the breaker holds a new transfer READY
    held = run(conn, [transfer("pay", T2, T1)], "held", "1")["pay"]
    assert held not in CLAIMS
    assert "breaker" in procs.limit_held_nodes().all(conn)[0].reason

    # the same drift read again: still one alert per account, its latest snapshot moved
    at(40)
    read(runner, {**stolen, chain("local-a", T1): "690"})
    assert verify(runner)[chain("local-a", T1)][0] == "DRIFT"
    rows = conn.execute(
        "SELECT count(*), max(actual), max(last_snapshot_id) > max(first_snapshot_id)"
        " FROM balance_drift_alerts WHERE account_key = 'local-a'"
    ).fetchone()
    assert rows == (1, Decimal("690"), True)
    status = conn.execute(
        "SELECT open_alert_id FROM balance_status WHERE account_key = 'local-a' AND address = %s",
        (T1,),
    ).fetchone()
    assert status == (alerts[0][0],)

    # two operators accept the balance; the same one twice is refused
    alert = alerts[0][0]
    with as_person(conn, "alice"):
        assert procs.acknowledge_drift_alert(alert, "key rotated, loss written off").one(conn) == (
            "ACK_REQUESTED"
        )
        with pytest.raises(procs.Refused):
            procs.acknowledge_drift_alert(alert, "again").one(conn)
    with as_person(conn, "bob"):
        assert procs.acknowledge_drift_alert(alert, "confirmed").one(conn) == "ACKNOWLEDGED"
    audit = conn.execute(
        "SELECT action, actor FROM audit_outbox WHERE entity = 'balance'"
        " AND entity_id = %s ORDER BY id",
        (f"chain:local-a:{T1}:USDC",),
    ).fetchall()
    assert [a[0] for a in audit] == [
        "balance_baseline_set", "balance_baseline_confirmed", "drift_alert_raised",
        "drift_ack_requested", "drift_ack_refused", "drift_acknowledged",
    ]  # fmt: skip
    assert [a[1] for a in audit[3:]] == ["alice", "alice", "bob"]
    for code, alert_id in (("QT082", alert), ("QT081", 10**9)):
        with as_person(conn, "carol"), pytest.raises(psycopg.Error) as err:
            procs.acknowledge_drift_alert(alert_id, "once more").one(conn)
        assert err.value.sqlstate == code

    # re-baselined at 690: the next read is explained; the breakers stay tripped
    at(50)
    read(runner, {**stolen, chain("local-a", T1): "690"})
    checked = verify(runner)
    assert checked[chain("local-a", T1)] == ("OK", Decimal("690"), Decimal("690"))
    assert conn.execute("SELECT count(*) FROM breakers").fetchone() == (len(tripped),)


def test_a_new_drift_in_a_stopped_scope_withdraws_the_reset_asked_before_it(
    conn: Conn, runner: Conn
) -> None:
    """alice asks to reset the lane T1's drift stopped; then T2, which the
    same lane moved, drifts too: its alert trips the lane again, which
    withdraws alice's request, so bob's call asks anew instead of closing a
    stop neither had seen."""
    at = clocks(conn, runner)
    read(runner, BASE)
    verify(runner)
    confirm_baselines(conn)
    at(10)
    paid = run(conn, [transfer("pay", T1, T2)], "paid", "100")["pay"]
    at(20)
    land(conn, paid)
    at(30)
    moved = {**BASE, chain("local-a", T1): "700", chain("local-a", T2): "100"}
    read(runner, moved)
    assert verify(runner)[chain("local-a", T1)][0] == "DRIFT"
    with as_person(conn, "alice"):
        assert procs.reset_breaker("lane", "evm").one(conn) == "RESET_REQUESTED"
    at(40)
    read(runner, {**moved, chain("local-a", T2): "40"})
    assert verify(runner)[chain("local-a", T2)][0] == "DRIFT"
    with as_person(conn, "bob"):
        assert procs.reset_breaker("lane", "evm").one(conn) == "RESET_REQUESTED"
    assert conn.execute(
        "SELECT reset_requested_by FROM breakers WHERE scope = 'lane' AND name = 'evm'"
    ).fetchone() == ("bob",)
    withdrawn = conn.execute(
        "SELECT detail ->> 'withdrawn_reset_request_by' FROM audit_outbox"
        " WHERE action = 'breaker_tripped' AND entity_id = 'lane:evm' AND from_state = 'TRIPPED'"
    ).fetchall()
    assert withdrawn == [("alice",)]


def test_two_operators_write_off_only_the_balance_both_were_shown(conn: Conn, runner: Conn) -> None:
    """alice asks to accept T1's drifted 900; then the account reads 5 (a
    second loss, or a runner login's word), not verified yet when bob
    confirms what he was shown: 900 is the baseline, and the 5 is verified
    against it, a drift of its own. Once the alert shows 5, a request for
    900 is no request: bob's call asks anew at 5, and alice confirms it."""
    at = clocks(conn, runner)
    read(runner, BASE)
    verify(runner)
    confirm_baselines(conn)
    at(10)
    read(runner, {**BASE, chain("local-a", T1): "900"})
    assert verify(runner)[chain("local-a", T1)][0] == "DRIFT"
    alert = conn.execute("SELECT alert_id FROM drift_alerts WHERE actual = 900").fetchone()[0]
    with as_person(conn, "alice"):
        assert procs.acknowledge_drift_alert(alert, "a fee of 100 written off").one(conn) == (
            "ACK_REQUESTED"
        )
    at(20)
    read(runner, {**BASE, chain("local-a", T1): "5"})
    with as_person(conn, "bob"):
        assert procs.acknowledge_drift_alert(alert, "900, as shown").one(conn) == "ACKNOWLEDGED"
    baseline = conn.execute(
        "SELECT s.balance FROM balance_status b JOIN balance_snapshots s"
        " ON s.id = b.baseline_snapshot_id WHERE b.account_key = 'local-a' AND b.address = %s",
        (T1,),
    ).fetchone()
    assert baseline == (Decimal("900"),)
    at(30)
    assert verify(runner)[chain("local-a", T1)][0] == "DRIFT"
    (second,) = conn.execute(
        "SELECT alert_id FROM drift_alerts WHERE alert_state = 'OPEN' AND actual = 5"
    ).fetchall()

    with as_person(conn, "carol"):
        assert procs.acknowledge_drift_alert(second[0], "the second loss").one(conn) == (
            "ACK_REQUESTED"
        )
    at(40)
    read(runner, {**BASE, chain("local-a", T1): "1"})
    assert verify(runner)[chain("local-a", T1)][0] == "DRIFT"
    void = "SELECT ack_requested_by, ack_actual FROM drift_alerts WHERE alert_id = %s"
    assert conn.execute(void, (second[0],)).fetchone() == (None, None)  # shown as none
    with as_person(conn, "bob"):
        assert procs.acknowledge_drift_alert(second[0], "5, as shown").one(conn) == (
            "ACK_REQUESTED"
        )
    shown = conn.execute(
        "SELECT ack_requested_by, ack_actual FROM drift_alerts WHERE alert_id = %s", (second[0],)
    ).fetchone()
    assert shown == ("bob", Decimal("1"))
    with as_person(conn, "carol"):
        assert procs.acknowledge_drift_alert(second[0], "1, seen").one(conn) == "ACKNOWLEDGED"
    asked = conn.execute(
        "SELECT actor, detail FROM audit_outbox WHERE action = 'drift_ack_requested' ORDER BY id"
    ).fetchall()
    assert [(a, d["actual"]) for a, d in asked] == [("alice", 900), ("carol", 5), ("bob", 1)]
    assert asked[2][1]["replaces"] == {
        "requested_by": "carol",
        "actual": 5,
        "reason": "the second loss",
    }
    at(50)
    read(runner, {**BASE, chain("local-a", T1): "1"})
    assert verify(runner)[chain("local-a", T1)][0] == "OK"


def test_a_drift_undone_before_its_acknowledgement_is_rebaselined_where_it_ended(
    conn: Conn, runner: Conn
) -> None:
    """alice asks to accept T1's drifted 900; the next reading is back at
    1000, in range. bob's acknowledgement takes that reading as the
    baseline: accepting it accepts nothing more, and the account verifies
    OK from there (not a drift of +100 from the 900 both were shown)."""
    at = clocks(conn, runner)
    read(runner, BASE)
    verify(runner)
    confirm_baselines(conn)
    at(10)
    read(runner, {**BASE, chain("local-a", T1): "900"})
    assert verify(runner)[chain("local-a", T1)][0] == "DRIFT"
    alert = conn.execute("SELECT alert_id FROM drift_alerts WHERE actual = 900").fetchone()[0]
    with as_person(conn, "alice"):
        procs.acknowledge_drift_alert(alert, "a transient read").one(conn)
    at(20)
    read(runner, BASE)
    assert verify(runner)[chain("local-a", T1)][0] == "OK"
    with as_person(conn, "bob"):
        assert procs.acknowledge_drift_alert(alert, "back in range").one(conn) == "ACKNOWLEDGED"
    at(30)
    read(runner, BASE)
    assert verify(runner)[chain("local-a", T1)][0] == "OK"
    assert conn.execute(
        "SELECT count(*) FROM drift_alerts WHERE alert_state = 'OPEN'"
    ).fetchone() == (0,)


def test_a_baseline_is_one_runners_word_until_an_operator_confirms_it(
    conn: Conn, runner: Conn
) -> None:
    """A runner login that invents an account's first reading sets its
    baseline, but not a verdict: a drift from an unconfirmed baseline raises
    the alert and trips no breaker. An operator confirms the baseline they
    checked (naming its snapshot: a baseline changed since is refused, QT083);
    a runner cannot; from then on the account's drifts trip its scopes."""
    at = clocks(conn, runner)
    read(runner, {**BASE, chain("local-a", T1): "1000000"})  # invented
    verify(runner)
    at(10)
    paid = run(conn, [transfer("pay", T1, T2)], "paid", "100")["pay"]
    at(20)
    land(conn, paid)
    at(30)
    read(runner, {**BASE, chain("local-a", T1): "900", chain("local-a", T2): "100"})
    assert verify(runner)[chain("local-a", T1)][0] == "DRIFT"
    [breakers] = conn.execute(
        "SELECT breakers FROM drift_alerts WHERE account_key = 'local-a'"
    ).fetchone()  # type: ignore[misc]
    assert breakers == []
    assert conn.execute("SELECT count(*) FROM breakers").fetchone() == (0,)

    key = ("chain", "local-a", T2, "USDC")
    [base] = conn.execute(
        "SELECT baseline_snapshot_id FROM balance_status WHERE account_key = %s AND address = %s",
        key[1:3],
    ).fetchone()  # type: ignore[misc]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runner.execute("SELECT confirm_balance_baseline(%s, %s, %s, %s, %s, 'mine')", (*key, base))
    before = fingerprint(conn)
    with as_person(conn, "alice"), pytest.raises(psycopg.Error) as stale:
        procs.confirm_balance_baseline(*key, base + 1000, "what I saw").one(conn)
    assert stale.value.sqlstate == "QT083"
    assert fingerprint(conn) == before
    with as_person(conn, "alice"):
        assert procs.confirm_balance_baseline(*key, base, "explorer").one(conn) == "alice"
    with as_person(conn, "bob"):  # again: the first confirmation stands
        assert procs.confirm_balance_baseline(*key, base, "explorer").one(conn) == "alice"
    at(40)
    read(runner, {**BASE, chain("local-a", T1): "900", chain("local-a", T2): "40"})
    assert verify(runner)[chain("local-a", T2)][0] == "DRIFT"
    [breakers] = conn.execute(
        "SELECT breakers FROM drift_alerts WHERE account_key = 'local-a' AND address = %s", (T2,)
    ).fetchone()  # type: ignore[misc]
    assert breakers == ["lane:evm", "venue:evm_transfer"]


def counts(conn: Conn) -> list[int]:
    return [
        conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
        for t in BALANCE_TABLES
    ]


def test_bad_reports_are_refused_and_write_nothing(db: Any, conn: Conn, runner: Conn) -> None:
    accounts = procs.begin_balance_read().all(runner)
    read_id = accounts[0].read_id
    assert [(a.account_kind, a.account_key, a.address) for a in accounts] == [
        chain("local-a", T1), chain("local-a", T2), chain("local-b", T1), chain("local-b", T2),
        VENUE,
    ]  # fmt: skip
    assert accounts[0].token_address == TOKEN_A and accounts[0].rpc_url_env == "QTG_RPC_A"
    good = ("chain", "local-a", T1, "USDC", Decimal("1"), 7, None)

    def report(*row: Any, read: int = read_id, on: Conn = runner) -> None:
        kind, key, address, asset, balance, block, error = row
        procs.record_balance_snapshots(
            read, [kind], [key], [address], [asset], [balance], [block], [error]
        ).one(on)

    cases: list[tuple[str, tuple[Any, ...]]] = [
        ("QT005", (*good[:4], Decimal("NaN"), 7, None)),
        ("QT005", (*good[:4], Decimal("Infinity"), 7, None)),
        ("QT005", (*good[:4], Decimal("-1"), 7, None)),
        ("QT005", (*good[:4], Decimal("1e16"), 7, None)),
        ("QT005", (*good[:4], None, None, "x" * 5000)),
        ("QT014", ("chain", "local-a", "0x" + "99" * 20, "USDC", Decimal(1), 7, None)),
        ("QT014", ("chain", "nowhere", T1, "USDC", Decimal(1), 7, None)),
        ("QT014", ("chain", "local-a", T1, "WETH", Decimal(1), 7, None)),
        ("QT014", ("venue", "kraken", "FUND", "USDC", Decimal(1), None, None)),
        ("QT014", ("chain", "local-a", "0x" + T1[2:].upper(), "USDC", Decimal(1), 7, None)),
        ("QT002", ("moon", "local-a", T1, "USDC", Decimal(1), 7, None)),
        ("QT002", (*good[:4], Decimal(1), 7, "and an error")),
        ("QT002", (*good[:4], None, None, None)),
        ("QT002", (*good[:4], Decimal(1), None, None)),
        ("QT002", (*good[:4], Decimal(1), -1, None)),
        ("QT002", ("venue", "bybit", "FUND", "USDC", Decimal(1), 7, None)),
    ]
    before = counts(conn)
    for code, row in cases:
        with pytest.raises(psycopg.Error) as err:
            report(*row)
        assert err.value.sqlstate == code, (row, err.value)
        assert counts(conn) == before
    with pytest.raises(psycopg.Error) as err:
        procs.record_balance_snapshots(read_id, ["chain"], [], [], [], [], [], []).one(runner)
    assert err.value.sqlstate == "QT002"
    with pytest.raises(psycopg.Error) as err:
        procs.record_balance_snapshots(
            read_id,
            *[[v, v] for v in good],  # type: ignore[arg-type]
        ).one(runner)
    assert err.value.sqlstate == "QT002" and "twice" in str(err.value)

    # another runner login cannot record this read, nor an unknown one
    other = person(db, "runner2", "qtg_testnet_runner")
    for on, rid in ((other, read_id), (runner, 10**9)):
        with pytest.raises(psycopg.Error) as err:
            report(*good, read=rid, on=on)
        assert err.value.sqlstate == "QT080"
    assert counts(conn) == before

    # the read recorded once; a second time is refused
    report(*good)
    assert counts(conn) == [before[0], before[1] + 1, *before[2:]]
    with pytest.raises(psycopg.Error) as err:
        report(*good)
    assert err.value.sqlstate == "QT080"


def test_a_runner_of_another_network_cannot_read_or_record_here(db: Any, world: None) -> None:
    mainnet = db.connect(db.runner_dsn("mainnet"))
    for call in ("testnet.begin_balance_read()", "testnet.verify_drift('w')"):
        with pytest.raises(psycopg.Error) as err:
            mainnet.execute(f"SELECT * FROM {call}")
        assert err.value.sqlstate == "42501"
    with pytest.raises(psycopg.Error) as err:
        mainnet.execute(
            "SELECT testnet.record_balance_snapshots(1, '{chain}', '{local-a}', %s, '{USDC}',"
            " '{1}', '{7}', '{NULL}')",
            ([T1],),
        )
    assert err.value.sqlstate == "42501"
    # and its own network's procedures know nothing of testnet's accounts
    accounts = mainnet.execute("SELECT count(*) FROM mainnet.begin_balance_read()").fetchone()
    assert accounts == (0,)


def test_the_status_shows_each_account_read_once_with_its_latest_balance(
    conn: Conn, runner: Conn
) -> None:
    at = clocks(conn, runner)
    read(runner, BASE)
    at(60)
    read(runner, {**BASE, chain("local-b", T2): "350"})
    at(120)
    read(runner, {VENUE: "500"})  # the chains down
    rows = conn.execute(
        "SELECT account_kind, account_key, address, balance, latest_read_error FROM balance_status"
    ).fetchall()
    latest = {**BASE, chain("local-b", T2): "350"}
    assert rows == [
        (*account, Decimal(str(latest[account])), None if account == VENUE else "down")
        for account in sorted(BASE)
    ]


# -- retention (migration 0036_balance_snapshot_retention) ---------------------------------

DAY = 86_400


def kept(conn: Conn) -> set[tuple[int, str, str]]:
    """The snapshots left: (seconds after T0 of their read, account key, address)."""
    rows = conn.execute(
        "SELECT extract(epoch FROM s.read_started_at - %s)::integer, s.account_key, s.address"
        " FROM balance_snapshots s",
        (T0,),
    ).fetchall()
    return {(r[0], r[1], r[2]) for r in rows}


def test_old_verified_snapshots_are_pruned_but_baselines_alerts_and_the_newest_stay(
    conn: Conn, runner: Conn
) -> None:
    at = clocks(conn, runner)
    accounts = [(a[1], a[2]) for a in BASE]
    at(0)
    read(runner, BASE)  # the baselines
    for t in (60, 120):
        at(t)
        read(runner, {**BASE, VENUE: None} if t == 60 else BASE)  # the venue down at 60
    at(180)
    read(runner, {**BASE, chain("local-a", T1): "900"})  # 100 gone: an alert names it
    at(190)
    verify(runner)
    at(240)
    read(runner, BASE)
    assert verify(runner)[VENUE][0] == "OK"
    at(250)
    read(runner, BASE)  # not verified yet
    status = conn.execute("SELECT * FROM balance_status ORDER BY 1, 2, 3").fetchall()
    everything = kept(conn)
    assert len(everything) == 6 * len(BASE)

    at(DAY + 240)  # the default keeps 400 days: nothing is old enough
    assert procs.prune_balance_snapshots("verify_drift_worker@test").one(runner) == 0
    procs.set_balance_settings(snapshot_keep_days=0).one(conn)
    at(5 * 400 * DAY)
    assert procs.prune_balance_snapshots("verify_drift_worker@test").one(runner) == 0  # 0: all
    assert kept(conn) == everything

    procs.set_balance_settings(snapshot_keep_days=1).one(conn)
    at(DAY + 200)  # the reads up to 180 are a day old, the one at 240 is not
    assert procs.prune_balance_snapshots("verify_drift_worker@test", 3).one(runner) == 3
    pruned = procs.prune_balance_snapshots("verify_drift_worker@test").one(runner)
    assert kept(conn) == (
        {(0, key, address) for key, address in accounts}  # the baselines
        | {(180, "local-a", T1)}  # the alert's
        | {(t, key, address) for t in (240, 250) for key, address in accounts}  # not old yet
    )
    assert 3 + pruned == len(everything) - len(kept(conn))
    reads = conn.execute(
        "SELECT extract(epoch FROM started_at - %s)::integer FROM balance_reads ORDER BY 1", (T0,)
    ).fetchall()
    assert [r[0] for r in reads] == [0, 180, 240, 250]  # 60's and 120's had nothing left
    # the dashboard shows what it showed: each account's latest read and balance
    assert conn.execute("SELECT * FROM balance_status ORDER BY 1, 2, 3").fetchall() == status
    audited = conn.execute(
        "SELECT actor, detail FROM audit_outbox WHERE action = 'snapshots_pruned' ORDER BY id"
    ).fetchall()
    assert [(a[0], a[1]["snapshots"], a[1]["keep_days"]) for a in audited] == [
        ("verify_drift_worker@test", 3, 1),
        ("verify_drift_worker@test", pruned, 1),
    ]
    assert sum(a[1]["reads"] for a in audited) == 2

    # a week later the unverified ones stay, newest or not; verified, only the
    # newest of each account does
    at(260)
    read(runner, BASE)
    at(8 * DAY)
    procs.prune_balance_snapshots("verify_drift_worker@test").one(runner)
    assert {k for k in kept(conn) if k[0] >= 240} == {
        (t, key, address) for t in (250, 260) for key, address in accounts
    }
    verify(runner)
    at(9 * DAY)
    procs.prune_balance_snapshots("verify_drift_worker@test").one(runner)
    assert {k for k in kept(conn) if k[0] >= 240} == {
        (260, key, address) for key, address in accounts
    }


def test_only_the_admin_sets_how_long_snapshots_are_kept(conn: Conn, runner: Conn) -> None:
    for bad in (-1, 36_501):
        with pytest.raises(psycopg.Error) as err:
            procs.set_balance_settings(snapshot_keep_days=bad).one(conn)
        assert err.value.sqlstate == "QT005"
    with pytest.raises(psycopg.Error) as err:
        procs.set_balance_settings(snapshot_keep_days=0).one(runner)
    assert err.value.sqlstate == "42501"
    assert conn.execute("SELECT snapshot_keep_days FROM balance_settings").fetchone() == (400,)


def test_a_landing_still_uncommitted_when_a_fence_was_drawn_is_summed_once_committed(
    db: Any, conn: Conn, runner: Conn
) -> None:
    """An anchor moves over what was decided before its fence only once every
    transaction that ran when the fence was drawn has ended: a transfer landed
    at 20 s by a transaction still open at 30 s and 35 s is summed when it
    commits, never skipped (a skipped landing is a drift that is not there)."""
    at = clocks(conn, runner)
    read(runner, BASE)
    verify(runner)
    at(10)
    pay = run(conn, [transfer("pay", T1, T2)], "late", "100")["pay"]
    late = bind(db.connect(autocommit=False))
    set_clock(late, 20)
    procs.complete_submit(pay, CLAIMS.pop(pay), f"0x{pay:064x}", settled=True).one(late)

    at(30)
    read(runner, BASE)
    assert verify(runner)[chain("local-a", T1)] == ("OK", Decimal("900"), Decimal("1000"))
    at(35)  # the fence drawn at 30 waits for the open transaction
    read(runner, BASE)
    assert verify(runner)[chain("local-a", T1)][0] == "OK"
    late.commit()

    at(40)
    landed = {**BASE, chain("local-a", T1): "900", chain("local-a", T2): "100"}
    read(runner, landed)
    assert verify(runner)[chain("local-a", T1)] == ("OK", Decimal("900"), Decimal("900"))
    at(50)
    read(runner, landed)
    assert {v[0] for v in verify(runner).values()} == {"OK"}
    anchor = conn.execute(
        "SELECT through_at > %s, low, high FROM balance_anchors WHERE address = %s"
        " AND account_key = 'local-a'",
        (T0 + timedelta(seconds=20), T1),
    ).fetchone()
    assert anchor == (True, Decimal("-100"), Decimal("-100"))


def test_a_transaction_in_another_database_does_not_hold_the_anchors(
    db: Any, conn: Conn, runner: Conn
) -> None:
    """The fence waits for the transactions of this database alone: one open in
    another database of the cluster cannot land a transfer here, and waiting
    for it would leave every round reading the whole history since the baseline
    for as long as a neighbour kept a transaction open."""
    neighbour = db.connect(dsn_for(db.dsn, dbname="postgres"), autocommit=False)
    neighbour.execute("SELECT 1")
    at = clocks(conn, runner)
    read(runner, BASE)
    verify(runner)
    for seconds in (10, 20):  # the first round draws the fence at 9 s, the second moves over it
        at(seconds)
        read(runner, BASE)
        verify(runner)
    through = conn.execute(
        "SELECT DISTINCT through_at FROM balance_anchors WHERE account_key = 'local-a'"
    ).fetchall()
    assert through == [(T0 + timedelta(seconds=9),)]
    neighbour.rollback()


def test_a_long_history_is_summed_once_not_read_on_every_round(
    db: Any, conn: Conn, runner: Conn
) -> None:
    """verify_drift (every 10 s) read every side-effect node since the account's
    baseline, which moves only when two operators re-baseline it: 1.85 s a round
    at 100,000 transfers, past the runner's statement timeout at a few million.
    Once the anchors have moved over them, a round reads what is recent or in
    flight."""
    history = 5_000
    at = clocks(conn, runner)
    rich = {**BASE, chain("local-a", T1): "100000"}
    read(runner, rich)
    verify(runner)
    at(10)
    pay = run(conn, [transfer("pay", T1, T2)], "first", "1")["pay"]
    at(20)
    land(conn, pay)
    plant_history(
        conn,
        pay,
        history,
        """INSERT INTO node_intents (node_id, claim_token, idempotency_key, claimed_by,
                                     intent_state, created_at, finished_at)
           SELECT nodes.id, 1, 'history-' || nodes.id, 'w1', 'SUBMITTED', i.created_at,
                  i.finished_at
             FROM nodes, node_intents i
            WHERE i.node_id = %(template_id)s""",
    )
    moved = {
        **rich,
        chain("local-a", T1): str(100000 - history - 1),
        chain("local-a", T2): str(history + 1),
    }
    for seconds in (30, 40):  # the first round draws the fence, the second sums the history
        at(seconds)
        read(runner, moved)
        assert {v[0] for v in verify(runner).values()} == {"OK"}

    at(50)
    read(runner, moved)
    call = "SELECT * FROM verify_drift('verify_drift_worker@test', 100, 1)"
    nodes = explained(db.dsn, call, analyze=True, at=iso_at(50))
    assert rows_read(nodes, "movement_request_nodes") <= 100
    assert rows_read(nodes, "node_intents") <= 100
    assert {v[0] for v in verify(runner).values()} == {"OK"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_anchored_ranges_are_those_from_the_baseline_over_random_histories(
    db: Any, conn: Conn, runner: Conn, seed: int
) -> None:
    """Transfers between T1 and T2 and withdrawals from the venue, claimed,
    landed or failed at random times, some landed by a transaction left open
    over a few rounds, and a read and a round every few steps with the anchors
    a second behind: every range (``verify`` recomputes each from the baseline)
    is what the baseline alone gives, and the balances that follow the landings
    raise no alert."""
    rng = random.Random(seed)
    at = clocks(conn, runner)
    held: list[tuple[Conn, int, dict[Account, Decimal]]] = []
    balances = {account: Decimal(b or "0") for account, b in BASE.items()}
    balances[chain("local-a", T1)] = Decimal(10_000)
    balances[chain("local-a", T2)] = Decimal(10_000)
    read(runner, {a: str(b) for a, b in balances.items()})
    verify(runner)
    claimed: dict[int, dict[Account, Decimal]] = {}
    now = 0
    for step in range(40):
        now += rng.randint(1, 4)
        at(now)
        move = rng.random()
        if move < 0.3:
            amount = rng.randint(1, 50)
            src, dst = rng.choice([(T1, T2), (T2, T1)])
            pay = run(conn, [transfer("pay", src, dst)], f"t{step}", str(amount))["pay"]
            claimed[pay] = {chain("local-a", src): -amount, chain("local-a", dst): amount}
        elif move < 0.4:
            amount = rng.randint(1, 20)
            node_id = run(
                conn,
                [node("w", (), executor="bybit_withdraw", lane="bybit-withdraw", venue="bybit",
                      chain="local-a", coin="USDC", to=T1)],
                f"w{step}", str(amount),
            )["w"]  # fmt: skip
            claimed[node_id] = {VENUE: -amount - 1, chain("local-a", T1): amount}
        elif move < 0.7 and claimed:
            node_id = rng.choice(sorted(claimed))
            change = claimed.pop(node_id)
            if rng.random() < 0.3:  # landed by a transaction left open for a while
                late = bind(db.connect(autocommit=False))
                set_clock(late, now)
                landing(conn, node_id).one(late)
                held.append((late, rng.randint(1, 3), change))
            else:
                land(conn, node_id)
                for account, delta in change.items():
                    balances[account] += delta
        elif move < 0.8 and claimed:
            node_id = rng.choice(sorted(claimed))
            claimed.pop(node_id)
            procs.fail_submit(node_id, CLAIMS.pop(node_id), "refused", False).one(conn)
        else:
            read(runner, {a: str(b) for a, b in balances.items()})
            assert {v[0] for v in verify(runner).values()} == {"OK"}
            for i, (late, rounds, change) in enumerate(held):
                held[i] = (late, rounds - 1, change)
            for late, _, change in [h for h in held if h[1] <= 0]:
                late.commit()
                for account, delta in change.items():
                    balances[account] += delta
            held = [h for h in held if h[1] > 0]
    for late, _, change in held:
        late.commit()
        for account, delta in change.items():
            balances[account] += delta
    for _ in range(2):
        now += 5
        at(now)
        read(runner, {a: str(b) for a, b in balances.items()})
        assert {v[0] for v in verify(runner).values()} == {"OK"}
    moved = conn.execute("SELECT count(*) FROM balance_anchors WHERE low <> 0").fetchone()
    assert moved is not None and moved[0] > 0


def test_a_read_recorded_long_after_it_began_is_counted_from_the_baseline(
    conn: Conn, runner: Conn
) -> None:
    """A read that began before its account's anchor (here: began at 20 s,
    recorded at 60 s, the anchor at 49 s) sees a landing of 25 s as perhaps in
    the balance, not as certain: its range comes from the baseline."""
    at = clocks(conn, runner)
    read(runner, BASE)
    verify(runner)
    at(10)
    pay = run(conn, [transfer("pay", T1, T2)], "pay", "100")["pay"]
    at(20)
    begun = procs.begin_balance_read().all(runner)
    at(25)
    land(conn, pay)
    landed = {**BASE, chain("local-a", T1): "900", chain("local-a", T2): "100"}
    for seconds in (40, 50):
        at(seconds)
        read(runner, landed)
        assert verify(runner)[chain("local-a", T1)] == ("OK", Decimal("900"), Decimal("900"))
    at(60)
    record(runner, begun, BASE)
    assert verify(runner)[chain("local-a", T1)] == ("OK", Decimal("900"), Decimal("1000"))
    through = conn.execute(
        "SELECT through_at FROM balance_anchors WHERE account_key = 'local-a' AND address = %s",
        (T1,),
    ).fetchone()
    assert through == (T0 + timedelta(seconds=49),)


@pytest.mark.slow
def test_anchors_keep_up_with_landings_committed_at_real_times(
    db: Any, conn: Conn, runner: Conn
) -> None:
    """The real clock, no pin: two writers land 100 transfers, each committed a
    moment after its stamp (four of them more than a second after), while
    reads and rounds run beside them, the anchors a second behind. Each landing
    moves the chain first (as the transaction is mined before the engine
    records it), so every read is explained: a landing the anchors missed
    would leave every later range off by its amount. (The ranges are not
    compared with the baseline's here: computed after the round, that sees
    landings committed since.) The anchors end with all 100 summed, and the
    last range is exact."""

    def check(outcome: str = "OK") -> dict[Account, tuple[str, Decimal | None, Decimal | None]]:
        rows = procs.verify_drift("verify_drift_worker@test", anchor_lag_seconds=1).all(runner)
        assert {r.outcome for r in rows} == {outcome}, rows
        return {
            (r.account_kind, r.account_key, r.address): (r.outcome, r.expected_low, r.expected_high)
            for r in rows
        }

    for c in (conn, runner):
        c.execute("RESET qtg.now")
    read(runner, BASE)
    check("BASELINE")
    ids = [run(conn, [transfer("pay", T1, T2)], f"r{i}", "1")["pay"] for i in range(100)]
    secrets = {node_id: CLAIMS.pop(node_id) for node_id in ids}
    landed = [0]
    lock = threading.Lock()

    def writer(mine: list[int], seed: int) -> None:
        rng = random.Random(seed)
        w = bind(db.connect(autocommit=False))
        for position, node_id in enumerate(mine):
            with lock:
                landed[0] += 1  # the chain first
            ref = f"0x{node_id:064x}"
            call = procs.complete_submit(node_id, secrets[node_id], ref, settled=True)
            call.one(w)
            # the transaction held open a moment, and now and then past the anchors' lag
            time.sleep(1.3 if position % 25 == 12 else rng.random() * 0.02)
            w.commit()

    threads = [threading.Thread(target=writer, args=(ids[i::2], i)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    rounds = 0
    while True:
        accounts = procs.begin_balance_read().all(runner)
        with lock:
            n = landed[0]
        moved = {**BASE, chain("local-a", T1): str(1000 - n), chain("local-a", T2): str(n)}
        record(runner, accounts, moved)
        check()
        rounds += 1
        summed = conn.execute(
            "SELECT -low FROM balance_anchors WHERE account_key = 'local-a' AND address = %s", (T1,)
        ).fetchone()
        if not any(t.is_alive() for t in threads) and summed == (100,):
            break
        assert time.monotonic() < deadline, (rounds, summed)
    for t in threads:
        t.join()
    read(runner, {**BASE, chain("local-a", T1): "900", chain("local-a", T2): "100"})
    last = check()
    assert last[chain("local-a", T1)] == ("OK", Decimal("900"), Decimal("900"))
    assert last[chain("local-a", T2)] == ("OK", Decimal("100"), Decimal("100"))
