"""quarantine_nodes: a runner sets aside the claimed nodes that broke it.

A node the dispatcher, the observer or recovery holds a claim on is
quarantined in its state (SUBMITTING, SUBMITTED, OBSERVING, UNKNOWN): its
claim is closed (the old secret proves nothing any more), the reason is
recorded and audited ('quarantined', actor: the claimer), the
quarantined_nodes view lists it, and no claim hands it out again, however
long its lease has run out. A node refused (a wrong secret, a node in another
state, no reason, a reason beyond engine_limits) is refused in its own row and
left as it was while the others are quarantined; a malformed call is refused
whole.
"""

from __future__ import annotations

from datetime import timedelta

from engine import (
    assert_rejected,
    claim,
    create_started,
    forged_secret,
    in_one_transaction,
    node,
    observe_claim,
    pin_clock,
    plan,
    submit,
)
from rows import T0, Conn, node_row, prepare, recovery_claims

from qtg_runner.db import procs

QUARANTINE = "SELECT node_id, node_state::text, error_code FROM quarantine_nodes(%s, %s, %s)"


def started(conn: Conn, keys: tuple[str, ...] = ("a", "b", "c")) -> dict[str, dict[str, object]]:
    """A started movement of independent nodes, all claimed: node key -> claim."""
    create_started(conn, plan(*(node(k) for k in keys)), "q-1")
    return {c["node_key"]: c for c in claim(conn, "dispatcher-1")}


def quarantined(conn: Conn) -> dict[int, tuple[str, str]]:
    """The quarantined_nodes view: node id -> (state, reason)."""
    rows = conn.execute(
        "SELECT node_id, node_state::text, reason FROM quarantined_nodes"
    ).fetchall()
    return {node_id: (state, reason) for node_id, state, reason in rows}


def test_a_claimed_node_is_quarantined_in_its_state_and_no_claim_hands_it_out_again(
    conn: Conn,
) -> None:
    claims = started(conn)
    a, b = claims["a"], claims["b"]
    prepare(conn, a)  # its side effect may be out: recovery would take it once the lease runs out

    written = in_one_transaction(
        conn, QUARANTINE, ([a["node_id"]], [a["claim_secret"]], ["submit: OverflowError: boom"])
    )

    assert written.rows == [(a["node_id"], "SUBMITTING", None)]
    assert written.audit == [("node", str(a["node_id"]), "quarantined", "SUBMITTING", "SUBMITTING")]
    assert written.callbacks == []
    row = node_row(conn, a["node_id"])
    assert (row["node_state"], row["quarantined_at"], row["quarantine_reason"]) == (
        "SUBMITTING",
        T0,
        "submit: OverflowError: boom",
    )
    assert (row["claim_hash"], row["claimer_instance"]) == (None, None)
    detail = conn.execute(
        "SELECT actor, detail->>'reason' FROM audit_outbox WHERE action = 'quarantined'"
    ).fetchone()
    assert detail == ("dispatcher-1", "submit: OverflowError: boom")
    assert quarantined(conn) == {a["node_id"]: ("SUBMITTING", "submit: OverflowError: boom")}

    # long after the dispatcher's lease ran out, recovery takes b, never a
    pin_clock(conn, (T0 + timedelta(hours=1)).isoformat())
    assert set(recovery_claims(conn)) == {b["node_id"], claims["c"]["node_id"]}
    # and the quarantined claim's secret proves nothing any more
    assert_rejected(
        conn,
        "QT030",
        "SELECT complete_submit(%s, %s, 'late')",
        (a["node_id"], a["claim_secret"]),
    )


def test_an_observers_claim_is_quarantined_in_its_transaction_and_no_longer_observed(
    conn: Conn,
) -> None:
    claims = started(conn, ("a", "b"))
    for c in claims.values():
        submit(conn, c)
    a, b = claims["a"]["node_id"], claims["b"]["node_id"]
    pin_clock(conn, (T0 + timedelta(hours=1)).isoformat())
    assert set(procs.observe_candidates(10).all(conn)) == {a, b}

    with conn.transaction():
        observed = procs.claim_observe(a, "observer-1").one(conn)
        [row] = procs.quarantine_nodes(
            [a], [observed.claim_secret], ["observe: KeyError: 'status'"]
        ).all(conn)
    assert (row.node_state, row.error_code) == ("SUBMITTED", None)

    assert procs.observe_candidates(10).all(conn) == [b]
    assert procs.claim_observe(a, "observer-2").one_or_none(conn) is None
    assert observe_claim(conn, b, "PENDING")[0] is not None
    assert quarantined(conn) == {a: ("SUBMITTED", "observe: KeyError: 'status'")}


def test_each_refused_node_is_refused_in_its_row_and_the_others_are_quarantined(
    conn: Conn,
) -> None:
    conn.execute("UPDATE engine_limits SET max_text_bytes = 100")
    claims = started(conn, ("good", "forged", "silent", "verbose", "moved"))
    moved = claims["moved"]
    submit(conn, moved, settled=True)  # COMPLETED: its secret still matches, its state does not
    order = ["good", "forged", "silent", "verbose", "moved"]
    ids = [claims[k]["node_id"] for k in order]
    secrets = [claims[k]["claim_secret"] for k in order]
    secrets[1] = forged_secret()
    errors = ["boom", "boom", " ", "x" * 101, "boom"]

    rows = conn.execute(QUARANTINE, (ids, secrets, errors)).fetchall()

    assert [(r[0], r[1], r[2]) for r in rows] == [
        (ids[0], "SUBMITTING", None),
        (ids[1], None, "QT030"),
        (ids[2], None, "QT002"),
        (ids[3], None, "QT005"),
        (ids[4], None, "QT021"),
    ]
    assert set(quarantined(conn)) == {ids[0]}
    for refused in ids[1:]:
        assert node_row(conn, refused)["quarantined_at"] is None


def test_a_malformed_call_is_refused_whole_and_changes_nothing(conn: Conn) -> None:
    claims = started(conn, ("a",))
    a = claims["a"]
    for ids, secrets, errors in [
        ([a["node_id"]], [a["claim_secret"]], []),
        ([a["node_id"]], [], ["boom"]),
        ([a["node_id"], a["node_id"]], [a["claim_secret"]] * 2, ["boom"] * 2),
    ]:
        assert_rejected(conn, "QT002", QUARANTINE, (ids, secrets, errors))
    assert conn.execute(QUARANTINE, ([], [], [])).fetchall() == []


def test_a_quarantined_node_stays_out_of_recovery_until_released_and_a_cancel_waits_for_it(
    conn: Conn,
) -> None:
    movement = create_started(conn, plan(node("a")), "q-cancel")
    [a] = claim(conn, "dispatcher-1")
    conn.execute(QUARANTINE, ([a["node_id"]], [a["claim_secret"]], ["prepare: ValueError"]))

    # a cancel skips what is waiting, but a quarantined claim is in flight: it waits
    conn.execute("SELECT cancel_movement(%s, 'no longer needed')", (movement,))
    assert node_row(conn, a["node_id"])["node_state"] == "SUBMITTING"
    assert conn.execute(
        "SELECT request_state::text, stop_reason::text FROM movement_requests WHERE id = %s",
        (movement,),
    ).fetchone() == ("EXECUTING", "CANCELLED")
    pin_clock(conn, (T0 + timedelta(hours=1)).isoformat())
    assert recovery_claims(conn) == {}
