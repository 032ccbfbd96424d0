"""What the approver reads before approving: each step's route (where its money
goes: its chain, from, to, token), on `qtg movement show`, on the API's nodes
and on the operator page's DAG, as the node's config names it. Three parallel
transfers of one movement read as three routes, each paying the amount."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import TestDatabase
from engine import create
from evm_rows import register_transfers, transfer_plan
from rows import Conn, person
from typer.testing import CliRunner

from qtg_cli import app

CHAIN, CHAIN_ID = "test-a", 31401
SENDER, TOKEN = "0x" + "a1" * 20, "0x" + "70" * 20
RECIPIENT = "0x" + "d4" * 20


def test_each_step_shows_where_its_money_goes(
    db: TestDatabase, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_transfers(conn, CHAIN, CHAIN_ID, SENDER, TOKEN, RECIPIENT)
    movement_id = create(conn, transfer_plan(CHAIN, SENDER, RECIPIENT, "t1", "t2", "t3"), "m1")
    routes = conn.execute(
        "SELECT node_key, route FROM movement_nodes WHERE movement_id = %s ORDER BY node_key",
        (movement_id,),
    ).fetchall()
    expected = f"chain {CHAIN}, from {SENDER}, to {RECIPIENT}"
    assert [(k, r.startswith(expected)) for k, r in routes] == [
        ("t1", True),
        ("t2", True),
        ("t3", True),
    ]

    operator = person(db, "dora")
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv(
        "QTG_DATABASE_URL", operator.info.dsn + f" password={operator.info.password}"
    )
    shown: Any = CliRunner().invoke(app, ["movement", "show", str(movement_id)])
    assert shown.exit_code == 0, shown.output
    steps = [line for line in shown.stdout.splitlines() if line.startswith("step ")]
    assert steps == [f"step {key} (evm_transfer): {route}" for key, route in sorted(routes)], (
        shown.stdout
    )
