"""`qtg pause SCOPE NAME --reason TEXT [--for DURATION]` and `qtg resume
SCOPE NAME`: trip_breaker and reset_breaker from the command line, logged in
as the person (QTG_DATABASE_URL: their own DSN).

Pins: an operator's pause holds the scope's READY nodes (limit_held_nodes
names the pauser) and is audited with their login; the pauser's resume is
one `qtg: error:` line with QT022 and the pause stays; another operator's
resume lets the node be claimed; --for ends the pause by itself; bad input
(a scope not in the list, a duration beyond 30 days, no --reason) is one
error line, exit 2, nothing written; a runner's login is refused before any
call (exit 1).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from cli_support import Cli, cli_as, one_line_error
from conftest import TestDatabase
from engine import add_lanes, as_person, claim, create_started, fingerprint, node, node_ids, plan
from rows import Conn, person

from qtg_runner.db import procs


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_as(monkeypatch)


def test_an_operator_pauses_a_lane_and_another_resumes_it(
    db: TestDatabase, conn: Conn, cli: Any
) -> None:
    add_lanes(conn, "x")
    node_id = node_ids(conn, create_started(conn, plan(node("a", lane="x")), "cli-pause"))["a"]
    alice, bob = person(db, "alice"), person(db, "bob")

    paused = cli(alice, "pause", "lane", "x", "--reason", "the bridge is halted")
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.strip() == "lane x paused"
    assert claim(conn) == []
    with as_person(conn, "carol"):
        (held,) = procs.limit_held_nodes().all(conn)
    assert held.node_id == node_id and f"paused by {alice.info.user}" in held.reason

    before = fingerprint(conn)
    one_line_error(cli(alice, "resume", "lane", "x"), "(QT022)")
    after = fingerprint(conn)
    assert {k: v for k, v in after.items() if "audit" not in k} == {
        k: v for k, v in before.items() if "audit" not in k
    }

    resumed = cli(bob, "resume", "lane", "x")
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.strip() == "lane x resumed"
    assert [c["node_id"] for c in claim(conn)] == [node_id]


def test_a_pause_for_a_time_says_so(db: TestDatabase, conn: Conn, cli: Any) -> None:
    alice = person(db, "alice")
    paused = cli(alice, "pause", "network", "*", "--reason", "maintenance", "--for", "2h")
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.strip() == "network * paused for 2h"
    assert conn.execute("SELECT expires_at - tripped_at, by_operator FROM breakers").fetchone() == (
        timedelta(hours=2),
        True,
    )


def test_bad_pauses_are_one_error_line_and_write_nothing(
    db: TestDatabase, conn: Conn, cli: Any
) -> None:
    alice = person(db, "alice")
    runner = person(db, "dispatcher", "qtg_testnet_runner")
    before = fingerprint(conn)
    for args, says in (
        (["pause", "everything", "*", "--reason", "why"], "everything"),
        (["pause", "network", "*", "--reason", "why", "--for", "31d"], "longer than 30 days"),
        (["pause", "network", "*"], "Missing option"),
        (["pause", "chain", "nowhere", "--reason", "why"], "(QT002)"),
        (["resume", "lane", "x"], "(QT061)"),
    ):
        one_line_error(cli(alice, *args), says)
    one_line_error(
        cli(runner, "pause", "network", "*", "--reason", "why"),
        "is not an operator of testnet",
        code=1,
    )
    assert fingerprint(conn) == before
