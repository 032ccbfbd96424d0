"""propose_lane_baseline: (none) -> PROPOSED, a lane's pacing for a second operator to approve.

Pins: the proposal holds all ten settings (a setting not given keeps the
lane's value, or the default lane's for a lane without a row) beside the
lane's row as it is (NULL for a new lane), the proposer's login, and an expiry
engine_limits' proposal_lifetime_seconds away; it is audited in its
transaction, and the lane itself does not change. A newer proposal for the
lane supersedes the open one. Refused, with nothing changed: every setting
beyond its bound (QT005, the message states the bound; NaN and Infinity too),
a bound the admin tightened in engine_limits, an empty lane name or no
baseline (QT002), a proposal that changes nothing (QT002).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from engine import assert_rejected, in_one_transaction
from rows import CONFIG_TABLES, Conn, as_decimals, lane_settings, proposal_row, time_at

from qtg_runner.db import procs


def propose_sql(settings: dict[str, Any]) -> str:
    """A propose_lane_baseline call: the lane, the baseline, then ``settings`` by name."""
    named = "".join(f", p_{name} => %s::numeric" for name in settings)
    return f"SELECT * FROM propose_lane_baseline(%s, %s::numeric{named})"


def test_a_proposal_holds_every_setting_and_changes_nothing_yet(conn: Conn) -> None:
    procs.upsert_lane_baseline("cctp", 900, min_poll_seconds=5, max_poll_seconds=120).one(conn)
    before = lane_settings(conn, "cctp")
    written = in_one_transaction(
        conn,
        "SELECT * FROM propose_lane_baseline('cctp', 600, p_poll_fraction => 0.2)",
    )
    [(proposal_id, state, expires_at, supersedes)] = written.rows
    assert (state, expires_at, supersedes) == ("PROPOSED", time_at(86400), None)
    assert written.audit == [("proposal", str(proposal_id), "proposed", None, "PROPOSED")]
    assert lane_settings(conn, "cctp") == before  # nothing applied before an approval

    row = proposal_row(conn, proposal_id)
    assert (row["kind"], row["subject"], row["proposed_by"], row["proposed_at"]) == (
        "lane_baseline",
        "cctp",
        "postgres",
        time_at(0),
    )
    assert as_decimals(row["before_value"]) == before
    after = {**before, "baseline_seconds": Decimal(600), "poll_fraction": Decimal("0.2")}
    assert as_decimals(row["proposed_value"]) == after


def test_a_new_lane_starts_from_the_default_lanes_settings(conn: Conn) -> None:
    default = lane_settings(conn, "default")
    assert default is not None
    proposal = procs.propose_lane_baseline("hop", 1200).one(conn)
    row = proposal_row(conn, proposal.proposal_id)
    assert row["before_value"] is None
    assert as_decimals(row["proposed_value"]) == {
        **default,
        "baseline_seconds": Decimal(1200),
    }
    assert lane_settings(conn, "hop") is None


def test_a_newer_proposal_supersedes_the_open_one(conn: Conn) -> None:
    first = procs.propose_lane_baseline("cctp", 600).one(conn)
    written = in_one_transaction(conn, "SELECT * FROM propose_lane_baseline('cctp', 700)")
    [(second_id, state, _, supersedes)] = written.rows
    assert (state, supersedes) == ("PROPOSED", first.proposal_id)
    assert written.audit == [
        ("proposal", str(first.proposal_id), "superseded", "PROPOSED", "SUPERSEDED"),
        ("proposal", str(second_id), "proposed", None, "PROPOSED"),
    ]
    old = proposal_row(conn, first.proposal_id)
    assert (old["proposal_state"], old["decided_by"], old["decided_at"]) == (
        "SUPERSEDED",
        "postgres",
        time_at(0),
    )
    # a proposal of another lane is left alone
    other = procs.propose_lane_baseline("ccip", 600).one(conn)
    procs.propose_lane_baseline("cctp", 800).one(conn)
    assert proposal_row(conn, other.proposal_id)["proposal_state"] == "PROPOSED"


BEYOND = [
    # (settings, what the message says)
    ({"baseline": 0}, "baseline_seconds must be a number in (0, 86400], got 0"),
    ({"baseline": -5}, "baseline_seconds must be a number in (0, 86400]"),
    ({"baseline": 86401}, "baseline_seconds must be a number in (0, 86400], got 86401"),
    ({"baseline": "NaN"}, 'baseline_seconds must be a number in (0, 86400], got "NaN"'),
    ({"baseline": "Infinity"}, "baseline_seconds must be a number in (0, 86400]"),
    ({"min_poll_seconds": "0.5"}, "min_poll_seconds must be a number in [1, 3600], got 0.5"),
    ({"min_poll_seconds": 0}, "min_poll_seconds must be a number in [1, 3600]"),
    ({"max_poll_seconds": 3601}, "max_poll_seconds must be a number in [1, 3600]"),
    ({"min_poll_seconds": 60, "max_poll_seconds": 30}, "max_poll_seconds (30) must be at least"),
    ({"first_poll_fraction": 0}, "first_poll_fraction must be a number in (0, 1]"),
    ({"poll_fraction": "1.5"}, "poll_fraction must be a number in (0, 1]"),
    ({"poll_fraction": "-Infinity"}, "poll_fraction must be a number in (0, 1]"),
    ({"over_factor": "0.5"}, "over_factor must be a number in [1, 1000]"),
    ({"fatal_factor": 5000}, "fatal_factor must be a number in (1, 1000]"),
    (
        {"over_factor": 4, "fatal_factor": 3},
        "fatal_factor (3) must be greater than over_factor (4)",
    ),
    ({"observe_error_retry_seconds": "0.1"}, "observe_error_retry_seconds must be a number in [1"),
    ({"recovery_retry_seconds": 7200}, "recovery_retry_seconds must be a number in [1, 3600]"),
    ({"release_retry_seconds": "NaN"}, "release_retry_seconds must be a number in [1, 3600]"),
]


@pytest.mark.parametrize(
    ("settings", "says"),
    BEYOND,
    ids=[",".join(f"{k}={v}" for k, v in s.items()) for s, _ in BEYOND],
)
def test_a_setting_beyond_its_bound_is_refused_with_the_bound(
    conn: Conn, settings: dict[str, Any], says: str
) -> None:
    settings = dict(settings)
    baseline = settings.pop("baseline", 60)
    for lane in ("default", "new_lane"):
        error = assert_rejected(
            conn,
            "QT005",
            propose_sql(settings),
            (lane, str(baseline), *map(str, settings.values())),
            tables=CONFIG_TABLES,
        )
        assert f"lane {lane}: {says}" in str(error)


def test_the_bounds_the_admin_sets_in_engine_limits_hold(conn: Conn) -> None:
    procs.propose_lane_baseline("cctp", 600, min_poll_seconds=2).one(conn)
    conn.execute(
        "UPDATE engine_limits SET min_poll_seconds = 5, max_baseline_seconds = 300,"
        " proposal_lifetime_seconds = 600"
    )
    error = assert_rejected(
        conn, "QT005", "SELECT * FROM propose_lane_baseline('cctp', 200, 2)", tables=CONFIG_TABLES
    )
    assert "min_poll_seconds must be a number in [5, 3600], got 2" in str(error)
    error = assert_rejected(
        conn, "QT005", "SELECT * FROM propose_lane_baseline('cctp', 600, 5)", tables=CONFIG_TABLES
    )
    assert "baseline_seconds must be a number in (0, 300], got 600" in str(error)
    proposal = procs.propose_lane_baseline("cctp", 200, 5, observe_error_retry_seconds=5).one(conn)
    assert proposal.expires_at - time_at(0) == timedelta(seconds=600)


def test_an_empty_lane_no_baseline_or_no_change_is_refused(conn: Conn) -> None:
    for lane in ("", "  ", None, "x" * 201):
        assert_rejected(
            conn,
            "QT002",
            "SELECT * FROM propose_lane_baseline(%s, 60)",
            (lane,),
            tables=CONFIG_TABLES,
        )
    assert_rejected(
        conn, "QT002", "SELECT * FROM propose_lane_baseline('cctp', NULL)", tables=CONFIG_TABLES
    )
    # the default lane as it is
    error = assert_rejected(
        conn,
        "QT002",
        "SELECT * FROM propose_lane_baseline('default', 60, p_min_poll_seconds => 1)",
        tables=CONFIG_TABLES,
    )
    assert "would change nothing" in str(error)
