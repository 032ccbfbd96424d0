"""DAG shapes driven through the procedures: readiness follows completed parents.

Readiness is maintained incrementally (pending_parents counts parents not yet
COMPLETED), so the tests read that counter, never the history, to say why a
node is or is not READY.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from engine import (
    claim,
    create_started,
    node,
    node_states,
    observe,
    plan,
    request_state,
    submit,
)
from rows import T0, callbacks, set_clock


def pending_parents(conn: psycopg.Connection[Any], movement_id: int) -> dict[str, int]:
    rows = conn.execute(
        "SELECT node_key, pending_parents FROM movement_request_nodes WHERE request_id = %s",
        (movement_id,),
    ).fetchall()
    return {key: int(n) for key, n in rows}


def counters(conn: psycopg.Connection[Any], movement_id: int) -> tuple[str, int, int]:
    row = conn.execute(
        "SELECT request_state::text, open_nodes, failed_nodes FROM movement_requests WHERE id = %s",
        (movement_id,),
    ).fetchone()
    assert row is not None
    return str(row[0]), int(row[1]), int(row[2])


def claim_by_key(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    """One dispatcher batch, keyed by node key (tests with a single movement)."""
    return {c["node_key"]: c for c in claim(conn)}


def settle(conn: psycopg.Connection[Any], claimed: dict[str, Any]) -> None:
    """The submit itself finished the work: SUBMITTING -> COMPLETED."""
    assert submit(conn, claimed, settled=True) == "COMPLETED"


def test_chain_readies_each_node_only_after_its_parent_completes(
    conn: psycopg.Connection[Any],
) -> None:
    mid = create_started(conn, plan(node("a"), node("b", ["a"]), node("c", ["b"])), "chain")
    assert node_states(conn, mid) == {"a": "READY", "b": "PENDING", "c": "PENDING"}
    assert pending_parents(conn, mid) == {"a": 0, "b": 1, "c": 1}

    batch = claim_by_key(conn)
    assert set(batch) == {"a"}
    assert submit(conn, batch["a"]) == "SUBMITTED"
    # a side effect that is out but not finished readies nothing
    assert node_states(conn, mid)["b"] == "PENDING"
    assert pending_parents(conn, mid)["b"] == 1
    assert claim(conn) == []

    set_clock(conn, 42)  # first observation of the default lane (60 s baseline x 0.7)
    result = observe(conn, batch["a"]["node_id"], "COMPLETED")
    assert result is not None and result["node_state"] == "COMPLETED"
    assert node_states(conn, mid) == {"a": "COMPLETED", "b": "READY", "c": "PENDING"}
    assert pending_parents(conn, mid) == {"a": 0, "b": 0, "c": 1}

    batch = claim_by_key(conn)
    assert set(batch) == {"b"}
    settle(conn, batch["b"])
    assert node_states(conn, mid) == {"a": "COMPLETED", "b": "COMPLETED", "c": "READY"}
    assert pending_parents(conn, mid)["c"] == 0
    assert counters(conn, mid) == ("EXECUTING", 1, 0)

    batch = claim_by_key(conn)
    assert set(batch) == {"c"}
    settle(conn, batch["c"])
    assert counters(conn, mid) == ("COMPLETED", 0, 0)
    assert callbacks(conn, mid).count("movement.completed") == 1
    assert claim(conn) == []


def test_diamond_join_waits_for_both_parents(conn: psycopg.Connection[Any]) -> None:
    mid = create_started(
        conn,
        plan(node("a"), node("b", ["a"]), node("c", ["a"]), node("d", ["b", "c"])),
        "diamond",
    )
    assert pending_parents(conn, mid) == {"a": 0, "b": 1, "c": 1, "d": 2}
    settle(conn, claim_by_key(conn)["a"])
    assert node_states(conn, mid) == {"a": "COMPLETED", "b": "READY", "c": "READY", "d": "PENDING"}

    batch = claim_by_key(conn)
    assert set(batch) == {"b", "c"}
    settle(conn, batch["b"])
    # one of two parents done: d counts one left and stays PENDING
    assert pending_parents(conn, mid)["d"] == 1
    assert node_states(conn, mid)["d"] == "PENDING"
    assert claim(conn) == []

    settle(conn, batch["c"])
    assert pending_parents(conn, mid)["d"] == 0
    assert node_states(conn, mid)["d"] == "READY"
    batch = claim_by_key(conn)
    assert set(batch) == {"d"}
    settle(conn, batch["d"])
    assert request_state(conn, mid) == "COMPLETED"
    assert callbacks(conn, mid).count("movement.completed") == 1


def test_fan_out_readies_every_child_together(conn: psycopg.Connection[Any]) -> None:
    children = [f"c{i}" for i in range(1, 6)]
    mid = create_started(
        conn, plan(node("root"), *(node(k, ["root"]) for k in children)), "fan-out"
    )
    assert pending_parents(conn, mid) == {"root": 0, **dict.fromkeys(children, 1)}
    batch = claim_by_key(conn)
    assert set(batch) == {"root"}
    for key in children:
        assert node_states(conn, mid)[key] == "PENDING"
    settle(conn, batch["root"])

    assert node_states(conn, mid) == {"root": "COMPLETED", **dict.fromkeys(children, "READY")}
    batch = claim_by_key(conn)
    assert set(batch) == set(children)  # one dispatcher batch takes all five
    for key in children:
        settle(conn, batch[key])
    assert counters(conn, mid) == ("COMPLETED", 0, 0)
    assert callbacks(conn, mid).count("movement.completed") == 1


def test_fan_in_sink_waits_for_every_root(conn: psycopg.Connection[Any]) -> None:
    mid = create_started(
        conn,
        plan(node("r1"), node("r2"), node("r3"), node("sink", ["r1", "r2", "r3"])),
        "fan-in",
    )
    batch = claim_by_key(conn)
    assert set(batch) == {"r1", "r2", "r3"}
    assert pending_parents(conn, mid)["sink"] == 3

    for remaining, key in zip((2, 1), ("r2", "r1"), strict=True):
        settle(conn, batch[key])
        assert pending_parents(conn, mid)["sink"] == remaining
        assert node_states(conn, mid)["sink"] == "PENDING"
        assert claim(conn) == []

    settle(conn, batch["r3"])
    assert pending_parents(conn, mid)["sink"] == 0
    assert node_states(conn, mid)["sink"] == "READY"
    sink = claim_by_key(conn)
    assert set(sink) == {"sink"}
    settle(conn, sink["sink"])
    assert request_state(conn, mid) == "COMPLETED"


@pytest.mark.parametrize(
    "d_parents",
    [pytest.param(["b", "c"], id="diamond"), pytest.param(["b"], id="fan-out")],
)
def test_failed_branch_skips_its_dependants_while_the_sibling_is_observed_to_the_end(
    conn: psycopg.Connection[Any], d_parents: list[str]
) -> None:
    mid = create_started(
        conn,
        plan(node("a"), node("b", ["a"]), node("c", ["a"]), node("d", d_parents)),
        "branch-failure",
    )
    settle(conn, claim_by_key(conn)["a"])
    batch = claim_by_key(conn)
    assert set(batch) == {"b", "c"}
    assert submit(conn, batch["b"]) == "SUBMITTED"
    assert submit(conn, batch["c"]) == "SUBMITTED"

    set_clock(conn, 42)
    c_id, b_id = batch["c"]["node_id"], batch["b"]["node_id"]
    first = observe(conn, c_id, "PENDING")
    assert first is not None and first["node_state"] == "OBSERVING"

    failed = observe(conn, b_id, "FAILED")
    assert failed is not None and failed["node_state"] == "FAILED"
    # d can never run: SKIPPED at once, not when the movement ends
    assert node_states(conn, mid) == {
        "a": "COMPLETED",
        "b": "FAILED",
        "c": "OBSERVING",
        "d": "SKIPPED",
    }
    # c's side effect is out: the movement waits for it
    assert counters(conn, mid) == ("EXECUTING", 1, 1)
    assert "movement.failed" not in callbacks(conn, mid)
    assert claim(conn) == []

    # c is still observed on its own schedule until it settles
    assert first["next_observe_at"] == T0 + timedelta(seconds=48)
    set_clock(conn, 48)
    due = [r[0] for r in conn.execute("SELECT * FROM observe_candidates(50)").fetchall()]
    assert due == [c_id]
    done = observe(conn, c_id, "COMPLETED")
    assert done is not None and done["node_state"] == "COMPLETED"

    assert node_states(conn, mid) == {
        "a": "COMPLETED",
        "b": "FAILED",
        "c": "COMPLETED",
        "d": "SKIPPED",
    }
    assert counters(conn, mid) == ("FAILED", 0, 1)
    events = callbacks(conn, mid)
    assert events.count("movement.failed") == 1
    assert "movement.completed" not in events
    assert claim(conn) == []


def test_root_failure_skips_its_whole_subtree_and_nothing_else(
    conn: psycopg.Connection[Any],
) -> None:
    mid = create_started(
        conn,
        plan(
            node("a"),
            node("b", ["a"]),
            node("c", ["b"]),
            node("d", ["a"]),
            node("e", ["c", "d"]),
            node("other"),
        ),
        "root-failure",
    )
    batch = claim_by_key(conn)
    assert set(batch) == {"a", "other"}
    row = conn.execute(
        "SELECT fail_submit(%s, %s, 'rejected: insufficient funds', false)::text",
        (batch["a"]["node_id"], batch["a"]["claim_secret"]),
    ).fetchone()
    assert row == ("FAILED",)

    assert node_states(conn, mid) == {
        "a": "FAILED",
        "b": "SKIPPED",
        "c": "SKIPPED",
        "d": "SKIPPED",
        "e": "SKIPPED",
        "other": "SUBMITTING",
    }
    # the unrelated root still in flight keeps the movement open
    assert counters(conn, mid) == ("EXECUTING", 1, 1)
    settle(conn, batch["other"])
    assert counters(conn, mid) == ("FAILED", 0, 1)
    assert claim(conn) == []


def test_completing_a_node_never_readies_another_movements_nodes(
    conn: psycopg.Connection[Any],
) -> None:
    the_plan = plan(node("a"), node("b", ["a"]))
    m1 = create_started(conn, the_plan, "movement-1")
    m2 = create_started(conn, the_plan, "movement-2")
    batch = {(c["request_id"], c["node_key"]): c for c in claim(conn)}
    assert set(batch) == {(m1, "a"), (m2, "a")}

    settle(conn, batch[(m1, "a")])
    assert node_states(conn, m1) == {"a": "COMPLETED", "b": "READY"}
    assert node_states(conn, m2) == {"a": "SUBMITTING", "b": "PENDING"}
    assert pending_parents(conn, m2)["b"] == 1
    [b] = claim(conn)
    assert (b["request_id"], b["node_key"]) == (m1, "b")

    settle(conn, b)
    assert counters(conn, m1) == ("COMPLETED", 0, 0)
    assert counters(conn, m2) == ("EXECUTING", 2, 0)
    assert node_states(conn, m2) == {"a": "SUBMITTING", "b": "PENDING"}
    assert callbacks(conn, m2).count("movement.completed") == 0
