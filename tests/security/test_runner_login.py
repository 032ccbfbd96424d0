"""What a runner's own login cannot do, though it may call the procedures.

- Register an executor at all, and so turn off the side effect of one that
  has nodes (recovery, expiry and retries trust that flag, and a node of an
  executor "without a side effect" whose intent was prepared would be retried
  blindly): registration is the admin's deploy step (register_executor is in
  sql/functions/admin/, granted to nobody); the QT041 rule that holds even
  for the admin is in tests/procedures/test_register_executor.py.
- Learn another claim's secret or counter from a refusal: a stale call is told
  its secret is not the current claim's, never what the current claim is (the
  whole attack on claim secrets is in test_claim_secret.py).
- Act unseen: every audit row names the login of the session that wrote it
  beside the worker it was written for.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    SIM_SCHEMA,
    bind,
    claim,
    create_started,
    forged_secret,
    node,
    node_ids,
    plan,
    snapshot,
)

Conn = psycopg.Connection[Any]


@pytest.fixture
def runner(db: TestDatabase) -> Conn:
    return bind(db.connect(db.runner_dsn("testnet")))


@pytest.mark.parametrize("has_side_effect", [False, True])
def test_a_runner_cannot_register_an_executor_at_all(
    conn: Conn, runner: Conn, has_side_effect: bool
) -> None:
    create_started(conn, plan(node("a")), "flip-1")
    before = snapshot(conn)
    for key in ("sim", "fresh"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            runner.execute(
                "SELECT register_executor(%s, %s, %s::jsonb)",
                (key, has_side_effect, json.dumps(SIM_SCHEMA)),
            )
    assert snapshot(conn) == before


def test_a_runner_reads_the_registry_it_checks_at_start(conn: Conn, runner: Conn) -> None:
    assert runner.execute("SELECT * FROM registered_executors()").fetchall() == [
        ("sim", True, SIM_SCHEMA)
    ]


@pytest.mark.parametrize(
    "call",
    [
        "SELECT complete_submit(%s, %s, 'forged-ref')",
        "SELECT * FROM complete_submit_batch(ARRAY[%s]::bigint[], ARRAY[%s]::text[], '{forged}')",
        "SELECT fail_submit(%s, %s, 'x', true)",
        "SELECT * FROM release_nodes(ARRAY[%s]::bigint[], ARRAY[%s]::text[], 'x')",
    ],
)
def test_a_refused_stale_call_never_shows_the_current_claim(
    conn: Conn, runner: Conn, call: str
) -> None:
    movement = create_started(conn, plan(node("a")), "leak-1")
    node_id = node_ids(conn, movement)["a"]
    [owner] = claim(conn, "owner")
    token = 7_357_911  # the claim counter, made distinctive so a leak would show
    conn.execute(
        "UPDATE movement_request_nodes SET claim_token = %s WHERE id = %s", (token, node_id)
    )
    conn.execute("UPDATE node_intents SET claim_token = %s WHERE node_id = %s", (token, node_id))
    before = snapshot(conn)

    said = ""
    try:
        said = " ".join(
            str(v)
            for row in runner.execute(call, (node_id, forged_secret())).fetchall()
            for v in row
        )
    except psycopg.Error as exc:
        assert exc.sqlstate == "QT030"
        said = f"{exc} {exc.diag.message_hint or ''} {exc.diag.message_detail or ''}"
    assert "QT030" in said or "stale claim" in said
    assert str(token) not in said
    assert owner["claim_secret"] not in said
    assert snapshot(conn) == before


def test_every_audit_row_names_the_login_that_made_it_beside_the_actor(
    conn: Conn, runner: Conn
) -> None:
    movement = create_started(conn, plan(node("a")), "login-1")
    node_id = node_ids(conn, movement)["a"]
    [(secret,)] = runner.execute(
        "SELECT claim_secret FROM claim_ready_nodes('dispatcher-7', 1)"
    ).fetchall()
    runner.execute("SELECT complete_submit(%s, %s, 'ref')", (node_id, secret))

    rows = conn.execute(
        "SELECT actor, login, from_state, to_state FROM audit_outbox"
        " WHERE entity = 'node' AND entity_id = %s ORDER BY id",
        (str(node_id),),
    ).fetchall()
    admin = conn.execute("SELECT session_user").fetchone()
    login = runner.execute("SELECT session_user").fetchone()  # the runner's own login
    assert admin is not None and login is not None
    assert rows == [
        ("node_dispatcher", admin[0], "PENDING", "READY"),  # started by the admin's session
        ("dispatcher-7", login[0], "READY", "SUBMITTING"),
        ("dispatcher-7", login[0], "SUBMITTING", "SUBMITTED"),
    ]


def test_notifications_carry_nothing_another_network_could_use(
    db: TestDatabase, conn: Conn
) -> None:
    # PostgreSQL lets any login LISTEN on any channel: a mainnet runner can hear
    # testnet's wake-ups. What it hears is a kind of work, never an id or amount.
    eavesdropper = psycopg.connect(db.runner_dsn("mainnet"), autocommit=True)
    try:
        eavesdropper.execute('LISTEN "qtg_testnet_work"')
        movement = create_started(conn, plan(node("a"), node("b", ["a"])), "ears-1")
        (claimed,) = claim(conn)
        conn.execute(
            "SELECT complete_submit(%s, %s, 'ref-1', p_settled => true)",
            (claimed["node_id"], claimed["claim_secret"]),
        )
        heard = [n.payload for n in eavesdropper.notifies(timeout=1, stop_after=10)]
    finally:
        eavesdropper.close()
    assert heard, "the test heard nothing: it proves nothing"
    assert set(heard) <= {"ready", "approved"}
    assert not any(str(movement) in p or "ref-1" in p for p in heard)
