"""propose_callback_target: (none) -> PROPOSED, a receiver of signed callbacks,
registered when a second operator approves (approve_proposal applies it
through the admin's upsert_callback_target): how an HTTP caller registers a
target (POST /v1/callback-targets).

Pins: the proposal holds the target's whole value beside what it is now; no
target changes until a second login approves; the proposer's approval is a
QT022 warning; the approver asking again gets APPLIED and nothing is written
(another login: QT023); the proposer proposing the same value again gets the
same open proposal (no supersede). Refused, with nothing changed: what
upsert_callback_target refuses (check_callback_target, QT002).
"""

from __future__ import annotations

import pytest
from engine import as_person, assert_rejected, in_one_transaction
from rows import CONFIG_TABLES, Conn, proposal_row

from qtg_runner.db import procs

TARGET = ("ops", "https://hooks.example.com/qtg", "env:QTG_CB_OPS")


def target(conn: Conn, name: str = "ops") -> tuple[object, ...] | None:
    return conn.execute(
        "SELECT url, secret_ref, allow_private, enabled FROM callback_targets"
        " WHERE target_name = %s",
        (name,),
    ).fetchone()


def test_proposed_by_one_login_registered_when_a_second_approves(conn: Conn) -> None:
    with as_person(conn, "alice"):
        written = in_one_transaction(
            conn, "SELECT * FROM propose_callback_target(%s, %s, %s)", TARGET
        )
        [(proposal_id, state, _, _)] = written.rows
        assert state == "PROPOSED"
        assert written.audit == [("proposal", str(proposal_id), "proposed", None, "PROPOSED")]
        row = proposal_row(conn, proposal_id)
        assert (row["kind"], row["subject"], row["before_value"]) == (
            "callback_target",
            "ops",
            None,
        )
        assert row["proposed_value"] == {
            "url": TARGET[1],
            "secret_ref": TARGET[2],
            "allow_private": False,
            "enabled": True,
        }
        assert target(conn) is None
        # a retry of the same call: the same open proposal, nothing superseded
        again = procs.propose_callback_target(*TARGET).one(conn)
        assert again.proposal_id == proposal_id
        assert conn.execute("SELECT count(*) FROM config_proposals").fetchone() == (1,)
        with pytest.raises(procs.Refused) as refused:
            procs.approve_proposal(proposal_id).one(conn)
        assert refused.value.sqlstate == "QT022"
        assert target(conn) is None
    with as_person(conn, "bob"):
        assert procs.approve_proposal(proposal_id).one(conn) == "APPLIED"
        assert target(conn) == (TARGET[1], TARGET[2], False, True)
        audit = conn.execute("SELECT count(*) FROM audit_outbox").fetchone()
        assert procs.approve_proposal(proposal_id).one(conn) == "APPLIED"  # idempotent
        assert conn.execute("SELECT count(*) FROM audit_outbox").fetchone() == audit
    with as_person(conn, "carol"):
        assert_rejected(conn, "QT023", "SELECT approve_proposal(%s)", (proposal_id,))


def test_a_change_of_a_target_is_proposed_against_its_value(conn: Conn) -> None:
    procs.upsert_callback_target(*TARGET).one(conn)
    with as_person(conn, "alice"):
        proposal = procs.propose_callback_target(*TARGET, enabled=False).one(conn)
        row = proposal_row(conn, proposal.proposal_id)
        assert row["before_value"]["enabled"] is True
        assert row["proposed_value"]["enabled"] is False
        assert_rejected(
            conn,
            "QT002",
            "SELECT propose_callback_target(%s, %s, %s)",
            TARGET,
            tables=CONFIG_TABLES,
        )  # the value it has already
    with as_person(conn, "bob"):
        procs.approve_proposal(proposal.proposal_id).one(conn)
    assert target(conn) == (TARGET[1], TARGET[2], False, False)


@pytest.mark.parametrize(
    "args",
    [
        ("Ops", TARGET[1], TARGET[2]),
        ("ops", "ftp://hooks.example.com/", TARGET[2]),
        ("ops", TARGET[1], "whsec_c2VjcmV0"),
        ("ops", TARGET[1], "vault:x"),
    ],
)
def test_what_the_admin_step_refuses_is_refused(conn: Conn, args: tuple[str, str, str]) -> None:
    with as_person(conn, "alice"):
        assert_rejected(
            conn,
            "QT002",
            "SELECT propose_callback_target(%s, %s, %s)",
            args,
            tables=(*CONFIG_TABLES, "callback_targets"),
        )
