"""expire_proposals: PROPOSED -> EXPIRED once expires_at is reached.

Pins: nothing before expires_at; at it, every open proposal due is EXPIRED,
decided by the worker named, audited in the transaction; proposals already
decided are left alone; at most p_max a call, oldest expiry first; a bad
p_max or no worker name is QT002 with nothing changed.
"""

from __future__ import annotations

from engine import assert_rejected, in_one_transaction
from rows import CONFIG_TABLES, Conn, proposal_row, set_clock, time_at

from qtg_runner.db import procs


def test_proposals_expire_at_their_expiry_not_before(conn: Conn) -> None:
    early = procs.propose_lane_baseline("a", 30).one(conn)
    set_clock(conn, 600)
    late = procs.propose_lane_baseline("b", 30).one(conn)
    decided = procs.propose_lane_baseline("c", 30).one(conn)
    procs.reject_proposal(decided.proposal_id, "no").one(conn)

    set_clock(conn, 86399)
    assert procs.expire_proposals().one(conn) == 0
    set_clock(conn, 86400)
    written = in_one_transaction(conn, "SELECT expire_proposals(100, 'sweeper')")
    assert written.rows == [(1,)]
    assert written.audit == [("proposal", str(early.proposal_id), "expired", "PROPOSED", "EXPIRED")]
    row = proposal_row(conn, early.proposal_id)
    assert (row["proposal_state"], row["decided_by"], row["decided_at"]) == (
        "EXPIRED",
        "sweeper",
        time_at(86400),
    )
    assert proposal_row(conn, late.proposal_id)["proposal_state"] == "PROPOSED"
    assert proposal_row(conn, decided.proposal_id)["proposal_state"] == "REJECTED"
    assert conn.execute("SELECT count(*) FROM open_proposals").fetchone() == (1,)


def test_at_most_p_max_oldest_first(conn: Conn) -> None:
    ids = []
    for i, lane in enumerate(("a", "b", "c")):
        set_clock(conn, i)
        ids.append(procs.propose_lane_baseline(lane, 30).one(conn).proposal_id)
    set_clock(conn, 90000)
    assert procs.expire_proposals(2).one(conn) == 2
    states = [proposal_row(conn, i)["proposal_state"] for i in ids]
    assert states == ["EXPIRED", "EXPIRED", "PROPOSED"]
    assert procs.expire_proposals(2).one(conn) == 1


def test_bad_arguments_are_refused(conn: Conn) -> None:
    procs.propose_lane_baseline("a", 30).one(conn)
    set_clock(conn, 90000)
    for call in (
        "SELECT expire_proposals(0)",
        "SELECT expire_proposals(10001)",
        "SELECT expire_proposals(NULL)",
        "SELECT expire_proposals(10, '')",
        "SELECT expire_proposals(10, NULL)",
    ):
        assert_rejected(conn, "QT002", call, tables=CONFIG_TABLES)
