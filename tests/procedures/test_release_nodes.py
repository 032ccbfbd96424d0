"""release_nodes: a claim given back before anything was prepared.

A runner that does not carry a node's executor gives the claim back: the node
is READY again after the lane's release_retry_seconds (or the wait the runner
gives: its endpoint's budget had no turn for the node), the attempt is not
counted, the intent is ABANDONED, and the release is audited. A node whose
intent is PREPARED (something may have been signed), a wrong secret, or a node
not SUBMITTING is refused in its own row and left as it was; a malformed call
is refused whole.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    assert_rejected,
    bind,
    claim,
    create_started,
    forged_secret,
    node,
    node_ids,
    pin_clock,
    plan,
)
from rows import T0, Conn, plant_rule

RELEASE = "SELECT node_id, node_state::text, error_code FROM release_nodes(%s, %s, %s)"
RELEASE_AFTER = (
    "SELECT node_id, node_state::text, error_code FROM release_nodes(%s, %s, %s, %s::numeric)"
)


@pytest.fixture(autouse=True)
def bridge_lane(conn: Conn) -> str:
    """The lane of every node here: a claim given back on it waits 45 s."""
    conn.execute("SELECT upsert_lane_baseline('bridge', 600, p_release_retry_seconds => 45)")
    return "bridge"


def claimed(conn: Conn, external_id: str, **kw: Any) -> tuple[int, int, str]:
    """A one-node movement on the 'bridge' lane, its node claimed: (movement, node, secret)."""
    movement = create_started(conn, plan(node("a", lane="bridge")), external_id, **kw)
    node_id = node_ids(conn, movement)["a"]
    [row] = [c for c in claim(conn, "dispatcher-1") if c["node_id"] == node_id]
    return movement, node_id, row["claim_secret"]


def test_a_released_node_is_ready_again_after_the_lanes_wait_without_spending_an_attempt(
    conn: Conn,
) -> None:
    _, node_id, secret = claimed(conn, "rel-1")

    assert conn.execute(RELEASE, ([node_id], [secret], "no executor sim here")).fetchall() == [
        (node_id, "READY", None)
    ]
    row = conn.execute(
        "SELECT node_state::text, submit_attempts, not_before, lease_until, last_error"
        " FROM movement_request_nodes WHERE id = %s",
        (node_id,),
    ).fetchone()
    assert row == ("READY", 0, T0 + timedelta(seconds=45), None, "no executor sim here")
    intent = conn.execute(
        "SELECT intent_state FROM node_intents WHERE node_id = %s AND claim_token = 1",
        (node_id,),
    ).fetchone()
    assert intent == ("ABANDONED",)
    audit = conn.execute(
        "SELECT actor, action, from_state, to_state, detail->>'reason' FROM audit_outbox"
        " WHERE entity = 'node' AND entity_id = %s ORDER BY id DESC LIMIT 1",
        (str(node_id),),
    ).fetchone()
    assert audit == ("dispatcher-1", "released", "SUBMITTING", "READY", "no executor sim here")

    # not claimable before the wait, claimable after it, as attempt 1 again
    assert claim(conn, "dispatcher-2") == []
    pin_clock(conn, (T0 + timedelta(seconds=45)).isoformat())
    [again] = claim(conn, "dispatcher-2")
    assert (again["node_id"], again["attempt"]) == (node_id, 1)


def test_a_throttled_node_waits_the_wait_given_without_spending_an_attempt(conn: Conn) -> None:
    """A runner whose endpoint budget has no turn for the node (or that met a
    429) gives it back for the budget's wait, not the lane's 45 s: as often as
    it takes, none of fail_submit's ten attempts is spent."""
    _, node_id, secret = claimed(conn, "rel-wait")
    reason = "throttled: rpc:base-sepolia its next turn in 7.5 s"

    for turn in range(12):  # more releases than fail_submit's attempts
        at = T0 + timedelta(seconds=7.5 * turn)
        rows = conn.execute(RELEASE_AFTER, ([node_id], [secret], reason, "7.5")).fetchall()
        assert rows == [(node_id, "READY", None)]
        row = conn.execute(
            "SELECT submit_attempts, not_before FROM movement_request_nodes WHERE id = %s",
            (node_id,),
        ).fetchone()
        assert row == (0, at + timedelta(seconds=7.5))
        assert claim(conn, "dispatcher-2") == []  # not before the wait
        pin_clock(conn, (at + timedelta(seconds=7.5)).isoformat())
        [again] = claim(conn, "dispatcher-1")
        assert (again["node_id"], again["attempt"]) == (node_id, 1)
        secret = again["claim_secret"]

    audit = conn.execute(
        "SELECT action, to_state, detail->>'reason', (detail->>'wait_seconds')::numeric"
        " FROM audit_outbox WHERE entity = 'node' AND entity_id = %s AND action = 'released'"
        " ORDER BY id DESC LIMIT 1",
        (str(node_id),),
    ).fetchone()
    assert audit == ("released", "READY", reason, Decimal("7.5"))


def test_no_wait_keeps_the_lanes_and_a_wait_of_0_is_due_at_once(conn: Conn) -> None:
    _, lane_node, lane_secret = claimed(conn, "rel-lane")
    _, now_node, now_secret = claimed(conn, "rel-now")

    conn.execute(RELEASE_AFTER, ([lane_node], [lane_secret], "no executor", None))
    conn.execute(RELEASE_AFTER, ([now_node], [now_secret], "throttled: iris", 0))

    rows = conn.execute(
        "SELECT id, not_before FROM movement_request_nodes WHERE id = ANY(%s) ORDER BY id",
        ([lane_node, now_node],),
    ).fetchall()
    assert rows == [(lane_node, T0 + timedelta(seconds=45)), (now_node, T0)]
    details = conn.execute(
        "SELECT entity_id::bigint, (detail->>'wait_seconds')::numeric FROM audit_outbox"
        " WHERE action = 'released' ORDER BY entity_id::bigint",
    ).fetchall()
    assert details == [(lane_node, 45), (now_node, 0)]


@pytest.mark.parametrize(
    ("wait", "code"),
    [
        ("-1", "QT002"),
        ("-Infinity", "QT002"),
        ("NaN", "QT005"),
        ("Infinity", "QT005"),
        ("3600.5", "QT005"),
        ("1e-7", "QT005"),  # under the clock's resolution
    ],
)
def test_a_bad_wait_is_refused_whole_and_changes_nothing(
    db: TestDatabase, conn: Conn, wait: str, code: str
) -> None:
    """Played with the runner's login, whose call it is; the test's own
    connection watches the tables."""
    _, node_id, secret = claimed(conn, "rel-bad-wait")
    runner = bind(db.connect(db.runner_dsn("testnet")))
    error = assert_rejected(
        runner,
        code,
        "SELECT * FROM release_nodes(%s, %s, %s, %s::numeric)",
        ([node_id], [secret], "throttled: iris", wait),
        watcher=conn,
    )
    assert "p_wait_seconds" in str(error) or "retry_after_seconds" in str(error)


def test_a_release_under_a_cancel_skips_the_node_and_settles_the_movement(conn: Conn) -> None:
    movement, node_id, secret = claimed(conn, "rel-2")
    conn.execute("SELECT cancel_movement(%s)", (movement,))

    assert conn.execute(RELEASE, ([node_id], [secret], "no executor")).fetchall() == [
        (node_id, "SKIPPED", None)
    ]
    state = conn.execute(
        "SELECT request_state::text, open_nodes FROM movement_requests WHERE id = %s", (movement,)
    ).fetchone()
    assert state == ("CANCELLED", 0)


def test_a_node_that_cannot_be_released_is_refused_in_its_row_while_the_rest_is_released(
    db: TestDatabase, conn: Conn
) -> None:
    """Played with the runner's own login: a runner cannot turn a prepared
    intent (something may have been signed) back into a fresh claim."""
    _, prepared, prepared_secret = claimed(conn, "rel-3")
    _, stale, _ = claimed(conn, "rel-4")
    _, free, free_secret = claimed(conn, "rel-5")
    conn.execute("SELECT record_intent_prepared(%s, %s, 7, '0xabc')", (prepared, prepared_secret))
    intents = "SELECT to_jsonb(i)::text FROM node_intents i WHERE node_id = ANY(%s) ORDER BY id"
    before = conn.execute(intents, ([prepared, stale],)).fetchall()

    runner = bind(db.connect(db.runner_dsn("testnet")))
    rows = runner.execute(
        RELEASE,
        ([prepared, stale, free], [prepared_secret, forged_secret(), free_secret], "no executor"),
    ).fetchall()

    assert rows == [(prepared, None, "QT021"), (stale, None, "QT030"), (free, "READY", None)]
    states = conn.execute(
        "SELECT id, node_state::text FROM movement_request_nodes WHERE id = ANY(%s) ORDER BY id",
        ([prepared, stale],),
    ).fetchall()
    assert states == [(prepared, "SUBMITTING"), (stale, "SUBMITTING")]
    assert conn.execute(intents, ([prepared, stale],)).fetchall() == before


@pytest.mark.parametrize(
    ("ids", "secrets", "reason"),
    [
        ("{1,2}", "{s}", "no executor"),  # one secret per node
        ("{1,1}", "{s,s}", "no executor"),  # a node twice
        ("{NULL}", "{s}", "no executor"),  # no id
        ("{1}", "{s}", " "),  # no reason
    ],
)
def test_a_malformed_release_is_refused_whole(
    conn: Conn, ids: str, secrets: str, reason: str
) -> None:
    _, _, secret = claimed(conn, "rel-6")
    assert_rejected(
        conn,
        "QT002",
        "SELECT * FROM release_nodes(%s::bigint[], %s::text[], %s)",
        (ids, secrets.replace("s", secret), reason),
    )


def test_a_runner_may_release_and_an_operator_may_not(db: TestDatabase, conn: Conn) -> None:
    _, node_id, secret = claimed(conn, "rel-7")
    operator = bind(db.connect(db.operator_dsn("testnet")))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        operator.execute(RELEASE, ([node_id], [secret], "no executor"))
    runner = bind(db.connect(db.runner_dsn("testnet")))
    assert runner.execute(RELEASE, ([node_id], [secret], "no executor")).fetchall() == [
        (node_id, "READY", None)
    ]


def test_a_node_the_engine_cannot_release_is_refused_alone_and_the_others_are_released(
    conn: Conn,
) -> None:
    movement = create_started(
        conn, plan(node("a", lane="bridge"), node("poison", lane="bridge")), "rel-poison"
    )
    ids = node_ids(conn, movement)
    secrets = {c["node_id"]: c["claim_secret"] for c in claim(conn, "dispatcher-1")}
    plant_rule(
        conn, "movement_request_nodes", "NEW.node_key = 'poison' AND NEW.node_state = 'READY'"
    )
    order = [ids["a"], ids["poison"]]

    rows = conn.execute(RELEASE, (order, [secrets[n] for n in order], "no executor")).fetchall()

    assert rows == [(ids["a"], "READY", None), (ids["poison"], None, "QT050")]
    states = dict(
        conn.execute(
            "SELECT node_key, node_state::text FROM movement_request_nodes WHERE request_id = %s",
            (movement,),
        ).fetchall()
    )
    assert states == {"a": "READY", "poison": "SUBMITTING"}
