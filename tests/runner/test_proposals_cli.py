"""`qtg proposals list|approve|reject`: the proposal procedures from the command
line, logged in as the person (QTG_DATABASE_URL: their own DSN), like `qtg movement`.

Pins: list shows an open proposal's changes and proposer; the proposer's own
approve is refused (exit 2, the QT022 warning on stderr, still PROPOSED);
another login's approve applies it; reject records the reason; a refusal
with an error prints its SQLSTATE and hint and exits 2.
"""

from __future__ import annotations

from typing import Any

import pytest
from cli_support import Cli, cli_as
from conftest import TestDatabase
from engine import add_lanes
from rows import Conn, lane_settings, person, proposal_row

from qtg_runner.db import procs


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_as(monkeypatch, "proposals")


def test_list_approve_and_reject_as_the_person(db: TestDatabase, conn: Conn, cli: Any) -> None:
    alice, bob = person(db, "alice"), person(db, "bob")
    made = procs.propose_lane_baseline("default", 120).one(alice)

    listed = cli(bob, "list")
    assert listed.exit_code == 0, listed.output
    assert f"proposal {made.proposal_id}: lane_baseline default" in listed.stdout
    assert alice.info.user in listed.stdout
    assert [line.split() for line in listed.stdout.splitlines() if "baseline_seconds" in line] == [
        ["│", "baseline_seconds", "│", "60", "│", "120", "│"]
    ]

    own = cli(alice, "approve", str(made.proposal_id))
    assert own.exit_code == 2
    assert "QT022" in own.stderr and "still PROPOSED" in own.stderr
    assert proposal_row(conn, made.proposal_id)["proposal_state"] == "PROPOSED"

    approved = cli(bob, "approve", str(made.proposal_id))
    assert approved.exit_code == 0, approved.output
    assert f"proposal {made.proposal_id} APPLIED" in approved.stdout
    settings = lane_settings(conn, "default")
    assert settings is not None and settings["baseline_seconds"] == 120

    again = cli(bob, "approve", str(made.proposal_id))  # idempotent for its approver
    assert again.exit_code == 0, again.output
    assert f"proposal {made.proposal_id} APPLIED" in again.stdout
    carol = person(db, "carol")
    late = cli(carol, "approve", str(made.proposal_id))  # anyone else: no longer PROPOSED
    assert late.exit_code == 2
    assert "(QT023)" in late.stderr

    add_lanes(conn, "x")
    other = procs.propose_template(
        "t", {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": "x"}}]}
    ).one(alice)
    rejected = cli(bob, "reject", str(other.proposal_id), "--reason", "not now")
    assert rejected.exit_code == 0, rejected.output
    assert proposal_row(conn, other.proposal_id)["reason"] == "not now"
