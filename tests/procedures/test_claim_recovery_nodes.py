"""claim_recovery_nodes: recovery takes UNKNOWN nodes and SUBMITTING nodes whose lease
ran out or whose claimer is known dead.

Pins: a node whose dispatcher still holds its lease is not taken; a claim hands
out a new secret and bumps the claim counter (so the dispatcher's late report,
with its old secret, is refused, QT030), leases the
node to recovery, counts the recovery attempt, is audited (recovery_claimed)
and hands over the dispatcher's intent; bad arguments are refused (QT002).
A claim that names its worker's heartbeat is taken at once once that worker
is known dead (it missed two expected ticks, or stopped cleanly), and only
after its lease while the worker is alive, however silent; a claim naming no
heartbeat row waits for its lease. A node taken from lost claims three times
in a row (engine_limits.quarantine_after_lost_claims) is quarantined instead,
and a report in between starts the count again.

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from engine import (
    assert_rejected,
    claim,
    create_started,
    in_one_transaction,
    node,
    node_ids,
    pin_clock,
    plan,
    submit,
)
from rows import Conn, fail, iso_at, node_row, prepare, recovery_claims, set_clock, time_at

from qtg_runner.db import procs


def test_recovery_claims_unknown_and_lease_expired_submitting_nodes(conn: Conn) -> None:
    movement_id = create_started(conn, plan(node("x"), node("y"), node("z")), "m1")
    claims = {c["node_key"]: c for c in claim(conn)}  # lease 300 s
    prepare(conn, claims["x"])
    assert fail(conn, claims["x"], retryable=True) == "UNKNOWN"
    submit(conn, claims["z"])
    ids = node_ids(conn, movement_id)

    written = in_one_transaction(
        conn,
        "SELECT node_id, node_state::text FROM claim_recovery_nodes('rec', 10, 120)",
    )
    assert written.rows == [(ids["x"], "UNKNOWN")]  # y's dispatcher still holds its lease
    assert written.audit == [("node", str(ids["x"]), "recovery_claimed", "UNKNOWN", "UNKNOWN")]
    x = node_row(conn, ids["x"])
    assert (x["node_state"], x["lease_until"], x["recovery_attempts"], x["claim_token"]) == (
        "UNKNOWN",
        time_at(120),
        1,
        2,
    )
    assert recovery_claims(conn) == {}  # x is leased to this recovery worker

    pin_clock(conn, iso_at(300))  # y's dispatcher lease ran out; x's recovery lease too
    taken = recovery_claims(conn)
    assert {k: v["node_state"] for k, v in taken.items()} == {
        ids["x"]: "UNKNOWN",
        ids["y"]: "SUBMITTING",
    }
    assert (node_row(conn, ids["x"])["claim_token"], node_row(conn, ids["y"])["claim_token"]) == (
        3,
        2,
    )
    assert taken[ids["y"]]["intent"]["idempotency_key"] == claims["y"]["idempotency_key"]
    # the fenced dispatcher's late report changes nothing
    assert_rejected(
        conn,
        "QT030",
        "SELECT complete_submit(%s, %s, 'late')",
        (ids["y"], claims["y"]["claim_secret"]),
    )


def test_claim_recovery_rejects_bad_arguments(conn: Conn) -> None:
    for worker, p_max, lease in [
        ("rec", 0, 120),
        ("rec", 1001, 120),
        ("rec", None, 120),
        ("", 10, 120),
        (None, 10, 120),
        ("rec", 10, 0),
    ]:
        assert_rejected(
            conn, "QT002", "SELECT * FROM claim_recovery_nodes(%s, %s, %s)", (worker, p_max, lease)
        )


# -- a dead claimer's claims, at once; a node whose claims keep dying, quarantined --


def beat(conn: Conn, worker: str, instance: str, at: float, interval: float = 1.2) -> None:
    """The heartbeat of ``worker`` ``instance`` at T0 + ``at`` s, a tick expected
    every ``interval`` s."""
    set_clock(conn, at)
    procs.heartbeat(worker, instance, "core", interval).one(conn)


def claimed_by(conn: Conn, instance: str, worker: str = "node_dispatcher") -> dict[str, Any]:
    """One READY node claimed by ``worker``@``instance`` (naming its heartbeat)."""
    [row] = procs.claim_ready_nodes(worker, 1, 300, instance_id=instance).all(conn)
    return asdict(row)


def test_a_claim_whose_worker_missed_two_ticks_is_taken_at_once_not_after_its_lease(
    conn: Conn,
) -> None:
    create_started(conn, plan(node("x"), node("y"), node("z")), "dead-1")
    beat(conn, "node_dispatcher", "killed", 0)
    beat(conn, "node_dispatcher", "alive", 0)
    x = claimed_by(conn, "killed")
    y = claimed_by(conn, "alive")
    z = claimed_by(conn, "ghost")  # no heartbeat of that name: only its lease bounds it
    assert node_row(conn, x["node_id"])["claimer_instance"] == "killed"

    beat(conn, "node_dispatcher", "alive", 2.0)
    set_clock(conn, 2.4)  # two expected ticks of 1.2 s, not more: not known dead yet
    assert recovery_claims(conn) == {}
    set_clock(conn, 2.401)
    written = in_one_transaction(
        conn, "SELECT node_id, node_state::text FROM claim_recovery_nodes('rec', 10, 120, 'r1')"
    )
    assert written.rows == [(x["node_id"], "SUBMITTING")]
    assert written.audit == [
        ("node", str(x["node_id"]), "recovery_claimed", "SUBMITTING", "SUBMITTING")
    ]
    row = node_row(conn, x["node_id"])
    assert (row["claimer_worker"], row["claimer_instance"], row["lost_claims"]) == ("rec", "r1", 1)
    # the killed dispatcher's late report is fenced
    assert_rejected(
        conn,
        "QT030",
        "SELECT complete_submit(%s, %s, 'late')",
        (x["node_id"], x["claim_secret"]),
    )

    # a worker alive but silent about its claim (a hung call: its heartbeat
    # goes on) keeps it until the lease; so does the ghost (x: recovery's own
    # lease of 120 s has run out)
    beat(conn, "node_dispatcher", "alive", 298)
    set_clock(conn, 299)
    assert set(recovery_claims(conn)) == {x["node_id"]}
    set_clock(conn, 300)
    assert set(recovery_claims(conn)) == {y["node_id"], z["node_id"]}


def test_a_worker_that_stopped_cleanly_leaves_its_claims_to_recovery_at_once(conn: Conn) -> None:
    create_started(conn, plan(node("x")), "dead-2")
    beat(conn, "node_dispatcher", "i1", 0)
    x = claimed_by(conn, "i1")
    set_clock(conn, 0.5)
    assert recovery_claims(conn) == {}
    assert procs.worker_stopped("node_dispatcher", "i1").one(conn)
    assert set(recovery_claims(conn)) == {x["node_id"]}


def test_an_unknown_node_under_a_dead_recovery_claim_is_taken_again_at_once(conn: Conn) -> None:
    create_started(conn, plan(node("x")), "dead-3")
    [x] = claim(conn)
    prepare(conn, x)
    assert fail(conn, x, retryable=True) == "UNKNOWN"
    beat(conn, "node_recovery", "r1", 0)
    [first] = procs.claim_recovery_nodes("node_recovery", 10, 120, instance_id="r1").all(conn)
    assert node_row(conn, x["node_id"])["lost_claims"] == 0  # an UNKNOWN node is not a lost claim

    set_clock(conn, 3)  # r1 died holding it: another recovery worker takes it, not in 120 s
    beat(conn, "node_recovery", "r2", 3)
    [second] = procs.claim_recovery_nodes("node_recovery", 10, 120, instance_id="r2").all(conn)
    assert second.node_id == x["node_id"]
    assert node_row(conn, x["node_id"])["lost_claims"] == 1

    # r2 concludes nothing and dies: the node waits for the lane's retry all the same
    state = procs.complete_recovery(x["node_id"], second.claim_secret, "STILL_UNKNOWN").one(conn)
    assert state == "UNKNOWN"
    assert node_row(conn, x["node_id"])["claimer_instance"] is None
    set_clock(conn, 30)
    assert recovery_claims(conn) == {}
    set_clock(conn, 33)  # the lane's recovery_retry_seconds (30) after the conclusion
    assert set(recovery_claims(conn)) == {x["node_id"]}
    assert first.claim_secret != second.claim_secret


def test_a_node_whose_claims_keep_dying_is_quarantined_instead_of_handed_out_again(
    conn: Conn,
) -> None:
    movement = create_started(conn, plan(node("poison"), node("unlucky")), "dead-4")
    ids = node_ids(conn, movement)
    at = 0.0

    def lose_claims(rounds: int) -> dict[int, dict[str, Any]]:
        """Each round a dispatcher claims every READY node and dies; recovery takes
        the claims once its heartbeat is late and finds nothing went out."""
        nonlocal at
        taken: dict[int, dict[str, Any]] = {}
        for _ in range(rounds):
            instance = f"d{at}"
            beat(conn, "node_dispatcher", instance, at)
            procs.claim_ready_nodes("node_dispatcher", 10, 300, instance_id=instance).all(conn)
            at += 3
            set_clock(conn, at)
            taken = recovery_claims(conn)
            for node_id, c in taken.items():
                state = procs.complete_recovery(node_id, c["claim_secret"], "NOT_SUBMITTED")
                assert state.one(conn) == "READY"
        return taken

    assert set(lose_claims(2)) == {ids["poison"], ids["unlucky"]}
    # the next dispatcher reports unlucky, whose count starts again, and dies
    # holding poison: its third lost claim in a row
    beat(conn, "node_dispatcher", "last", at)
    claims = procs.claim_ready_nodes("node_dispatcher", 10, 300, instance_id="last").all(conn)
    [unlucky] = [asdict(c) for c in claims if c.node_id == ids["unlucky"]]
    assert submit(conn, unlucky) == "SUBMITTED"
    assert node_row(conn, ids["unlucky"])["lost_claims"] == 0
    assert node_row(conn, ids["poison"])["lost_claims"] == 2
    at += 3
    set_clock(conn, at)
    assert recovery_claims(conn) == {}
    [event] = conn.execute(
        "SELECT actor, from_state, to_state, detail->>'lost_claims' FROM audit_outbox"
        " WHERE action = 'quarantined'"
    ).fetchall()
    assert event == ("rec", "SUBMITTING", "SUBMITTING", "3")
    [(node_id, state, reason)] = conn.execute(
        "SELECT node_id, node_state::text, reason FROM quarantined_nodes"
    ).fetchall()
    assert (node_id, state) == (ids["poison"], "SUBMITTING")
    assert "its last 3 claims ended without a report" in reason
    set_clock(conn, at + 3600)
    assert recovery_claims(conn) == {}
