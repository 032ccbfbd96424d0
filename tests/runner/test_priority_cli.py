"""`qtg movement priority ID PRIORITY --reason TEXT`: set_priority from the
command line, logged in as the person (QTG_DATABASE_URL: their own DSN), like
`qtg movement cancel`.

Pins: the operator's call sets the movement's priority and its unfinished
nodes', audited with the person's login as the actor; a negative priority is
a priority, not an option; the same priority again prints the same and writes
nothing; a refusal (unknown or finished movement, a blank reason, a priority
beyond an integer, no --reason) is one `qtg: error:` line, exit 2, nothing
written; a runner's login is refused before any call (exit 1, as for cancel).
"""

from __future__ import annotations

from typing import Any

import pytest
from cli_support import Cli, cli_as, one_line_error
from conftest import TestDatabase
from engine import cancel, create, fingerprint, node, plan
from rows import Conn, person


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_as(monkeypatch, "movement")


def test_an_operator_sets_a_priority(db: TestDatabase, conn: Conn, cli: Any) -> None:
    movement = create(conn, plan(node("a"), node("b", ["a"])), "cli-p")
    alice = person(db, "alice")

    raised = cli(alice, "priority", str(movement), "7", "--reason", "payroll first")
    assert raised.exit_code == 0, raised.output
    assert raised.stdout.strip() == f"movement {movement} priority 7"
    assert conn.execute(
        "SELECT array_agg(priority ORDER BY id) FROM movement_request_nodes WHERE request_id = %s",
        (movement,),
    ).fetchone() == ([7, 7],)
    audit = conn.execute(
        "SELECT actor, from_state, to_state, detail->>'reason' FROM audit_outbox"
        " WHERE action = 'priority_set'"
    ).fetchall()
    assert audit == [(alice.info.user, "0", "7", "payroll first")]

    before = fingerprint(conn)
    again = cli(alice, "priority", str(movement), "7", "--reason", "asked twice")
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == f"movement {movement} priority 7"
    assert fingerprint(conn) == before

    lowered = cli(alice, "priority", str(movement), "-3", "--reason", "it can wait")
    assert lowered.exit_code == 0, lowered.output
    assert lowered.stdout.strip() == f"movement {movement} priority -3"


def test_a_refused_priority_is_one_error_line_and_writes_nothing(
    db: TestDatabase, conn: Conn, cli: Any
) -> None:
    pending = create(conn, plan(node("a")), "cli-pending")
    cancelled = create(conn, plan(node("a")), "cli-cancelled")
    cancel(conn, cancelled)
    alice = person(db, "alice")
    runner = person(db, "dispatcher", "qtg_testnet_runner")
    before = fingerprint(conn)
    for login, args, says in (
        (alice, ["424242", "1", "--reason", "why"], "(QT010)"),
        (alice, [str(cancelled), "1", "--reason", "why"], "(QT020)"),
        (alice, [str(pending), "1", "--reason", "  "], "(QT002)"),
        (alice, [str(pending), "1"], "Missing option"),
        (alice, [str(pending), str(2**31), "--reason", "why"], "2147483647"),
        (alice, [str(pending), "1.5", "--reason", "why"], "integer"),
    ):
        one_line_error(cli(login, "priority", *args), says)
    refused = cli(runner, "priority", str(pending), "1", "--reason", "why")
    one_line_error(refused, "is not an operator of testnet", code=1)
    assert fingerprint(conn) == before
