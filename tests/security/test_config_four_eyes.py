"""Configuration is four-eyes too: lane pacing (the default lane included),
templates and an executor's configuration change only by a proposal that a
second person approves, within bounds, before it expires. Every attack is
played with real logins: alice and bob, each a login of their own in
qtg_testnet_operator; a runner's login; a mainnet operator's login.

- One operator alone cannot change any of them: the apply steps are not
  hers to call, her proposal changes nothing, her own approval is refused
  (a QT022 warning, the refusal audited under her login).
- An approver approves what he saw: a proposal re-made after he looked at
  it is a new proposal, and the one he saw can no longer be approved.
- A value beyond its bound is refused when proposed (QT005, the bound in
  the message), and again when approved if the bound was tightened.
- An expired proposal cannot be approved, and the sidecar
  (template_proposal_expiration) closes it, on a pinned clock, no sleep.
- A runner's login can neither propose nor decide; a mainnet operator can
  neither see nor approve a testnet proposal.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import SIM_SCHEMA, bind, node, plan, snapshot
from psycopg.conninfo import conninfo_to_dict
from rows import CONFIG_TABLES, Conn, iso_at, person, proposal_row, set_clock

from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.loop import WorkerContext
from qtg_runner.workers import template_proposal_expiration

PROPOSALS: dict[str, procs.Call[procs.Proposal]] = {
    "default lane pacing": procs.propose_lane_baseline("default", 5, min_poll_seconds=1),
    "template": procs.propose_template("bridge", plan(node("burn"), node("mint", ["burn"]))),
    "executor config": procs.propose_executor_config(
        "sim", {**SIM_SCHEMA, "required": ["lane", "amount"]}, "amount required"
    ),
}
# the apply steps, which are the owner's (deploy) and approve_proposal's alone
APPLY_STEPS = [
    "SELECT upsert_lane_baseline('default', 1, 0)",
    'SELECT register_template(\'bridge\', \'{"nodes": [{"key": "a", "executor": "sim",'
    ' "config": {"lane": "x"}}]}\'::jsonb)',
    "SELECT set_executor_config('sim', '{}'::jsonb, 'x')",
    "UPDATE lane_baselines SET min_poll_seconds = 0",
    "UPDATE config_proposals SET proposal_state = 'APPLIED'",
]


@pytest.fixture
def alice(db: TestDatabase) -> Conn:
    return person(db, "alice")


@pytest.fixture
def bob(db: TestDatabase) -> Conn:
    return person(db, "bob")


def config(conn: Conn) -> dict[str, list[Any]]:
    """What the proposals may change: lanes, templates, executors."""
    return snapshot(conn, ["lane_baselines", "movement_templates", "executors"])


@pytest.mark.parametrize("proposal", PROPOSALS.values(), ids=PROPOSALS.keys())
def test_one_operator_alone_cannot_change_the_configuration(
    conn: Conn, alice: Conn, bob: Conn, proposal: procs.Call[procs.Proposal]
) -> None:
    before = config(conn)
    for statement in APPLY_STEPS:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            alice.execute(statement)
    made = proposal.one(alice)
    assert config(conn) == before  # a proposal changes nothing

    with pytest.raises(procs.Refused) as refused:
        procs.approve_proposal(made.proposal_id).one(alice)
    assert refused.value.sqlstate == "QT022"
    assert config(conn) == before
    refused = conn.execute(
        "SELECT actor, login FROM audit_outbox"
        " WHERE action = 'approval_refused' AND entity_id = %s",
        (str(made.proposal_id),),
    ).fetchall()
    assert refused == [(alice.info.user, alice.info.user)]

    # the second pair of eyes
    assert procs.approve_proposal(made.proposal_id).one(bob) is procs.ProposalState.APPLIED
    assert config(conn) != before
    row = proposal_row(conn, made.proposal_id)
    assert (row["proposed_by"], row["decided_by"]) == (alice.info.user, bob.info.user)


def test_an_approver_approves_what_he_saw_not_a_value_made_after(
    conn: Conn, alice: Conn, bob: Conn
) -> None:
    seen = procs.propose_lane_baseline("default", 120).one(alice)
    [shown] = bob.execute(
        "SELECT proposal_id, changes FROM open_proposals WHERE subject = 'default'"
    ).fetchall()
    assert shown == (seen.proposal_id, {"baseline_seconds": {"from": 60, "to": 120}})
    # alice proposes again, with another value, before bob approves
    procs.propose_lane_baseline("default", 86400, max_poll_seconds=3600).one(alice)
    before = snapshot(conn, CONFIG_TABLES)
    with pytest.raises(psycopg.Error) as caught:
        procs.approve_proposal(seen.proposal_id).one(bob)
    assert caught.value.sqlstate == "QT023"
    assert snapshot(conn, CONFIG_TABLES) == before


@pytest.mark.parametrize(
    ("call", "says"),
    [
        ("SELECT * FROM propose_lane_baseline('default', 60, 0.1)", "min_poll_seconds"),
        ("SELECT * FROM propose_lane_baseline('default', 'NaN')", "baseline_seconds"),
        (
            "SELECT * FROM propose_lane_baseline('default', 60, p_fatal_factor => 'Infinity')",
            "fatal",
        ),
        ("SELECT * FROM propose_lane_baseline('cctp', 864000)", "baseline_seconds"),
        (
            "SELECT * FROM propose_lane_baseline('cctp', 60, p_release_retry_seconds => 1e9)",
            "release",
        ),
    ],
)
def test_a_proposal_beyond_its_bounds_is_refused(
    conn: Conn, alice: Conn, call: str, says: str
) -> None:
    before = snapshot(conn, CONFIG_TABLES)
    with pytest.raises(psycopg.Error) as caught:
        alice.execute(call)
    assert caught.value.sqlstate == "QT005"
    assert says in str(caught.value) and "must be a number in" in str(caught.value)
    assert snapshot(conn, CONFIG_TABLES) == before


def test_a_bound_tightened_after_the_proposal_holds_at_approval(
    conn: Conn, alice: Conn, bob: Conn
) -> None:
    made = procs.propose_lane_baseline("default", 60, min_poll_seconds=2).one(alice)
    conn.execute("UPDATE engine_limits SET min_poll_seconds = 10")  # the admin's bound
    before = snapshot(conn, CONFIG_TABLES)
    with pytest.raises(psycopg.Error) as caught:
        procs.approve_proposal(made.proposal_id).one(bob)
    assert caught.value.sqlstate == "QT005"
    assert snapshot(conn, CONFIG_TABLES) == before


def test_an_expired_proposal_cannot_be_approved(conn: Conn, alice: Conn, bob: Conn) -> None:
    made = procs.propose_lane_baseline("default", 30).one(alice)
    set_clock(bob, 86400)
    before = snapshot(conn, CONFIG_TABLES)
    with pytest.raises(psycopg.Error) as caught:
        procs.approve_proposal(made.proposal_id).one(bob)
    assert caught.value.sqlstate == "QT023"
    assert "expired" in str(caught.value)
    assert snapshot(conn, CONFIG_TABLES) == before


def test_a_runner_login_can_neither_propose_nor_decide(db: TestDatabase, alice: Conn) -> None:
    made = procs.propose_lane_baseline("default", 30).one(alice)
    runner = person(db, "runner1", "qtg_testnet_runner")
    for call in [
        *PROPOSALS.values(),
        procs.approve_proposal(made.proposal_id),
        procs.reject_proposal(made.proposal_id, "no"),
    ]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            call.one(runner)
    for statement in APPLY_STEPS:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            runner.execute(statement)
    # expiring is its job, and expires only what is due
    assert procs.expire_proposals().one(runner) == 0
    assert proposal_row(bind(db.connect()), made.proposal_id)["proposal_state"] == "PROPOSED"


def test_a_mainnet_operator_cannot_approve_a_testnet_proposal(
    db: TestDatabase, conn: Conn, alice: Conn
) -> None:
    made = procs.propose_lane_baseline("default", 30).one(alice)
    mallory_login = db.login("mallory", "qtg_mainnet_operator")
    mallory = bind(db.connect(mallory_login.dsn), "mainnet")
    before = snapshot(conn, CONFIG_TABLES)
    for statement in (
        f"SELECT testnet.approve_proposal({made.proposal_id})",
        f"SELECT testnet.reject_proposal({made.proposal_id}, 'no')",
        "SELECT * FROM testnet.open_proposals",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            mallory.execute(statement)
    # mainnet's own procedure knows only mainnet's proposals
    with pytest.raises(psycopg.Error) as caught:
        procs.approve_proposal(made.proposal_id).one(mallory)
    assert caught.value.sqlstate == "QT013"
    assert snapshot(conn, CONFIG_TABLES) == before


def test_the_sidecar_expires_proposals_on_a_pinned_clock(
    db: TestDatabase, conn: Conn, alice: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    due = procs.propose_lane_baseline("default", 30).one(alice)
    set_clock(alice, 3600)
    later = procs.propose_template("bridge", plan(node("a"))).one(alice)
    # the runner's sessions read the test database's clock one day after T0
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(86400)}")
    conninfo = bound_conninfo(db.runner_dsn("testnet"), "testnet", "sweep")

    async def sweep() -> int:
        async with open_pool(conninfo, name="sweep") as pool:
            ctx = WorkerContext("testnet", pool, {}, "sweep:1")
            worker_id = ctx.worker_id("template_proposal_expiration")
            return await template_proposal_expiration.batch(ctx, worker_id)

    assert asyncio.run(sweep()) == 1
    row = proposal_row(conn, due.proposal_id)
    assert row["proposal_state"] == "EXPIRED"
    assert row["decided_by"] == "template_proposal_expiration@sweep:1"
    assert proposal_row(conn, later.proposal_id)["proposal_state"] == "PROPOSED"
    runner_login = conninfo_to_dict(db.runner_dsn("testnet"))["user"]
    assert conn.execute(
        "SELECT login FROM audit_outbox WHERE action = 'expired' AND entity_id = %s",
        (str(due.proposal_id),),
    ).fetchone() == (runner_login,)
