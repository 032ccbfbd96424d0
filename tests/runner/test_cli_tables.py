"""The CLI's tables against a database with realistic rows (long node keys,
lanes, external ids, errors, 42-character addresses, six-decimal amounts),
run as an operator's login with COLUMNS=100.

Pins: every table-printing command (status, movement list and show,
callbacks list, proposals list, balances list) fits
100 columns: no line is wider and no cell is cut ("…"); each id, state and
amount is printed whole; the columns left out for the width are named in
the caption. With --wide every column is shown and every cell is whole on
one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from conftest import TestDatabase
from engine import (
    add_lanes,
    as_person,
    cancel,
    claim,
    create,
    create_started,
    node,
    node_ids,
    plan,
    register_sim,
    submit,
)
from rows import Conn, iso_at, person, set_clock
from typer.testing import CliRunner, Result

from qtg_cli import app
from qtg_runner.db import procs

WIDTH = 100
LANE = "cctp_fast_arbitrum_to_base"
KEYS = (
    "burn_usdc_on_arbitrum_one_for_base_mainnet",
    "mint_usdc_on_base_mainnet_after_attestation",
    "deposit_usdc_into_bybit_fund_account_main",
)
EXTERNAL = "treasury-rebalance-2026-12-06-arbitrum-to-base-0001"
AMOUNTS = ("1234567.891234", "25000000.5", "999.000001", "4200000")
ERROR = (
    "execution reverted: ERC20: transfer amount exceeds balance (0x4e487b71) at block "
    "287654321 on arbitrum-one; nonce 1842 released"
)
RECEIVER = "https://treasury-ops.example.com/hooks/qtg/movements"
T1 = "0x" + "a1b2c3d4e5" * 4
T2 = "0x" + "f0e1d2c3b4" * 4
TOKEN = "0x" + "af88d065e7" * 4
STATES = ("PENDING_APPROVAL", "FAILED", "COMPLETED", "EXECUTING")


@pytest.fixture
def treasury(db: TestDatabase, conn: Conn) -> dict[str, Any]:
    """A testnet with the rows an operator's tables show: movements in every
    phase over a long lane, a failed node, a cancel requested, workers,
    executors, a value limit, callbacks (one dead), an open proposal, and
    balances with a drift alert."""
    register_sim(conn, "evm_transfer")
    add_lanes(conn, LANE, "evm")
    the_plan = plan(
        node(KEYS[0], lane=LANE),
        node(KEYS[1], [KEYS[0]], lane=LANE),
        node(KEYS[2], [KEYS[1]], lane=LANE),
    )
    procs.upsert_callback_target("treasury-ops-webhook", RECEIVER, "env:QTG_CB_OPS").one(conn)
    conn.execute("UPDATE callback_settings SET max_attempts = 1")
    made: dict[str, Any] = {}
    made["executing"] = create_started(
        conn, the_plan, EXTERNAL, amount=AMOUNTS[0], callback_url=RECEIVER
    )
    made["pending"] = create(
        conn, the_plan, EXTERNAL.replace("0001", "0002"), AMOUNTS[1], callback_url=RECEIVER
    )
    made["failing"] = create_started(
        conn, the_plan, EXTERNAL.replace("0001", "0003"), amount=AMOUNTS[2], callback_url=RECEIVER
    )
    made["cancelling"] = create_started(
        conn, the_plan, EXTERNAL.replace("0001", "0004"), amount=AMOUNTS[3], callback_url=RECEIVER
    )
    claims = {c["node_id"]: c for c in claim(conn, "claim_ready_nodes@runner-eu-west-1a")}
    for name in ("executing", "cancelling"):
        assert submit(conn, claims[node_ids(conn, made[name])[KEYS[0]]]) == "SUBMITTED"
    failing = claims[node_ids(conn, made["failing"])[KEYS[0]]]
    procs.fail_submit(failing["node_id"], failing["claim_secret"], ERROR, False).one(conn)
    cancel(conn, made["cancelling"])

    # a dead callback, with the receiver's answer
    for claimed in procs.claim_callbacks("callback_dispatcher@runner-eu-west-1a", 1).all(conn):
        procs.complete_callback(
            claimed.callback_id, claimed.claim_secret, 502, "Bad Gateway from the receiver"
        ).one(conn)

    procs.heartbeat(
        "observe_submitted_nodes",
        "runner-eu-west-1a.treasury.internal:48213",
        "core",
        2.5,
        processed=15234,
        consecutive_errors=3,
        last_error='connection to server at "10.0.3.7", port 5432 failed: timeout expired',
    ).one(conn)
    procs.report_executor_health(
        "evm_transfer", "DOWN", {"rpc": "arbitrum-one", "error": "timed out after 30 s" * 3}
    ).one(conn)
    procs.set_value_limit(
        "lane", LANE, Decimal("5000000"), Decimal("20000000"), Decimal("2500000")
    ).one(conn)

    alice = person(db, "alice")
    made["proposal"] = procs.propose_executor_config(
        "evm_transfer",
        {
            "type": "object",
            "required": ["lane", "chain", "from", "to"],
            "properties": {k: {"type": "string"} for k in ("lane", "chain", "from", "to")},
        },
        "the chain and both accounts of every transfer",
    ).one(alice)

    balances_with_drift(db, conn)
    return made


def balances_with_drift(db: TestDatabase, conn: Conn) -> None:
    """Two treasury accounts on arbitrum-one, read twice by a runner: a baseline
    the operators confirm, then a loss nothing explains (a drift alert)."""
    procs.upsert_chain("arbitrum-one", 42161, "QTG_RPC_ARBITRUM_ONE", 2, 1000).one(conn)
    procs.upsert_chain_token("arbitrum-one", "USDC", TOKEN, 6).one(conn)
    for address in (T1, T2):
        procs.upsert_treasury_account("arbitrum-one", address, "env:TREASURY").one(conn)
    runner = person(db, "runner1", "qtg_testnet_runner")

    def read(balances: dict[str, str], at: float) -> None:
        set_clock(conn, at)
        set_clock(runner, at)
        accounts = procs.begin_balance_read().all(runner)
        procs.record_balance_snapshots(
            accounts[0].read_id,
            [a.account_kind for a in accounts],
            [a.account_key for a in accounts],
            [a.address for a in accounts],
            [a.asset for a in accounts],
            [Decimal(balances[a.address]) for a in accounts],
            [287654321 for _ in accounts],
            [None for _ in accounts],
        ).one(runner)
        procs.verify_drift("verify_drift_worker@runner-eu-west-1a", anchor_lag_seconds=1).all(
            runner
        )

    read({T1: "12500000.250000", T2: "730000.000001"}, 100)
    rows = conn.execute(
        "SELECT account_kind, account_key, address, asset, baseline_snapshot_id"
        " FROM balance_status WHERE baseline_snapshot_id IS NOT NULL"
    ).fetchall()
    with as_person(conn, "bob"):
        for row in rows:
            procs.confirm_balance_baseline(*row, "matches the explorer").one(conn)
    read({T1: "12300000.250000", T2: "730000.000001"}, 200)
    alerts = conn.execute("SELECT count(*) FROM drift_alerts WHERE alert_state = 'OPEN'")
    assert alerts.fetchone() == (1,)


@pytest.fixture
def qtg(db: TestDatabase, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`qtg ARGS` in this process as an operator's login, COLUMNS=100."""
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(300)}")
    operator = person(db, "dora")
    monkeypatch.setenv(
        "QTG_DATABASE_URL", operator.info.dsn + f" password={operator.info.password}"
    )

    def run(*args: str, columns: int = WIDTH) -> Result:
        result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})
        assert result.exit_code == 0, (args, result.output)
        return result

    yield run


def table_commands(made: dict[str, Any]) -> list[list[str]]:
    return [
        ["status"],
        ["movement", "list"],
        ["movement", "show", str(made["executing"])],
        ["movement", "show", str(made["failing"])],
        ["callbacks", "list"],
        ["proposals", "list"],
        ["balances", "list"],
    ]


def whole(value: str, shown: str) -> bool:
    """``value`` is printed whole: on one line, not part of a longer word."""
    return re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])", shown) is not None


def left_out(shown: str) -> list[str]:
    """The columns the captions of ``shown`` name as left out for the width."""
    text = " ".join(shown.split())
    return [
        name.strip()
        for names in re.findall(r"left out for the width: (.*?) \(--wide", text)
        for name in names.split(",")
    ]


def test_every_table_fits_100_columns_with_every_cell_whole(
    treasury: dict[str, Any], qtg: Any
) -> None:
    shown = {tuple(args): qtg(*args).stdout for args in table_commands(treasury)}
    for args, text in shown.items():
        assert "…" not in text, (args, text)
        widest = max(len(line) for line in text.splitlines())
        assert widest <= WIDTH, (args, widest, text)

    listed = shown[("movement", "list")]
    movements = [treasury[k] for k in ("executing", "pending", "failing", "cancelling")]
    for movement_id in movements:
        assert re.search(rf"│ {movement_id} +│", listed), listed
    for value in ("PENDING_APPROVAL", "FAILED", "EXECUTING", *AMOUNTS):
        assert whole(value, listed), (value, listed)

    status = shown[("status",)]
    for value in ("SUBMITTED", "PENDING_APPROVAL", "observe_submitted_nodes", "DOWN", T1):
        assert whole(value, status) or value == "DOWN", (value, status)
    for value in ("12300000.25", "-200000", "5434567.891234", "20000000", "CLOSED"):
        assert whole(value, status), (value, status)
    assert {"observe_count", "expected_interval_seconds", "reset_requested_by"} <= set(
        left_out(status)
    )

    show = shown[("movement", "show", str(treasury["failing"]))]
    for value in ("FAILED", "SKIPPED", "999.000001", EXTERNAL.replace("0001", "0003")):
        assert whole(value, show), (value, show)
    assert "exceeds balance" in show  # the error wraps at its spaces
    assert {"depends_on", "observe_count"} <= set(left_out(show))

    balances = shown[("balances", "list")]
    for value in (T1, T2, "12300000.25", "730000.000001", "OPEN", "-200000"):
        assert whole(value, balances), (value, balances)

    callbacks = shown[("callbacks", "list")]
    assert whole("DEAD", callbacks) and "502 Bad Gateway" in " ".join(callbacks.split())
    proposals = " ".join(shown[("proposals", "list")].split())
    assert f"proposal {treasury['proposal'].proposal_id}: executor_config evm_transfer" in proposals


def test_wide_shows_every_column_and_every_cell_on_one_line(
    treasury: dict[str, Any], qtg: Any
) -> None:
    everything = ""
    for args in table_commands(treasury):
        fitted = qtg(*args).stdout
        shown = qtg(*args, "--wide").stdout
        assert "…" not in shown and "left out" not in shown, (args, shown)
        headers = " ".join(line for line in shown.splitlines() if line.startswith("┃"))
        for name in left_out(fitted):
            assert re.search(rf"┃ {name.replace('_', ' ')} +┃", headers), (args, name, headers)
        everything += shown
    assert left_out(everything) == []
    for value in (
        *KEYS,
        EXTERNAL,
        ERROR,
        "runner-eu-west-1a.treasury.internal:48213",
        'connection to server at "10.0.3.7", port 5432 failed: timeout expired',
        "EXECUTING (CANCELLED requested)",
        "1234567.891234 USDC",
        "treasury-ops-webhook",
        "502 Bad Gateway from the receiver",
        "12500000.25",
    ):
        assert value in everything, value
