"""`qtg callbacks list|replay` as an operator's login: list shows the deliveries
(all, --dead, --state), replay sends a dead callback again (exit 0, audited
with the login), refuses a callback that is not dead (exit 2, QT071) and a bad
--state (exit 2)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from conftest import TestDatabase
from engine import as_person, node, plan
from rows import Conn, iso_at, person
from typer.testing import CliRunner

from qtg_cli import app
from qtg_runner.db import procs


@pytest.fixture
def cli(db: TestDatabase, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(0)}")
    operator = person(db, "dora")

    def run(*args: str) -> Any:
        monkeypatch.setenv(
            "QTG_DATABASE_URL", operator.info.dsn + f" password={operator.info.password}"
        )
        return CliRunner().invoke(app, ["callbacks", *args])

    return run


def test_list_and_replay(conn: Conn, cli: Any) -> None:
    url = "https://hooks.example.test/qtg"
    procs.upsert_callback_target("ops", url, "env:QTG_CB_OPS").one(conn)
    conn.execute("UPDATE callback_settings SET max_attempts = 1")
    for external_id, callback_url in (("m1", url), ("m2", "https://stray.test/x")):
        with as_person(conn, "alice"):
            procs.create_movement(
                external_id, Decimal(1), plan=plan(node("a")), callback_url=callback_url
            ).one(conn)
    [claim] = procs.claim_callbacks("d1", 10).all(conn)
    procs.complete_callback(claim.callback_id, claim.claim_secret, 502).one(conn)

    listed = cli("list")
    assert listed.exit_code == 0, listed.output
    assert "DEAD" in listed.stdout and "REFUSED" in listed.stdout and "502" in listed.stdout
    dead = cli("list", "--dead", "--state", "dead")
    assert dead.exit_code == 0 and "REFUSED" not in dead.stdout and "DEAD" in dead.stdout

    replayed = cli("replay", str(claim.callback_id), "--reason", "the receiver is back")
    assert replayed.exit_code == 0, replayed.output
    assert f"callback {claim.callback_id} PENDING" in replayed.stdout
    actor = conn.execute(
        "SELECT actor FROM audit_outbox WHERE action = 'callback_replayed'"
    ).fetchone()
    assert actor is not None and actor[0].startswith("dora_")

    again = cli("replay", str(claim.callback_id), "--reason", "twice")
    assert again.exit_code == 2 and "QT071" in again.stderr
    bad = cli("list", "--state", "LOST")
    assert bad.exit_code == 2 and "--state" in bad.stderr
