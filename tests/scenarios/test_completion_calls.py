"""The completion calls refuse a node in a wrong from-state, and an unknown node.

record_intent_prepared, complete_submit, fail_submit, complete_observe and
complete_recovery each accept a node only in their from-states: presented with
the secret of the node's current claim, so that only the state is wrong, they
raise QT021 naming the state the node is in; a node never claimed, or no
longer held (an observer's claim ends with its transaction), has no claim to
present (QT030), and complete_observe takes an observer's claim alone, which
no node outside its from-states can have (a dispatcher's or recovery's secret:
QT030); for a node that does not exist QT011, changing nothing
(``assert_rejected``). One movement holds a node in every node state.
"""

from __future__ import annotations

from engine import (
    assert_rejected,
    claim,
    create_started,
    forged_secret,
    node,
    node_ids,
    node_states,
    pin_clock,
    plan,
    request_state,
    submit,
)
from rows import ONE, Conn, fail, iso_at, prepare

from qtg_runner.db import procs

ALL_NODE_STATES = (
    "PENDING",
    "READY",
    "SUBMITTING",
    "SUBMITTED",
    "OBSERVING",
    "UNKNOWN",
    "COMPLETED",
    "FAILED",
    "SKIPPED",
)

COMPLETION_CALLS: dict[str, tuple[str, set[str]]] = {
    # call: (SQL taking node id and claim secret, the from-states it accepts)
    "record_intent_prepared": (
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0x1')",
        {"SUBMITTING"},
    ),
    "complete_submit": ("SELECT complete_submit(%s, %s, 'ref')", {"SUBMITTING"}),
    "fail_submit": ("SELECT fail_submit(%s, %s, 'err', false)", {"SUBMITTING"}),
    "complete_observe": (
        "SELECT * FROM complete_observe(%s, %s, 'COMPLETED')",
        {"SUBMITTED", "OBSERVING"},
    ),
    "complete_recovery": (
        "SELECT complete_recovery(%s, %s, 'COMPLETED')",
        {"UNKNOWN", "SUBMITTING"},
    ),
}


def a_node_in_every_state(conn: Conn) -> dict[str, tuple[int, str | None]]:
    """One movement with a node in each node state; returns state -> (node id,
    the secret of its current claim, None for a node never claimed)."""
    the_plan = plan(
        node("ready"),
        node("pending", ["ready"]),
        node("submitting"),
        node("submitted"),
        node("observing"),
        node("unknown"),
        node("completed"),
        node("failed"),
        node("skipped", ["failed"]),
    )
    movement_id = create_started(conn, the_plan, "every-state")
    claims = {c["node_key"]: c for c in claim(conn)}
    fail(conn, claims["ready"], retryable=True, after=3600)  # READY again, backing off
    submit(conn, claims["submitted"])
    submit(conn, claims["observing"])
    submit(conn, claims["completed"], settled=True)
    prepare(conn, claims["unknown"])
    fail(conn, claims["unknown"], retryable=True)
    fail(conn, claims["failed"], retryable=False)
    pin_clock(conn, iso_at(42))
    with conn.transaction():
        observer = procs.claim_observe(claims["observing"]["node_id"], "obs").one(conn)
        procs.complete_observe(observer.node_id, observer.claim_secret, "PENDING").one(conn)
    ids = node_ids(conn, movement_id)
    assert node_states(conn, movement_id) == {s.lower(): s for s in ALL_NODE_STATES}
    assert request_state(conn, movement_id) == "EXECUTING"
    current = {key: c["claim_secret"] for key, c in claims.items()}
    current["observing"] = None  # the observer's claim ended with its transaction
    return {state: (ids[state.lower()], current.get(state.lower())) for state in ALL_NODE_STATES}


def test_completion_calls_refuse_a_wrong_from_state(conn: Conn) -> None:
    nodes = a_node_in_every_state(conn)
    for call, (query, accepted) in COMPLETION_CALLS.items():
        for state in ALL_NODE_STATES:
            if state in accepted:
                continue
            node_id, secret = nodes[state]
            if secret is None or call == "complete_observe":
                # no claim holds it (never claimed, or an observer's claim is over),
                # or not an observer's claim: the secret proves nothing here
                assert_rejected(conn, "QT030", query, (node_id, secret or forged_secret()))
                continue
            # the current claim's secret: only the state is wrong
            error = assert_rejected(conn, "QT021", query, (node_id, secret))
            assert f"is {state}" in str(error), f"{call} from {state}: {error}"


def test_completion_calls_refuse_an_unknown_node(conn: Conn) -> None:
    create_started(conn, ONE, "m1")
    for query, _ in COMPLETION_CALLS.values():
        assert_rejected(conn, "QT011", query, (424242, forged_secret()))
