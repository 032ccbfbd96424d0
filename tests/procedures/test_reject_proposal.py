"""reject_proposal: PROPOSED -> REJECTED, with a reason, by any operator (the
proposer too: a withdrawal).

Pins: the decider, the time and the reason are recorded and audited in one
transaction; the subject does not change. Refused with nothing changed: no
reason (QT002), a reason beyond the text limit (QT005), an unknown proposal
(QT013), one no longer PROPOSED or past its expiry (QT023).
"""

from __future__ import annotations

from engine import assert_rejected, in_one_transaction
from rows import CONFIG_TABLES, Conn, lane_settings, proposal_row, set_clock, time_at

from qtg_runner.db import procs


def test_reject_records_who_when_and_why(conn: Conn) -> None:
    before = lane_settings(conn, "default")
    proposal = procs.propose_lane_baseline("default", 30).one(conn)
    set_clock(conn, 120)
    written = in_one_transaction(
        conn, "SELECT reject_proposal(%s, 'withdrawn: wrong lane')::text", (proposal.proposal_id,)
    )
    assert written.rows == [("REJECTED",)]
    assert written.audit == [
        ("proposal", str(proposal.proposal_id), "rejected", "PROPOSED", "REJECTED")
    ]
    row = proposal_row(conn, proposal.proposal_id)
    assert (row["proposal_state"], row["decided_by"], row["decided_at"], row["reason"]) == (
        "REJECTED",
        "postgres",
        time_at(120),
        "withdrawn: wrong lane",
    )
    assert lane_settings(conn, "default") == before
    reason = conn.execute(
        "SELECT detail->>'reason' FROM audit_outbox WHERE action = 'rejected'"
    ).fetchone()
    assert reason == ("withdrawn: wrong lane",)


def test_reject_needs_a_reason_within_bounds(conn: Conn) -> None:
    proposal = procs.propose_lane_baseline("default", 30).one(conn)
    for reason in (None, "", "  "):
        assert_rejected(
            conn,
            "QT002",
            "SELECT reject_proposal(%s, %s)",
            (proposal.proposal_id, reason),
            tables=CONFIG_TABLES,
        )
    assert_rejected(
        conn,
        "QT005",
        "SELECT reject_proposal(%s, %s)",
        (proposal.proposal_id, "x" * 5000),
        tables=CONFIG_TABLES,
    )


def test_only_an_open_proposal_can_be_rejected(conn: Conn) -> None:
    assert_rejected(conn, "QT013", "SELECT reject_proposal(424242, 'no')", tables=CONFIG_TABLES)
    first = procs.propose_lane_baseline("default", 30).one(conn)
    procs.reject_proposal(first.proposal_id, "no").one(conn)
    superseded = procs.propose_lane_baseline("default", 40).one(conn)
    procs.propose_lane_baseline("default", 50).one(conn)
    for proposal, state in ((first, "REJECTED"), (superseded, "SUPERSEDED")):
        error = assert_rejected(
            conn,
            "QT023",
            "SELECT reject_proposal(%s, 'again')",
            (proposal.proposal_id,),
            tables=CONFIG_TABLES,
        )
        assert f"is {state}, only PROPOSED can be rejected" in str(error)
    late = procs.propose_lane_baseline("cctp", 30).one(conn)
    set_clock(conn, 86400)
    error = assert_rejected(
        conn,
        "QT023",
        "SELECT reject_proposal(%s, 'late')",
        (late.proposal_id,),
        tables=CONFIG_TABLES,
    )
    assert "expired at" in str(error)
