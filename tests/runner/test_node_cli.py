"""`qtg node requeue NODE --reason R` and `qtg node release NODE --reason R`:
requeue_node and release_quarantine from the command line, logged in as the
person (QTG_DATABASE_URL: their own DSN).

Pins: a requeue takes two operators (the first asks and the node is
untouched; the asker's second call is one `qtg: error:` line with QT022;
another operator's call applies it: READY); a release puts a quarantined
node back in its state at once, audited with the operator's login; bad input
(no --reason, a node that is not UNKNOWN or not quarantined) is one error
line, exit 2, nothing written; a runner's login is refused (exit 1).
"""

from __future__ import annotations

import pytest
from cli_support import Cli, cli_as, one_line_error
from conftest import TestDatabase
from engine import claim, create_started, fingerprint, node_ids
from rows import ONE, Conn, claim_of, fail, node_row, person, prepare

from qtg_runner.db import procs


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_as(monkeypatch, "node")


def unknown_after_prepare(conn: Conn, external_id: str) -> int:
    """A one-node movement whose node went UNKNOWN after its intent was PREPARED."""
    node_id = node_ids(conn, create_started(conn, ONE, external_id))["a"]
    claimed = claim_of(conn, node_id)
    prepare(conn, claimed)
    assert fail(conn, claimed, retryable=True) == "UNKNOWN"
    return node_id


def test_a_requeue_takes_two_operators(db: TestDatabase, conn: Conn, cli: Cli) -> None:
    node_id = unknown_after_prepare(conn, "cli-requeue")
    alice, bob = person(db, "alice"), person(db, "bob")

    asked = cli(alice, "requeue", str(node_id), "--reason", "the transaction was dropped")
    assert asked.exit_code == 0, asked.output
    assert "REQUESTED" in asked.stdout and "another operator" in asked.stdout
    assert node_row(conn, node_id)["node_state"] == "UNKNOWN"

    again = cli(alice, "requeue", str(node_id), "--reason", "me again")
    one_line_error(again, "QT022")
    assert node_row(conn, node_id)["node_state"] == "UNKNOWN"

    applied = cli(bob, "requeue", str(node_id), "--reason", "confirmed: dropped")
    assert applied.exit_code == 0, applied.output
    assert applied.stdout.startswith(f"node {node_id} requeued: READY")
    assert node_row(conn, node_id)["node_state"] == "READY"


def test_a_release_puts_a_quarantined_node_back(db: TestDatabase, conn: Conn, cli: Cli) -> None:
    create_started(conn, ONE, "cli-release")
    (claimed,) = claim(conn)
    procs.quarantine_nodes([claimed["node_id"]], [claimed["claim_secret"]], ["boom"]).all(conn)

    carol = person(db, "carol")
    released = cli(carol, "release", str(claimed["node_id"]), "--reason", "fixed")
    assert released.exit_code == 0, released.output
    assert released.stdout.strip() == f"node {claimed['node_id']} released: SUBMITTING"
    assert node_row(conn, claimed["node_id"])["quarantined_at"] is None
    actor = conn.execute(
        "SELECT actor, detail->>'reason' FROM audit_outbox WHERE action = 'quarantine_released'"
    ).fetchall()
    assert actor == [(carol.info.user, "fixed")]


def test_bad_input_is_one_line_and_writes_nothing(db: TestDatabase, conn: Conn, cli: Cli) -> None:
    node_id = node_ids(conn, create_started(conn, ONE, "cli-bad"))["a"]  # READY
    alice = person(db, "alice")
    before = fingerprint(conn)

    for args, says in (
        (["requeue", str(node_id)], "Missing option"),
        (["requeue", str(node_id), "--reason", "x"], "(QT021)"),
        (["release", str(node_id), "--reason", "x"], "(QT021)"),
        (["release", "999999", "--reason", "x"], "(QT011)"),
        (["release", "0", "--reason", "x"], "greater than or equal to 1"),
    ):
        one_line_error(cli(alice, *args), says)
    runner = person(db, "dispatcher", "qtg_testnet_runner")
    one_line_error(
        cli(runner, "release", str(node_id), "--reason", "x"),
        "is not an operator of testnet",
        code=1,
    )
    assert fingerprint(conn) == before
