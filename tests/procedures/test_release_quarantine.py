"""release_quarantine: an operator puts a quarantined node back into circulation.

One operator's call (their own login: session_user) with a reason: the node
keeps its state and is due at once (recovery for SUBMITTING and UNKNOWN, the
observer for SUBMITTED and OBSERVING, a dispatcher for READY), its lost claims
count from 0 again, and the release is audited ('quarantine_released', actor:
the operator, with the quarantine it ended). A node that is not quarantined,
or has finished, an unknown node, a missing or oversized reason: refused,
nothing changed.
"""

from __future__ import annotations

from datetime import timedelta

from engine import (
    as_person,
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
from rows import T0, Conn, node_row, prepare, recovery_claims

from qtg_runner.db import procs

RELEASE = "SELECT release_quarantine(%s, %s)::text"


def quarantined_claim(conn: Conn, external_id: str = "rq-1") -> dict[str, object]:
    """A one-node movement whose node the dispatcher claimed, prepared and quarantined."""
    create_started(conn, plan(node("a")), external_id)
    [a] = claim(conn, "dispatcher-1")
    prepare(conn, a)
    procs.quarantine_nodes([a["node_id"]], [a["claim_secret"]], ["submit: boom"]).all(conn)
    return a


def test_a_released_claim_goes_to_recovery_at_once_with_its_lost_claims_reset(
    conn: Conn,
) -> None:
    a = quarantined_claim(conn)
    node_id = a["node_id"]
    conn.execute("UPDATE movement_request_nodes SET lost_claims = 2 WHERE id = %s", (node_id,))
    pin_clock(conn, (T0 + timedelta(seconds=10)).isoformat())  # the lease runs for 300 s

    with as_person(conn, "alice"):
        written = in_one_transaction(conn, RELEASE, (node_id, "the executor was fixed"))

    assert written.rows == [("SUBMITTING",)]
    assert written.audit == [
        ("node", str(node_id), "quarantine_released", "SUBMITTING", "SUBMITTING")
    ]
    row = node_row(conn, node_id)
    assert (row["quarantined_at"], row["quarantine_reason"], row["lost_claims"]) == (None, None, 0)
    assert row["lease_until"] == T0 + timedelta(seconds=10)
    audit = conn.execute(
        "SELECT actor, detail->>'reason', detail->>'quarantine_reason' FROM audit_outbox"
        " WHERE action = 'quarantine_released'"
    ).fetchone()
    assert audit == ("alice", "the executor was fixed", "submit: boom")
    assert conn.execute("SELECT count(*) FROM quarantined_nodes").fetchone() == (0,)
    assert set(recovery_claims(conn)) == {node_id}


def test_a_released_observed_node_is_due_for_observation_at_once(conn: Conn) -> None:
    create_started(conn, plan(node("a")), "rq-obs")
    [a] = claim(conn, "dispatcher-1")
    submit(conn, a)  # first observation 42 s after T0
    pin_clock(conn, (T0 + timedelta(seconds=42)).isoformat())
    with conn.transaction():
        observed = procs.claim_observe(a["node_id"], "observer-1").one(conn)
        procs.quarantine_nodes([a["node_id"]], [observed.claim_secret], ["observe: boom"]).all(conn)
    assert procs.observe_candidates(10).all(conn) == []

    pin_clock(conn, (T0 + timedelta(seconds=50)).isoformat())
    with as_person(conn, "bob"):
        assert conn.execute(RELEASE, (a["node_id"], "looked at it")).fetchone() == ("SUBMITTED",)
    assert node_row(conn, a["node_id"])["next_observe_at"] <= T0 + timedelta(seconds=50)
    assert procs.observe_candidates(10).all(conn) == [a["node_id"]]


def test_a_release_is_refused_for_a_node_not_quarantined_unknown_or_without_a_reason(
    conn: Conn,
) -> None:
    a = quarantined_claim(conn)
    movement = create_started(conn, plan(node("b")), "rq-2")
    free = node_ids(conn, movement)["b"]
    conn.execute("UPDATE engine_limits SET max_text_bytes = 50")

    with as_person(conn, "alice"):
        assert_rejected(conn, "QT021", RELEASE, (free, "why not"))
        assert_rejected(conn, "QT011", RELEASE, (10**9, "why not"))
        assert_rejected(conn, "QT002", RELEASE, (a["node_id"], None))
        assert_rejected(conn, "QT002", RELEASE, (a["node_id"], "  "))
        assert_rejected(conn, "QT005", RELEASE, (a["node_id"], "x" * 51))
        conn.execute(RELEASE, (a["node_id"], "fixed"))
        assert_rejected(conn, "QT021", RELEASE, (a["node_id"], "again"))
