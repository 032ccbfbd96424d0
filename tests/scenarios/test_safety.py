"""The rules that protect money.

(a) a side effect in doubt (UNKNOWN) is never dispatched again; only recovery
    evidence moves it;
(b) expiry never abandons a side effect: once one has left READY the expiry is
    waived and the movement runs to the end;
(c) fencing: a worker whose claim was superseded, or whose lease ran out, can
    change nothing;
(d) a cancel that meets a dispatcher mid-claim waits for it and lets the
    claimed side effect settle.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    as_person,
    bind,
    claim,
    create,
    create_started,
    forged_secret,
    node,
    node_ids,
    node_states,
    observe,
    observe_claim,
    pin_clock,
    plan,
    register_sim,
    request_state,
    snapshot,
    submit,
    wait_until_blocked_on_a_lock,
)
from rows import T0, Conn, callbacks, node_row, prepare, request_row, set_clock, time_at

from qtg_runner.db import procs

EXPIRES = 600  # seconds after T0, for the expiry tests


def connect(db: TestDatabase) -> Conn:
    """Another connection like ``conn`` (bound to testnet, clock at T0), no executor registered."""
    c = bind(db.connect())
    pin_clock(c, T0.isoformat())
    return c


def raises(sqlstate: str, conn: Conn, query: str, params: tuple[Any, ...] = ()) -> None:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(query, params)
    assert info.value.sqlstate == sqlstate, info.value


def scalar(conn: Conn, query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def fail_retryable(conn: Conn, claimed: dict[str, Any]) -> str:
    return str(
        scalar(
            conn,
            "SELECT fail_submit(%s, %s, 'rpc timeout', true)::text",
            (claimed["node_id"], claimed["claim_secret"]),
        )
    )


def recovery_claim(conn: Conn, worker: str = "rec") -> list[dict[str, Any]]:
    cur = conn.execute("SELECT * FROM claim_recovery_nodes(%s)", (worker,))
    names = [c.name for c in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def complete_recovery(conn: Conn, node_id: int, secret: str, outcome: str) -> str:
    return str(
        scalar(
            conn,
            "SELECT complete_recovery(%s, %s, %s, '{\"checked\": true}')::text",
            (node_id, secret, outcome),
        )
    )


# ---------------------------------------------------------------- (a) UNKNOWN


# each makes the dispatched node UNKNOWN and returns the secret of its last claim
# and the refusal a dispatcher's or observer's call with it gets: QT021 (the state)
# while that claim is current; QT030 for an observer's claim, which ended with its
# transaction (no secret holds the node)


def unknown_by_fatal_observe(conn: Conn, claimed: dict[str, Any]) -> tuple[str, str]:
    submit(conn, claimed)
    set_clock(conn, 42)
    observe(conn, claimed["node_id"], "PENDING")
    set_clock(conn, 600)  # 10 x the default lane's 60 s baseline
    result, secret = observe_claim(conn, claimed["node_id"], "PENDING")
    assert result is not None and result["observe_phase"] == "fatal" and secret is not None
    return secret, "QT030"


def unknown_by_unknown_outcome(conn: Conn, claimed: dict[str, Any]) -> tuple[str, str]:
    submit(conn, claimed)
    set_clock(conn, 42)
    _, secret = observe_claim(conn, claimed["node_id"], "UNKNOWN")
    assert secret is not None
    return secret, "QT030"


def unknown_by_failed_submit_after_prepare(conn: Conn, claimed: dict[str, Any]) -> tuple[str, str]:
    prepare(conn, claimed)
    assert fail_retryable(conn, claimed) == "UNKNOWN"
    intent = scalar(
        conn,
        "SELECT intent_state FROM node_intents WHERE node_id = %s AND claim_token = 1",
        (claimed["node_id"],),
    )
    assert intent == "PREPARED"  # the signed transaction may be out
    return str(claimed["claim_secret"]), "QT021"


@pytest.mark.parametrize(
    "make_unknown",
    [unknown_by_fatal_observe, unknown_by_unknown_outcome, unknown_by_failed_submit_after_prepare],
    ids=["fatal-observe", "unknown-outcome", "retryable-failure-after-prepare"],
)
def test_unknown_side_effect_is_never_dispatched_again(
    conn: Conn, make_unknown: Callable[[Conn, dict[str, Any]], tuple[str, str]]
) -> None:
    mid = create_started(conn, plan(node("transfer")), "in-doubt")
    (claimed,) = claim(conn)
    node_id = claimed["node_id"]
    secret, refusal = make_unknown(conn, claimed)
    assert node_states(conn, mid) == {"transfer": "UNKNOWN"}

    # many dispatcher rounds, hours to a month later: never handed out
    for hours in (0, 1, 2, 24, 24 * 7, 24 * 30):
        set_clock(conn, 600 + hours * 3600)
        for _ in range(5):
            assert all(c["node_id"] != node_id for c in claim(conn, max_nodes=1000))
        assert node_row(conn, node_id)["node_state"] == "UNKNOWN"
    # the claim itself works: a fresh movement's node is handed out
    other = create_started(conn, plan(node("transfer")), "control")
    assert [c["request_id"] for c in claim(conn)] == [other]

    # no dispatcher or observer call moves it either
    raises(
        refusal, conn, "SELECT complete_submit(%s, %s, 'ref', p_settled => true)", (node_id, secret)
    )
    raises(refusal, conn, "SELECT fail_submit(%s, %s, 'x', true)", (node_id, secret))
    # (a dispatcher's secret never proves an observer's claim)
    raises("QT030", conn, "SELECT complete_observe(%s, %s, 'COMPLETED')", (node_id, secret))
    assert conn.execute("SELECT * FROM claim_observe(%s, 'obs')", (node_id,)).fetchall() == []
    assert node_row(conn, node_id)["node_state"] == "UNKNOWN"

    # recovery without a conclusion keeps it UNKNOWN and undispatchable
    (rec,) = recovery_claim(conn)
    assert (rec["node_id"], rec["node_state"]) == (node_id, "UNKNOWN")
    assert complete_recovery(conn, node_id, rec["claim_secret"], "STILL_UNKNOWN") == "UNKNOWN"
    assert all(c["node_id"] != node_id for c in claim(conn))

    # a side effect prepared or sent may be out: no runner verdict gives it a new one
    set_clock(conn, 600 + 24 * 30 * 3600 + 60)
    (rec,) = recovery_claim(conn)
    raises(
        "QT021",
        conn,
        "SELECT complete_recovery(%s, %s, 'NOT_SUBMITTED')",
        (node_id, rec["claim_secret"]),
    )
    assert all(c["node_id"] != node_id for c in claim(conn))

    # only two operators, from the evidence, make it dispatchable again
    with as_person(conn, "alice"):
        assert procs.requeue_node(node_id, "dropped").one(conn).requeue_state == "REQUESTED"
    assert all(c["node_id"] != node_id for c in claim(conn))
    with as_person(conn, "bob"):
        assert procs.requeue_node(node_id, "agreed").one(conn).node_state == "READY"
    assert [c["node_id"] for c in claim(conn)] == [node_id]


# ---------------------------------------------------------------- (b) expiry


def create_expiring(conn: Conn, the_plan: dict[str, Any], external_id: str) -> int:
    return create(conn, the_plan, external_id, expires_at=time_at(EXPIRES).isoformat())


def expire(conn: Conn, seconds: float) -> int:
    set_clock(conn, seconds)
    return int(scalar(conn, "SELECT expire_movements(100)"))


@pytest.mark.parametrize("state", ["PENDING_APPROVAL", "APPROVED"])
def test_expiry_ends_a_movement_that_has_not_started(conn: Conn, state: str) -> None:
    mid = create_expiring(conn, plan(node("a"), node("b", ["a"])), "unstarted")
    if state == "APPROVED":
        conn.execute("SELECT approve_movement(%s)", (mid,))
    assert request_state(conn, mid) == state

    before = snapshot(conn)
    assert expire(conn, EXPIRES - 1) == 0
    assert snapshot(conn) == before

    assert expire(conn, EXPIRES) == 1
    request = request_row(conn, mid)
    assert (request["request_state"], request["open_nodes"], request["finished_at"]) == (
        "EXPIRED",
        0,
        time_at(EXPIRES),
    )
    assert node_states(conn, mid) == {"a": "SKIPPED", "b": "SKIPPED"}
    assert callbacks(conn, mid).count("movement.expired") == 1
    assert scalar(conn, "SELECT start_approved_movements(10)") == 0
    assert claim(conn) == []


def test_expiry_ends_an_executing_movement_with_nothing_claimed(conn: Conn) -> None:
    mid = create_expiring(conn, plan(node("a"), node("b", ["a"])), "ready-only")
    conn.execute("SELECT approve_movement(%s)", (mid,))
    conn.execute("SELECT start_approved_movements(10)")
    assert node_states(conn, mid) == {"a": "READY", "b": "PENDING"}

    assert expire(conn, EXPIRES) == 1
    assert request_state(conn, mid) == "EXPIRED"
    assert node_states(conn, mid) == {"a": "SKIPPED", "b": "SKIPPED"}
    assert callbacks(conn, mid).count("movement.expired") == 1
    assert claim(conn) == []


def to_submitting(conn: Conn, claimed: dict[str, Any]) -> None:
    pass


def to_submitted(conn: Conn, claimed: dict[str, Any]) -> None:
    submit(conn, claimed)


def to_observing(conn: Conn, claimed: dict[str, Any]) -> None:
    submit(conn, claimed)
    set_clock(conn, 42)
    observe(conn, claimed["node_id"], "PENDING")


def to_unknown(conn: Conn, claimed: dict[str, Any]) -> None:
    prepare(conn, claimed)
    fail_retryable(conn, claimed)


def to_completed(conn: Conn, claimed: dict[str, Any]) -> None:
    submit(conn, claimed, settled=True)


def finish(conn: Conn, claimed: dict[str, Any], state: str) -> None:
    """Drive the first node from ``state`` to COMPLETED the way its worker would."""
    node_id = claimed["node_id"]
    if state == "SUBMITTING":
        submit(conn, claimed, settled=True)
    elif state in ("SUBMITTED", "OBSERVING"):
        result = observe(conn, node_id, "COMPLETED")
        assert result is not None
    elif state == "UNKNOWN":
        (rec,) = recovery_claim(conn)
        assert complete_recovery(conn, node_id, rec["claim_secret"], "COMPLETED") == "COMPLETED"


@pytest.mark.parametrize(
    ("state", "drive"),
    [
        ("SUBMITTING", to_submitting),
        ("SUBMITTED", to_submitted),
        ("OBSERVING", to_observing),
        ("UNKNOWN", to_unknown),
        ("COMPLETED", to_completed),
    ],
)
def test_expiry_is_waived_once_a_side_effect_has_started(
    conn: Conn, state: str, drive: Callable[[Conn, dict[str, Any]], None]
) -> None:
    mid = create_expiring(conn, plan(node("a"), node("b", ["a"])), "started")
    conn.execute("SELECT approve_movement(%s)", (mid,))
    conn.execute("SELECT start_approved_movements(10)")
    (claimed,) = claim(conn)
    drive(conn, claimed)
    assert node_states(conn, mid)["a"] == state

    assert expire(conn, EXPIRES) == 0
    request = request_row(conn, mid)
    assert (request["request_state"], request["stop_reason"], request["expiry_waived_at"]) == (
        "EXECUTING",
        None,
        time_at(EXPIRES),
    )
    waived = conn.execute(
        "SELECT occurred_at FROM audit_outbox WHERE request_id = %s AND action = 'expiry_waived'",
        (mid,),
    ).fetchall()
    assert waived == [(time_at(EXPIRES),)]
    assert node_states(conn, mid)["b"] in ("PENDING", "READY")  # not SKIPPED
    # waived once, for good: a later pass leaves it alone
    assert expire(conn, EXPIRES + 3600) == 0
    assert request_row(conn, mid)["expiry_waived_at"] == time_at(EXPIRES)

    finish(conn, claimed, state)
    later = claim(conn)
    assert [c["node_key"] for c in later] == ["b"]  # the rest of the plan is dispatched
    submit(conn, later[0], settled=True)
    assert request_state(conn, mid) == "COMPLETED"
    events = callbacks(conn, mid)
    assert events.count("movement.completed") == 1
    assert "movement.expired" not in events


def test_expiry_waits_for_an_in_flight_node_without_side_effect(conn: Conn) -> None:
    register_sim(conn, "check", has_side_effect=False)
    mid = create_expiring(conn, plan(node("check", executor="check"), node("pay", ["check"])), "m")
    conn.execute("SELECT approve_movement(%s)", (mid,))
    conn.execute("SELECT start_approved_movements(10)")
    (claimed,) = claim(conn)
    assert claimed["node_key"] == "check" and claimed["has_side_effect"] is False

    assert expire(conn, EXPIRES) == 1
    request = request_row(conn, mid)
    assert (request["request_state"], request["stop_reason"], request["expiry_waived_at"]) == (
        "EXECUTING",
        "EXPIRED",
        None,
    )
    assert node_states(conn, mid) == {"check": "SUBMITTING", "pay": "SKIPPED"}

    submit(conn, claimed, settled=True)
    assert request_state(conn, mid) == "EXPIRED"
    assert node_states(conn, mid) == {"check": "COMPLETED", "pay": "SKIPPED"}
    assert claim(conn) == []  # the payment never goes out
    assert callbacks(conn, mid).count("movement.expired") == 1


def test_expiry_leaves_movements_alone_before_expires_at(conn: Conn) -> None:
    pending = create_expiring(conn, plan(node("a")), "pending")
    executing = create_started(
        conn, plan(node("a")), "executing", expires_at=time_at(EXPIRES).isoformat()
    )
    assert request_state(conn, executing) == "EXECUTING"
    before = snapshot(conn)
    assert expire(conn, EXPIRES - 0.001) == 0
    assert snapshot(conn) == before
    assert expire(conn, EXPIRES) == 2
    assert {request_state(conn, pending), request_state(conn, executing)} == {"EXPIRED"}


# ---------------------------------------------------------------- (c) fencing


def test_recovery_takes_over_an_expired_dispatcher_claim_and_fences_it(db: TestDatabase) -> None:
    dispatcher, recovery = connect(db), connect(db)
    register_sim(dispatcher)
    create_started(dispatcher, plan(node("transfer")), "fenced")
    (claimed,) = claim(dispatcher)  # lease: 300 s
    node_id, stale = claimed["node_id"], claimed["claim_secret"]

    set_clock(recovery, 299)
    assert recovery_claim(recovery) == []  # the lease still holds
    set_clock(recovery, 301)
    (rec,) = recovery_claim(recovery)
    assert (rec["node_id"], rec["node_state"]) == (node_id, "SUBMITTING")
    assert rec["claim_secret"] != stale
    assert node_row(recovery, node_id)["claim_token"] == 2

    set_clock(dispatcher, 302)
    before = snapshot(dispatcher)
    raises(
        "QT030",
        dispatcher,
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0xlate')",
        (node_id, stale),
    )
    raises("QT030", dispatcher, "SELECT complete_submit(%s, %s, 'ref-late')", (node_id, stale))
    raises(
        "QT030",
        dispatcher,
        "SELECT complete_submit(%s, %s, 'ref-late', p_settled => true)",
        (node_id, stale),
    )
    raises("QT030", dispatcher, "SELECT fail_submit(%s, %s, 'boom', true)", (node_id, stale))
    raises("QT030", dispatcher, "SELECT fail_submit(%s, %s, 'boom', false)", (node_id, stale))
    assert snapshot(dispatcher) == before

    # recovery, holding the current claim's secret, decides
    assert complete_recovery(recovery, node_id, rec["claim_secret"], "IN_FLIGHT") == "SUBMITTED"


def test_intent_cannot_be_recorded_once_the_lease_ran_out(conn: Conn) -> None:
    create_started(conn, plan(node("transfer")), "lease")
    (claimed,) = claim(conn)
    node_id, secret = claimed["node_id"], claimed["claim_secret"]
    set_clock(conn, 299)
    prepare(conn, claimed, "0xfirst")  # within the lease

    set_clock(conn, 300)  # the lease ends; no recovery has claimed the node
    before = snapshot(conn)
    raises(
        "QT030",
        conn,
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0xreplacement')",
        (node_id, secret),
    )
    assert snapshot(conn) == before
    hashes = scalar(
        conn, "SELECT signed_tx_hashes FROM node_intents WHERE node_id = %s", (node_id,)
    )
    assert hashes == ["0xfirst"]


def test_a_superseded_recovery_worker_is_fenced(conn: Conn) -> None:
    create_started(conn, plan(node("transfer")), "recovery-fence")
    (claimed,) = claim(conn)
    prepare(conn, claimed)
    fail_retryable(conn, claimed)  # UNKNOWN, recoverable at once
    node_id = claimed["node_id"]

    (first,) = recovery_claim(conn, "rec-1")  # lease: 120 s
    set_clock(conn, 119)
    assert recovery_claim(conn, "rec-2") == []
    set_clock(conn, 120)
    (second,) = recovery_claim(conn, "rec-2")
    assert second["claim_secret"] != first["claim_secret"]
    assert node_row(conn, node_id)["claim_token"] == 3  # dispatcher, rec-1, rec-2

    before = snapshot(conn)
    for outcome in ("COMPLETED", "NOT_SUBMITTED", "STILL_UNKNOWN"):
        raises(
            "QT030",
            conn,
            "SELECT complete_recovery(%s, %s, %s)",
            (node_id, first["claim_secret"], outcome),
        )
    assert snapshot(conn) == before
    assert complete_recovery(conn, node_id, second["claim_secret"], "COMPLETED") == "COMPLETED"


def test_an_observer_with_a_wrong_secret_changes_nothing(conn: Conn) -> None:
    create_started(conn, plan(node("transfer")), "observe-fence")
    (claimed,) = claim(conn)
    submit(conn, claimed)
    set_clock(conn, 42)
    stolen = scalar(
        conn, "SELECT claim_secret FROM claim_observe(%s, 'obs')", (claimed["node_id"],)
    )

    before = snapshot(conn)
    # the dispatcher's secret (the claim before), one no claim handed out, and an
    # observer's claim's own secret outside the transaction that claimed
    for wrong in (claimed["claim_secret"], forged_secret(), stolen):
        raises(
            "QT030",
            conn,
            "SELECT complete_observe(%s, %s, 'COMPLETED')",
            (claimed["node_id"], wrong),
        )
    assert snapshot(conn) == before
    with conn.transaction():
        secret = scalar(
            conn, "SELECT claim_secret FROM claim_observe(%s, 'obs')", (claimed["node_id"],)
        )
        state = scalar(
            conn,
            "SELECT node_state::text FROM complete_observe(%s, %s, 'COMPLETED')",
            (claimed["node_id"], secret),
        )
    assert state == "COMPLETED"


# ---------------------------------------------------------------- (d) cancel


def test_cancel_waits_for_a_dispatcher_mid_claim_and_lets_its_side_effect_settle(
    db: TestDatabase,
) -> None:
    dispatcher, operator, admin = connect(db), connect(db), db.connect()
    register_sim(dispatcher)
    mid = create_started(dispatcher, plan(node("a"), node("b", ["a"])), "cancel-race")
    a_id = node_ids(dispatcher, mid)["a"]

    with ThreadPoolExecutor(max_workers=1) as pool:
        with dispatcher.transaction():
            (claimed,) = claim(dispatcher)
            cancelling = pool.submit(
                lambda: scalar(
                    operator,
                    "SELECT cancel_movement(%s, 'no longer needed')::text",
                    (mid,),
                )
            )
            wait_until_blocked_on_a_lock(admin, operator.info.backend_pid)
            assert not cancelling.done()
        # the claim committed: SUBMITTING with its intent, the cancel proceeds
        assert cancelling.result(timeout=10) == "EXECUTING"

    request = request_row(dispatcher, mid)
    assert (request["request_state"], request["stop_reason"], request["open_nodes"]) == (
        "EXECUTING",
        "CANCELLED",
        1,
    )
    a = node_row(dispatcher, a_id)
    assert (a["node_state"], a["claim_token"], a["claimed_by"]) == ("SUBMITTING", 1, "w1")
    assert node_states(dispatcher, mid) == {"a": "SUBMITTING", "b": "SKIPPED"}
    assert "movement.cancelled" not in callbacks(dispatcher, mid)

    # the dispatcher's submit still lands (its secret is current) and settles the
    # movement; a side effect that completed under a cancel ends it CANCELLED
    assert submit(dispatcher, claimed, settled=True) == "COMPLETED"
    request = request_row(dispatcher, mid)
    assert (request["request_state"], request["open_nodes"], request["failed_nodes"]) == (
        "CANCELLED",
        0,
        0,
    )
    assert node_states(dispatcher, mid) == {"a": "COMPLETED", "b": "SKIPPED"}
    assert callbacks(dispatcher, mid).count("movement.cancelled") == 1
    assert claim(dispatcher) == []


def test_expiry_waits_for_a_dispatcher_mid_claim_and_then_waives(db: TestDatabase) -> None:
    dispatcher, checker, admin = connect(db), connect(db), db.connect()
    register_sim(dispatcher)
    mid = create_started(
        dispatcher,
        plan(node("a"), node("b", ["a"])),
        "expiry-race",
        expires_at=time_at(EXPIRES).isoformat(),
    )
    set_clock(checker, EXPIRES)

    with ThreadPoolExecutor(max_workers=1) as pool:
        with dispatcher.transaction():
            (claimed,) = claim(dispatcher)
            expiring = pool.submit(lambda: scalar(checker, "SELECT expire_movements(100)"))
            wait_until_blocked_on_a_lock(admin, checker.info.backend_pid)
            assert not expiring.done()
        # the checker sees the committed claim: a side effect may be going out
        assert expiring.result(timeout=10) == 0

    request = request_row(dispatcher, mid)
    assert (request["request_state"], request["stop_reason"], request["expiry_waived_at"]) == (
        "EXECUTING",
        None,
        time_at(EXPIRES),
    )
    assert node_states(dispatcher, mid) == {"a": "SUBMITTING", "b": "PENDING"}
    submit(dispatcher, claimed, settled=True)
    (b,) = claim(dispatcher)
    submit(dispatcher, b, settled=True)
    assert request_state(dispatcher, mid) == "COMPLETED"
