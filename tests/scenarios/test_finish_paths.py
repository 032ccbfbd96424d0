"""Every path that finishes a node ends a movement the same way.

A node finishes through the dispatcher's report (complete_submit_batch, or
fail_submit for a refused submit), the observer's (complete_observe) or
recovery's (complete_recovery), and cancel and expiry skip what has not
started. All of them hand the node to finish_nodes, the one DAG step and
settle. Each scenario below (a chain, a diamond, a join, a fan-out, a failure
that skips descendants, a cancel with work in flight, an expiry) is played once through each path,
each in a fresh database, and must end with the same node and movement states,
the same audit events for what the finish path did (nodes readied or skipped,
the movement's own transitions) and the same callbacks; and the end states
are pinned here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from conftest import NewDatabase
from engine import bind, create, node, node_ids, pin_clock, plan, register_sim

Conn = psycopg.Connection[Any]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORKER = "worker-1"  # every path acts under one name, so the actors compare
PATHS = ("submit", "observe", "recovery")


@dataclass(frozen=True)
class Scenario:
    the_plan: dict[str, Any]
    steps: list[tuple[str, str]]  # (node key, COMPLETED | FAILED), or ("cancel" | "expire", "")
    nodes: dict[str, str]  # the end state of every node
    movement: str  # the end state of the movement
    expires_in_minutes: int | None = None


SCENARIOS: dict[str, Scenario] = {
    "chain": Scenario(
        plan(node("a"), node("b", ["a"]), node("c", ["b"])),
        [("a", "COMPLETED"), ("b", "COMPLETED"), ("c", "COMPLETED")],
        {"a": "COMPLETED", "b": "COMPLETED", "c": "COMPLETED"},
        "COMPLETED",
    ),
    "diamond": Scenario(
        plan(node("a"), node("b", ["a"]), node("c", ["a"]), node("d", ["b", "c"])),
        [("a", "COMPLETED"), ("b", "COMPLETED"), ("c", "COMPLETED"), ("d", "COMPLETED")],
        {"a": "COMPLETED", "b": "COMPLETED", "c": "COMPLETED", "d": "COMPLETED"},
        "COMPLETED",
    ),
    "join": Scenario(
        plan(node("x"), node("y"), node("z", ["x", "y"])),
        [("x", "COMPLETED"), ("y", "COMPLETED"), ("z", "COMPLETED")],
        {"x": "COMPLETED", "y": "COMPLETED", "z": "COMPLETED"},
        "COMPLETED",
    ),
    "fan-out": Scenario(
        plan(node("a"), node("b", ["a"]), node("c", ["a"]), node("d", ["a"])),
        [("a", "COMPLETED"), ("c", "COMPLETED"), ("b", "COMPLETED"), ("d", "COMPLETED")],
        {"a": "COMPLETED", "b": "COMPLETED", "c": "COMPLETED", "d": "COMPLETED"},
        "COMPLETED",
    ),
    "failure": Scenario(
        plan(node("a"), node("b", ["a"]), node("c", ["a"]), node("d", ["b"]), node("e", ["d"])),
        [("a", "COMPLETED"), ("b", "FAILED"), ("c", "COMPLETED")],
        {"a": "COMPLETED", "b": "FAILED", "c": "COMPLETED", "d": "SKIPPED", "e": "SKIPPED"},
        "FAILED",
    ),
    "cancel": Scenario(
        plan(node("a"), node("b", ["a"]), node("c")),
        [("cancel", ""), ("a", "COMPLETED"), ("c", "COMPLETED")],
        {"a": "COMPLETED", "b": "SKIPPED", "c": "COMPLETED"},
        "CANCELLED",
    ),
    "cancel-then-failure": Scenario(
        plan(node("a"), node("b", ["a"]), node("c")),
        [("cancel", ""), ("a", "COMPLETED"), ("c", "FAILED")],
        {"a": "COMPLETED", "b": "SKIPPED", "c": "FAILED"},
        "FAILED",  # a side effect in flight failed after the cancel: the movement says so
    ),
    "expiry": Scenario(
        plan(node("a", executor="check"), node("b", ["a"])),
        [("expire", ""), ("a", "COMPLETED")],
        {"a": "COMPLETED", "b": "SKIPPED"},
        "EXPIRED",
        expires_in_minutes=30,
    ),
}


class Player:
    """Plays a scenario's steps through one path, on the database clock."""

    def __init__(self, conn: Conn, movement: int, path: str):
        self.conn = conn
        self.movement = movement
        self.path = path
        self.ids = node_ids(conn, movement)
        self.secrets: dict[int, str] = {}
        self.hour = 0

    def tick(self) -> None:
        """An hour later: every lease and next observation has come due."""
        self.hour += 1
        pin_clock(self.conn, (T0 + timedelta(hours=self.hour)).isoformat())

    def claim_ready(self) -> None:
        rows = self.conn.execute(
            "SELECT node_id, claim_secret FROM claim_ready_nodes(%s, 100, 300)", (WORKER,)
        ).fetchall()
        self.secrets.update({node_id: secret for node_id, secret in rows})

    def step(self, key: str, outcome: str) -> None:
        self.tick()
        if key == "cancel":
            self.conn.execute("SELECT cancel_movement(%s)", (self.movement,))
        elif key == "expire":
            self.conn.execute("SELECT expire_movements(100, 'expiration_checker')")
        else:
            FINISH[self.path](self, self.ids[key], outcome)
        self.claim_ready()

    def via_submit(self, node_id: int, outcome: str) -> None:
        secret = self.secrets[node_id]
        if outcome == "COMPLETED":
            rows = self.conn.execute(
                "SELECT error_code FROM complete_submit_batch(%s, %s, %s, NULL, %s)",
                ([node_id], [secret], [f"ref-{node_id}"], [True]),
            ).fetchall()
            assert rows == [(None,)]
        else:
            self.conn.execute(
                "SELECT fail_submit(%s, %s, 'refused by the venue', false)", (node_id, secret)
            )

    def via_observe(self, node_id: int, outcome: str) -> None:
        self.conn.execute(
            "SELECT complete_submit(%s, %s, %s)", (node_id, self.secrets[node_id], f"ref-{node_id}")
        )
        self.tick()
        with self.conn.transaction():
            row = self.conn.execute(
                "SELECT claim_secret FROM claim_observe(%s, %s)", (node_id, WORKER)
            ).fetchone()
            assert row is not None, f"node {node_id} was not observable"
            self.conn.execute(
                "SELECT * FROM complete_observe(%s, %s, %s, p_worker => %s)",
                (node_id, row[0], outcome, WORKER),
            )

    def via_recovery(self, node_id: int, outcome: str) -> None:
        # the dispatcher died after its claim: the lease has run out an hour ago
        claims = self.conn.execute(
            "SELECT node_id, claim_secret FROM claim_recovery_nodes(%s, 100, 60)", (WORKER,)
        ).fetchall()
        self.secrets.update({n: t for n, t in claims})
        assert node_id in dict(claims), f"node {node_id} was not recoverable"
        self.conn.execute(
            "SELECT complete_recovery(%s, %s, %s, p_external_ref => %s)",
            (node_id, self.secrets[node_id], outcome, f"ref-{node_id}"),
        )


FINISH: dict[str, Callable[[Player, int, str], None]] = {
    "submit": Player.via_submit,
    "observe": Player.via_observe,
    "recovery": Player.via_recovery,
}


def play(new_database: NewDatabase, scenario: Scenario, path: str) -> dict[str, Any]:
    conn = bind(new_database().connect())
    pin_clock(conn, T0.isoformat())
    register_sim(conn)
    register_sim(conn, "check", has_side_effect=False)
    # the recovery path claims every recoverable node at each step and reports
    # one: the others' claims lapse, which would count towards their quarantine
    conn.execute("UPDATE engine_limits SET quarantine_after_lost_claims = 100")
    expires = (
        None
        if scenario.expires_in_minutes is None
        else (T0 + timedelta(minutes=scenario.expires_in_minutes)).isoformat()
    )
    movement = create(conn, scenario.the_plan, "finish-paths", expires_at=expires)
    conn.execute("SELECT approve_movement(%s)", (movement,))
    conn.execute("SELECT start_approved_movements(10)")
    player = Player(conn, movement, path)
    player.claim_ready()
    for key, outcome in scenario.steps:
        player.step(key, outcome)
    return ending(conn, movement)


def ending(conn: Conn, movement: int) -> dict[str, Any]:
    """The end states, what the finish path audited, and the callbacks."""
    nodes = dict(
        conn.execute(
            "SELECT node_key, node_state::text FROM movement_request_nodes WHERE request_id = %s",
            (movement,),
        ).fetchall()
    )
    state = conn.execute(
        "SELECT request_state::text, open_nodes, failed_nodes, stop_reason::text"
        " FROM movement_requests WHERE id = %s",
        (movement,),
    ).fetchone()
    # the finish path's own events: nodes readied or skipped (not the paths'
    # own moves of the node they finish), and every event of the movement
    audit = conn.execute(
        """SELECT entity, entity_id, action, from_state, to_state, actor, detail
             FROM audit_outbox
            WHERE request_id = %s
              AND (entity = 'request' OR to_state IN ('READY', 'SKIPPED'))
            ORDER BY id""",
        (movement,),
    ).fetchall()
    callbacks = conn.execute(
        """SELECT event_type, idempotency_key, payload - 'occurred_at'
             FROM callback_outbox WHERE request_id = %s ORDER BY id""",
        (movement,),
    ).fetchall()
    return {"nodes": nodes, "movement": state, "audit": audit, "callbacks": callbacks}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_path_that_finishes_a_node_ends_the_movement_alike(
    new_database: NewDatabase, name: str
) -> None:
    scenario = SCENARIOS[name]
    endings = {path: play(new_database, scenario, path) for path in PATHS}

    submit = endings["submit"]
    assert submit["nodes"] == scenario.nodes
    assert submit["movement"][0] == scenario.movement
    assert submit["movement"][1] == 0  # nothing left open
    assert submit["callbacks"][-1][0] == f"movement.{scenario.movement.lower()}"
    assert [e for e in submit["audit"] if e[0] == "request"][-1][4] == scenario.movement
    for path in ("observe", "recovery"):
        assert endings[path] == submit, f"{name} through {path} ended otherwise than through submit"
