"""approve_proposal: PROPOSED -> APPLIED, by another login than the proposer's,
the change applied in the same transaction.

Pins: each kind is applied through its internal apply step (a lane's row,
a template, an executor's schema and description, never its has_side_effect),
recorded (decided_by, decided_at) and audited with the change in one
transaction. A self-approval is refused without an error: a QT022 warning,
PROPOSED returned, an 'approval_refused' audit row kept and nothing else
changed (the typed layer raises it as ``procs.Refused``). Refused with an
error and nothing changed: an unknown proposal (QT013); one APPLIED (but for
its approver, who gets APPLIED back), REJECTED, SUPERSEDED or EXPIRED, or
past its expiry before the sidecar ran
(QT023); a subject changed since the proposal (QT024); a value beyond the
bounds as they are at approval, or a template plan that no longer validates
(QT005, QT001).

The proposer is the ``conn`` fixture's login (postgres); the approver is
bob's own login, a member of qtg_testnet_operator.
"""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    SIM_SCHEMA,
    add_lanes,
    assert_rejected,
    in_one_transaction,
    node,
    plan,
    snapshot,
)
from rows import (
    CONFIG_TABLES,
    Conn,
    as_decimals,
    lane_settings,
    notices,
    person,
    proposal_row,
    set_clock,
    time_at,
)

from qtg_runner.db import procs


@pytest.fixture
def bob(db: TestDatabase) -> Conn:
    return person(db, "bob")


def approve(conn: Conn, proposal_id: int) -> list[tuple[str, str, str, str | None, str | None]]:
    """approve_proposal in its own transaction: APPLIED, and the audit rows it wrote."""
    written = in_one_transaction(conn, "SELECT approve_proposal(%s)::text", (proposal_id,))
    assert written.rows == [("APPLIED",)]
    return written.audit


def test_an_approved_lane_proposal_sets_the_lane(conn: Conn, bob: Conn) -> None:
    proposal = procs.propose_lane_baseline("cctp", 900, min_poll_seconds=5).one(conn)
    set_clock(bob, 60)
    audit = approve(bob, proposal.proposal_id)
    assert audit == [
        ("lane", "cctp", "baseline_set", None, None),
        ("proposal", str(proposal.proposal_id), "applied", "PROPOSED", "APPLIED"),
    ]
    settings = lane_settings(conn, "cctp")
    assert settings is not None
    assert (settings["baseline_seconds"], settings["min_poll_seconds"]) == (
        Decimal(900),
        Decimal(5),
    )
    row = proposal_row(conn, proposal.proposal_id)
    assert as_decimals(row["proposed_value"]) == settings
    assert (row["proposal_state"], row["decided_by"], row["decided_at"]) == (
        "APPLIED",
        bob.info.user,
        time_at(60),
    )


def test_an_approved_template_proposal_registers_the_template(conn: Conn, bob: Conn) -> None:
    bridge = plan(node("burn"), node("mint", ["burn"]))
    proposal = procs.propose_template("bridge", bridge, "burn then mint").one(conn)
    audit = approve(bob, proposal.proposal_id)
    assert [a[:3] for a in audit] == [
        ("template", "bridge", "registered"),
        ("proposal", str(proposal.proposal_id), "applied"),
    ]
    assert conn.execute(
        "SELECT plan, description FROM movement_templates WHERE template_name = 'bridge'"
    ).fetchone() == (bridge, "burn then mint")
    created = procs.create_movement("from-template", 1, template="bridge", params={}).one(conn)
    assert created.created


def test_an_approved_executor_proposal_sets_its_schema_but_never_its_side_effect(
    conn: Conn, bob: Conn
) -> None:
    schema = {**SIM_SCHEMA, "required": ["lane", "amount"]}
    proposal = procs.propose_executor_config("sim", schema, "amount required").one(conn)
    audit = approve(bob, proposal.proposal_id)
    assert [a[:3] for a in audit] == [
        ("executor", "sim", "config_set"),
        ("proposal", str(proposal.proposal_id), "applied"),
    ]
    assert conn.execute(
        "SELECT has_side_effect, node_config_schema, description FROM executors"
        " WHERE executor_key = 'sim'"
    ).fetchone() == (True, schema, "amount required")
    # plans are validated against the new schema
    with pytest.raises(psycopg.Error) as caught:
        procs.create_movement("no-amount", 1, plan=plan(node("a"))).one(conn)
    assert caught.value.sqlstate == "QT001"


def test_the_proposer_cannot_approve_and_the_refusal_is_audited(conn: Conn) -> None:
    warnings = notices(conn)
    proposal = procs.propose_lane_baseline("cctp", 900).one(conn)
    before = snapshot(conn, [t for t in CONFIG_TABLES if t != "audit_outbox"])
    state = conn.execute("SELECT approve_proposal(%s)::text", (proposal.proposal_id,)).fetchone()
    assert state == ("PROPOSED",)
    [(sqlstate, severity, message)] = warnings
    assert (sqlstate, severity) == ("QT022", "WARNING")
    assert "who cannot also approve it" in message
    assert snapshot(conn, [t for t in CONFIG_TABLES if t != "audit_outbox"]) == before
    # the typed layer raises the warning as a refusal
    with pytest.raises(procs.Refused) as refused:
        procs.approve_proposal(proposal.proposal_id).one(conn)
    assert refused.value.sqlstate == "QT022"
    assert conn.execute(
        "SELECT actor, login, action, from_state, to_state FROM audit_outbox"
        " WHERE entity = 'proposal' AND entity_id = %s ORDER BY id",
        (str(proposal.proposal_id),),
    ).fetchall() == [
        ("postgres", "postgres", "proposed", None, "PROPOSED"),
        ("postgres", "postgres", "approval_refused", "PROPOSED", "PROPOSED"),
        ("postgres", "postgres", "approval_refused", "PROPOSED", "PROPOSED"),
    ]


def test_only_an_open_proposal_can_be_approved(conn: Conn, bob: Conn) -> None:
    applied = procs.propose_lane_baseline("a", 100).one(conn)
    procs.approve_proposal(applied.proposal_id).one(bob)
    rejected = procs.propose_lane_baseline("b", 100).one(conn)
    procs.reject_proposal(rejected.proposal_id, "too slow").one(bob)
    superseded = procs.propose_lane_baseline("c", 100).one(conn)
    procs.propose_lane_baseline("c", 200).one(conn)
    expired = procs.propose_lane_baseline("d", 100).one(conn)
    set_clock(conn, 86400)
    assert procs.expire_proposals().one(conn) == 2  # d, and c's successor
    for proposal, state in (
        (applied, "APPLIED"),
        (rejected, "REJECTED"),
        (superseded, "SUPERSEDED"),
        (expired, "EXPIRED"),
    ):
        error = assert_rejected(
            conn if state == "APPLIED" else bob,  # bob applied it: he gets APPLIED back
            "QT023",
            "SELECT approve_proposal(%s)",
            (proposal.proposal_id,),
            tables=CONFIG_TABLES,
        )
        assert f"is {state}, only PROPOSED can be approved" in str(error)
    assert_rejected(bob, "QT013", "SELECT approve_proposal(424242)", tables=CONFIG_TABLES)
    # the approver asking again: APPLIED, as it is, nothing written
    before = [conn.execute(f"SELECT count(*) FROM {t}").fetchone() for t in CONFIG_TABLES]
    assert procs.approve_proposal(applied.proposal_id).one(bob) == "APPLIED"
    assert [conn.execute(f"SELECT count(*) FROM {t}").fetchone() for t in CONFIG_TABLES] == before


def test_a_proposal_past_its_expiry_cannot_be_approved_before_the_sidecar_ran(
    conn: Conn, bob: Conn
) -> None:
    proposal = procs.propose_lane_baseline("cctp", 900).one(conn)
    set_clock(bob, 86400)
    error = assert_rejected(
        bob, "QT023", "SELECT approve_proposal(%s)", (proposal.proposal_id,), tables=CONFIG_TABLES
    )
    assert "expired at" in str(error)
    set_clock(bob, 86399)
    assert procs.approve_proposal(proposal.proposal_id).one(bob) is procs.ProposalState.APPLIED


def test_a_subject_changed_since_the_proposal_is_refused(conn: Conn, bob: Conn) -> None:
    lane = procs.propose_lane_baseline("default", 90).one(conn)
    template = procs.propose_template("bridge", plan(node("a"))).one(conn)
    executor = procs.propose_executor_config("sim", SIM_SCHEMA, "renamed").one(conn)
    # the owner changes each subject behind the proposals (a deploy step)
    procs.upsert_lane_baseline("default", 60, max_poll_seconds=200).one(conn)
    procs.register_template("bridge", plan(node("b"))).one(conn)
    procs.set_executor_config("sim", SIM_SCHEMA, "changed").one(conn)
    for proposal in (lane, template, executor):
        error = assert_rejected(
            bob,
            "QT024",
            "SELECT approve_proposal(%s)",
            (proposal.proposal_id,),
            tables=CONFIG_TABLES,
        )
        assert "has changed since it was proposed" in str(error)


def test_the_bounds_are_checked_again_at_approval(conn: Conn, bob: Conn) -> None:
    lane = procs.propose_lane_baseline("cctp", 900, min_poll_seconds=2).one(conn)
    template = procs.propose_template("bridge", plan(node("a", latency_s=5))).one(conn)
    # the admin tightens a bound; the executor's schema changes under the template
    conn.execute("UPDATE engine_limits SET min_poll_seconds = 3")
    procs.set_executor_config(
        "sim", {**SIM_SCHEMA, "properties": {"lane": {"type": "string"}}}, "no latency"
    ).one(conn)
    error = assert_rejected(
        bob, "QT005", "SELECT approve_proposal(%s)", (lane.proposal_id,), tables=CONFIG_TABLES
    )
    assert "min_poll_seconds must be a number in [3, 3600], got 2" in str(error)
    error = assert_rejected(
        bob, "QT001", "SELECT approve_proposal(%s)", (template.proposal_id,), tables=CONFIG_TABLES
    )
    assert 'unknown key "latency_s"' in str(error)


def test_a_new_template_proposal_approved_with_a_placeholder(conn: Conn, bob: Conn) -> None:
    the_plan = {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": {"$param": "lane"}}}]}
    add_lanes(conn, "fast")
    proposal = procs.propose_template("one", the_plan).one(conn)
    procs.approve_proposal(proposal.proposal_id).one(bob)
    created = procs.create_movement("m", 1, template="one", params={"lane": "fast"}).one(conn)
    assert conn.execute(
        "SELECT lane FROM movement_request_nodes WHERE request_id = %s", (created.movement_id,)
    ).fetchone() == ("fast",)
    # a parameter filled with what the schema refuses is refused at creation
    with pytest.raises(psycopg.Error) as caught:
        procs.create_movement("m2", 1, template="one", params={"lane": 7}).one(conn)
    assert caught.value.sqlstate == "QT001"
