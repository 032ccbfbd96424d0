"""Every operator action is a procedure psql CALLs, named as the CLI names it
(`CALL movement_approve(21)` as `qtg movement approve 21`), beside the
function a client SELECTs. Two operator logins play a session each through
the real psql client, in their default search_path (no SET: a login lands in
its network): alice creates, bob approves, alice's own approval is the QT022
warning and changes nothing; a priority set, a cancel, a proposal approved and one rejected,
a requeue asked by one and applied by the other, a quarantined node released,
and a pause made by one operator (its own resume refused) and resumed by
the other. Each CALL prints its
result row, the INOUT parameters with their names."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import psycopg
import pytest
from conftest import Login, TestDatabase
from engine import bind, claim, create_started, node, node_ids, plan, register_sim

from qtg_runner.db import procs
from qtg_runner.db.embedded import bin_dir

Conn = psycopg.Connection[Any]
PLAN = json.dumps(plan(node("a")))


def psql(login: Login, script: str, **variables: object) -> tuple[list[dict[str, str]], str]:
    """``script`` run by the psql client as ``login``, with the psql variables
    given: the one-row results it printed (column -> value), and what it wrote
    to stderr (the warnings, with their SQLSTATE)."""
    args = [str(bin_dir() / "psql"), login.dsn, "-X", "-A", "-F", "|", "-P", "footer=off"]
    args += ["-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose"]
    for name, value in variables.items():
        args += ["-v", f"{name}={value}"]
    done = subprocess.run(args, input=script, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [
        dict(zip(header.split("|"), row.split("|"), strict=True))
        for header, row in zip(lines[::2], lines[1::2], strict=True)
    ]
    return rows, done.stderr


@pytest.fixture
def admin(db: TestDatabase) -> Conn:
    conn = bind(db.connect())
    register_sim(conn)
    return conn


def test_two_operators_call_every_action_in_psql(db: TestDatabase, admin: Conn) -> None:
    alice = db.login("alice", "qtg_testnet_operator")
    bob = db.login("bob", "qtg_testnet_operator")
    # a node UNKNOWN after its prepared side effect, and a quarantined one (the runners')
    running = create_started(admin, plan(node("u"), node("q")), "psql-running")
    nodes = node_ids(admin, running)
    secrets = {c["node_id"]: c["claim_secret"] for c in claim(admin)}
    unknown, quarantined = nodes["u"], nodes["q"]
    procs.record_intent_prepared(unknown, secrets[unknown], nonce=1, signed_tx_hash="0xcc").one(
        admin
    )
    procs.fail_submit(unknown, secrets[unknown], "timeout", True).one(admin)
    procs.quarantine_nodes([quarantined], [secrets[quarantined]], ["poison"]).all(admin)

    # alice: creates two movements (the first twice), tries her own approval,
    # proposes two lanes, asks for a requeue, releases the quarantined node,
    # pauses the sim venue and tries to resume it herself
    rows, warnings = psql(
        alice,
        """
        CALL movement_create('psql-1', 5, :'plan');
        CALL movement_create('psql-1', 5, :'plan');
        CALL movement_create('psql-2', 7, p_plan => :'plan', p_priority => 3);
        SELECT movement_id FROM movements WHERE external_id = 'psql-1' \\gset
        CALL movement_approve(:movement_id);
        SELECT proposal_id FROM propose_lane_baseline('psql_fast', 30);
        SELECT proposal_id FROM propose_lane_baseline('psql_slow', 90);
        CALL node_requeue(:unknown, 'the transaction was dropped');
        CALL quarantine_release(:quarantined, 'the executor was fixed');
        CALL breaker_trip('venue', 'sim', 'the sim is down');
        CALL breaker_reset('venue', 'sim');
        """,
        plan=PLAN,
        unknown=unknown,
        quarantined=quarantined,
    )
    first, again, second, own, fast, slow, requeue, released, trip, refused = rows
    assert first["created"] == "t" and again == {**first, "created": "f"}
    assert second["created"] == "t" and second["movement_id"] != first["movement_id"]
    assert own == {"movement_state": "PENDING_APPROVAL"}
    assert warnings.count("WARNING:  QT022:") == 2  # her own approval, her own resume
    assert requeue["requeue_state"] == "REQUESTED" and requeue["node_state"] == "UNKNOWN"
    assert released == {"node_state": "SUBMITTING"}
    assert trip == {"breaker_state": "TRIPPED", "tripped": "t"}
    assert refused == {"breaker_state": "TRIPPED"}

    # bob: approves, reprioritises and cancels, decides both proposals, applies the requeue, and
    # pulls the brake too: alice's pause stays
    rows, warnings = psql(
        bob,
        """
        CALL movement_approve(:first);
        CALL movement_priority(:first, 4, 'payroll first');
        CALL movement_cancel(:second, 'sent twice');
        CALL proposal_approve(:fast);
        CALL proposal_reject(:slow, 'too slow for the lane');
        CALL node_requeue(:unknown, 'agreed: dropped');
        CALL breaker_trip('venue', 'sim', 'still down');
        """,
        first=first["movement_id"],
        second=second["movement_id"],
        fast=fast["proposal_id"],
        slow=slow["proposal_id"],
        unknown=unknown,
    )
    assert warnings == ""
    assert rows == [
        {"movement_state": "APPROVED"},
        {"priority": "4"},
        {"movement_state": "CANCELLED"},
        {"proposal_state": "APPLIED"},
        {"proposal_state": "REJECTED"},
        {"requeue_id": requeue["requeue_id"], "requeue_state": "APPLIED", "node_state": "READY"},
        {"breaker_state": "TRIPPED", "tripped": "f"},
    ]

    # another operator than the pauser resumes it
    assert psql(bob, "CALL breaker_reset('venue', 'sim');")[0] == [{"breaker_state": "CLOSED"}]

    # what the sessions did, as the admin reads it
    assert admin.execute(
        "SELECT external_id, state::text, created_by, approved_by, priority FROM movements"
        " WHERE external_id LIKE 'psql-_' ORDER BY 1"
    ).fetchall() == [
        ("psql-1", "APPROVED", alice.name, bob.name, 4),
        ("psql-2", "CANCELLED", alice.name, None, 3),
    ]
    assert admin.execute(
        "SELECT lane, baseline_seconds FROM lane_baselines WHERE lane LIKE 'psql%'"
    ).fetchall() == [("psql_fast", 30)]
    assert admin.execute(
        "SELECT id, node_state::text, quarantined_at IS NULL FROM movement_request_nodes"
        " WHERE request_id = %s ORDER BY id = %s DESC",
        (running, unknown),
    ).fetchall() == [(unknown, "READY", True), (quarantined, "SUBMITTING", True)]
    assert admin.execute("SELECT count(*) FROM breakers").fetchone() == (0,)
    audit = admin.execute(
        "SELECT actor, action, from_state, to_state, detail->>'withdrawn_reset_request_by'"
        " FROM audit_outbox WHERE entity = 'breaker' ORDER BY id"
    ).fetchall()
    assert audit == [
        (alice.name, "breaker_tripped", "CLOSED", "TRIPPED", None),
        (alice.name, "breaker_reset_refused", "TRIPPED", "TRIPPED", None),
        (bob.name, "breaker_tripped", "TRIPPED", "TRIPPED", None),
        (bob.name, "breaker_reset", "TRIPPED", "CLOSED", None),
    ]
    assert admin.execute(
        "SELECT actor FROM audit_outbox WHERE action = 'approval_refused'"
    ).fetchall() == [(alice.name,)]


@pytest.mark.parametrize("group", ["qtg_testnet_runner", "qtg_testnet_reader"])
@pytest.mark.parametrize("statement", ["SELECT approve_movement(%s)", "CALL movement_approve(%s)"])
def test_a_runner_or_a_reader_may_neither_select_nor_call_an_operators_action(
    db: TestDatabase, admin: Conn, group: str, statement: str
) -> None:
    """Procedures are granted as functions are (0052_routine_grants): a routine
    left to PUBLIC would let any login of the server run it as its owner."""
    created = procs.create_movement("psql-3", 5, plan=plan(node("a"))).one(admin)
    login = db.connect(db.login("someone", group).dsn)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        login.execute(statement, (created.movement_id,))
    assert admin.execute(
        "SELECT state::text FROM movements WHERE movement_id = %s", (created.movement_id,)
    ).fetchone() == ("PENDING_APPROVAL",)
