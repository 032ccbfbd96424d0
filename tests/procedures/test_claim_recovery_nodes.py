"""claim_recovery_nodes: recovery takes UNKNOWN nodes and SUBMITTING nodes whose lease ran out.

Pins: a node whose dispatcher still holds its lease is not taken; a claim hands
out a new secret and bumps the claim counter (so the dispatcher's late report,
with its old secret, is refused, QT030), leases the
node to recovery, counts the recovery attempt, is audited (recovery_claimed)
and hands over the dispatcher's intent; bad arguments are refused (QT002).

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

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
from rows import Conn, fail, iso_at, node_row, prepare, recovery_claims, time_at


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
