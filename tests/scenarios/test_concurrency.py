"""Several workers at once, each on its own real connection.

What the seed promises about concurrent replicas:
  * two dispatchers see disjoint sets of READY rows, and every node is claimed
    exactly once (one intent row each);
  * a crashed claimer's locks die with its backend: the rows are READY and
    claimable by the next worker at once;
  * the observer's per-ID claim locks node AND request; a miss (request locked
    elsewhere) leaves no stray node lock behind, with or without the runner's
    savepoint; a hit holds both locks until the observer commits;
  * two observers racing on the same advisory IDs each claim a node at most
    once between them, and the loser neither blocks nor waits;
  * two starters never start a movement twice.

Every connection runs with lock_timeout, so a call that would block fails the
test with lock_not_available instead of hanging it; rounds of work are made to
overlap with barriers, never with sleeps.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from conftest import TestDatabase
from engine import RECEIVER, as_person, bind, claim, node, node_ids, pin_clock, plan, submit
from rows import T0

LATER = (T0 + timedelta(hours=1)).isoformat()  # every submitted node is due for observation
ONE_NODE = json.dumps(plan(node("a")))
BARRIER_TIMEOUT = 10  # seconds; only reached when a worker is stuck
T = TypeVar("T")


# --- setup -------------------------------------------------------------------


def worker_conn(db: TestDatabase, at: str = T0.isoformat(), **kw: Any) -> psycopg.Connection[Any]:
    """A network-bound connection with a pinned clock that refuses to wait on a lock."""
    conn = bind(db.connect(**kw))
    pin_clock(conn, at)
    conn.execute("SET lock_timeout = '2s'")
    if not conn.autocommit:
        conn.commit()
    return conn


@pytest.fixture(autouse=True)
def _conn_does_not_wait_on_a_lock(conn: psycopg.Connection[Any]) -> None:
    """The shared ``conn`` refuses to wait on a lock too, as ``worker_conn`` does."""
    conn.execute("SET lock_timeout = '2s'")


def create_approved(
    conn: psycopg.Connection[Any], count: int, prefix: str = "m-", the_plan: str = ONE_NODE
) -> list[int]:
    """``count`` movements created by alice and approved by bob, in one
    statement, each with its callbacks to RECEIVER."""
    with as_person(conn, "alice"):
        conn.execute(
            """SELECT count(*) FROM generate_series(1, %s) g
                CROSS JOIN LATERAL create_movement(%s || g, 100, %s::jsonb,
                                                   p_callback_url => %s)""",
            (count, prefix, the_plan, RECEIVER),
        )
    with as_person(conn, "bob"):
        rows = conn.execute(
            """SELECT id FROM movement_requests
                WHERE external_id LIKE %s || '%%' AND approve_movement(id) = 'APPROVED'
                ORDER BY 1""",
            (prefix,),
        ).fetchall()
    assert len(rows) == count
    return [int(r[0]) for r in rows]


def create_ready(conn: psycopg.Connection[Any], count: int, prefix: str = "m-") -> set[int]:
    """``count`` started one-node movements; returns their READY node ids."""
    create_approved(conn, count, prefix)
    assert conn.execute("SELECT start_approved_movements(10000)").fetchone() == (count,)
    return ids_in_state(conn, "READY")


def create_submitted(conn: psycopg.Connection[Any], count: int, prefix: str = "m-") -> list[int]:
    """``count`` one-node movements whose node is SUBMITTED; returns the node ids."""
    create_ready(conn, count, prefix)
    claimed = claim(conn, "dispatcher", count)
    assert len(claimed) == count
    for c in claimed:
        assert submit(conn, c) == "SUBMITTED"
    return sorted(c["node_id"] for c in claimed)


def ids_in_state(conn: psycopg.Connection[Any], state: str) -> set[int]:
    rows = conn.execute(
        "SELECT id FROM movement_request_nodes WHERE node_state = %s::qtg.node_state", (state,)
    ).fetchall()
    return {int(r[0]) for r in rows}


def run_threads(*workers: Callable[[], T]) -> list[T]:
    """Run each worker in its own thread; return their results, re-raising any error."""
    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        futures = [pool.submit(w) for w in workers]
        return [f.result(timeout=120) for f in futures]


def can_lock(conn: psycopg.Connection[Any], table: str, row_id: int) -> bool:
    """Whether ``conn`` (autocommit) can lock the row right now, without waiting."""
    assert table in ("movement_request_nodes", "movement_requests")
    try:
        conn.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE NOWAIT", (row_id,))
    except psycopg.errors.LockNotAvailable:
        return False
    return True


def claim_observe(conn: psycopg.Connection[Any], node_id: int, worker: str) -> str | None:
    """claim_observe for one ID: the new claim's secret, or None on a miss."""
    row = conn.execute(
        "SELECT claim_secret FROM claim_observe(%s, %s)", (node_id, worker)
    ).fetchone()
    return None if row is None else str(row[0])


def wait(barrier: threading.Barrier) -> None:
    """Meet the other workers; a worker that has finished breaks the barrier."""
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(timeout=BARRIER_TIMEOUT)


# --- dispatchers -------------------------------------------------------------


def test_a_claim_skips_the_rows_another_open_claim_holds(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    ready = create_ready(conn, 60)
    first, second = worker_conn(db), worker_conn(db)

    with first.transaction():
        held = {c["node_id"] for c in claim(first, "d1", 25)}
        with second.transaction():  # claims while the first batch is still uncommitted
            taken = {c["node_id"] for c in claim(second, "d2", 50)}

    assert len(held) == 25
    assert len(taken) == 35  # everything the first did not hold, without waiting for it
    assert held.isdisjoint(taken)
    assert held | taken == ready


def test_two_dispatchers_claim_every_node_exactly_once(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    ready = create_ready(conn, 500)
    barrier = threading.Barrier(2)

    def dispatcher(name: str) -> Callable[[], list[int]]:
        worker = worker_conn(db)
        rng = random.Random(name)

        def run() -> list[int]:
            mine: list[int] = []
            while True:
                with worker.transaction():
                    batch = claim(worker, name, rng.randint(10, 50))
                    mine += [c["node_id"] for c in batch]
                    wait(barrier)  # both batches are claimed and uncommitted here
                if not batch:
                    barrier.abort()  # the other worker must not wait for this one
                    return mine

        return run

    first, second = run_threads(dispatcher("d1"), dispatcher("d2"))

    assert first and second, "both dispatchers should have claimed work"
    assert set(first).isdisjoint(second)
    assert len(first) + len(second) == len(set(first) | set(second))
    assert set(first) | set(second) == ready
    intents = conn.execute(
        """SELECT node_id, count(*), min(claimed_by), max(claim_token)
             FROM node_intents GROUP BY node_id"""
    ).fetchall()
    assert len(intents) == len(ready)
    assert {node_id for node_id, _, _, _ in intents} == ready
    assert all(count == 1 and token == 1 for _, count, _, token in intents)
    owner = {node_id: claimed_by for node_id, _, claimed_by, _ in intents}
    assert all(owner[n] == "d1" for n in first) and all(owner[n] == "d2" for n in second)
    assert ids_in_state(conn, "SUBMITTING") == ready


def test_a_terminated_claimers_rows_are_claimable_at_once(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    ready = create_ready(conn, 20)
    victim = worker_conn(db, autocommit=False)
    victim_pid = victim.info.backend_pid

    held = {c["node_id"] for c in claim(victim, "doomed", 50)}  # transaction left open
    assert held == ready
    assert claim(conn, "d2", 50) == []  # held by the open claim: skipped, not waited for

    terminated = conn.execute("SELECT pg_terminate_backend(%s, 5000)", (victim_pid,)).fetchone()
    assert terminated == (True,)

    assert ids_in_state(conn, "READY") == ready
    reclaimed = claim(conn, "d2", 50)
    assert {c["node_id"] for c in reclaimed} == ready
    counters = conn.execute(
        "SELECT DISTINCT claim_token FROM movement_request_nodes WHERE id = ANY(%s)", (list(ready),)
    ).fetchall()
    assert counters == [(1,)]  # the dead claim's bump rolled back
    intents = conn.execute("SELECT DISTINCT claimed_by FROM node_intents").fetchall()
    assert intents == [("d2",)]
    with pytest.raises(psycopg.OperationalError):
        victim.execute("SELECT 1")


# --- observers ---------------------------------------------------------------


@pytest.fixture
def observed(db: TestDatabase, conn: psycopg.Connection[Any]) -> Iterator[dict[str, int]]:
    """One movement of two independent nodes, both SUBMITTED and due."""
    movement = create_approved(conn, 1, "obs-", json.dumps(plan(node("a"), node("b"))))[0]
    conn.execute("SELECT start_approved_movements(10)")
    for c in claim(conn, "dispatcher", 10):
        assert submit(conn, c) == "SUBMITTED"
    ids = node_ids(conn, movement)
    yield {"movement": movement, "node": ids["a"], "sibling": ids["b"]}


def lock_request_as_cancel_would(locker: psycopg.Connection[Any], ids: dict[str, int]) -> None:
    locker.execute("SELECT 1 FROM movement_requests WHERE id = %s FOR UPDATE", (ids["movement"],))


def observe_the_sibling(locker: psycopg.Connection[Any], ids: dict[str, int]) -> None:
    """Another observer's hit on the sibling node locks the shared request row."""
    assert claim_observe(locker, ids["sibling"], "obs-a") is not None


@pytest.mark.parametrize(
    "lock_request", [lock_request_as_cancel_would, observe_the_sibling], ids=["cancel", "sibling"]
)
def test_an_observe_miss_on_a_locked_request_leaves_no_node_lock(
    db: TestDatabase,
    observed: dict[str, int],
    lock_request: Callable[[psycopg.Connection[Any], dict[str, int]], None],
) -> None:
    a, b, c = (worker_conn(db, LATER) for _ in range(3))
    node_id = observed["node"]
    assert can_lock(c, "movement_request_nodes", node_id)

    with a.transaction():
        lock_request(a, observed)  # the request is locked; the node is not
        assert can_lock(c, "movement_request_nodes", node_id)

        with b.transaction():  # a bare call, no savepoint of the caller's
            assert claim_observe(b, node_id, "obs-b") is None
            assert can_lock(c, "movement_request_nodes", node_id)

        with b.transaction():  # as the runner does: the claim inside a savepoint
            b.execute("SAVEPOINT observe_claim")
            assert claim_observe(b, node_id, "obs-b") is None
            assert can_lock(c, "movement_request_nodes", node_id)
            b.execute("ROLLBACK TO SAVEPOINT observe_claim")
            assert can_lock(c, "movement_request_nodes", node_id)

    assert claim_observe(b, node_id, "obs-b") is not None  # request free again: a hit


def test_a_batch_claim_passes_over_a_locked_request_and_takes_the_others(
    db: TestDatabase, conn: psycopg.Connection[Any], observed: dict[str, int]
) -> None:
    """claim_observe_batch claims each ID on its own: the nodes of a movement a
    cancel holds are passed over and left unlocked, another movement's node is
    claimed and held until the commit."""
    other = create_approved(conn, 1, "obs-other-", ONE_NODE)[0]
    conn.execute("SELECT start_approved_movements(10)")
    for c in claim(conn, "dispatcher", 10):
        assert submit(conn, c) == "SUBMITTED"
    free = node_ids(conn, other)["a"]
    a, b, c = (worker_conn(db, LATER) for _ in range(3))

    with a.transaction():
        lock_request_as_cancel_would(a, observed)
        with b.transaction():
            rows = b.execute(
                "SELECT node_id FROM claim_observe_batch(%s, 'obs-b')",
                ([observed["node"], free, observed["sibling"]],),
            ).fetchall()
            assert rows == [(free,)]
            for node_id in (observed["node"], observed["sibling"]):
                assert can_lock(c, "movement_request_nodes", node_id)
            assert not can_lock(c, "movement_request_nodes", free)
            assert not can_lock(c, "movement_requests", other)
        assert can_lock(c, "movement_request_nodes", free)


def test_an_observe_hit_holds_node_and_request_until_commit(
    db: TestDatabase, observed: dict[str, int]
) -> None:
    b, c = worker_conn(db, LATER), worker_conn(db, LATER)
    node_id, movement = observed["node"], observed["movement"]

    with b.transaction():
        b.execute("SAVEPOINT observe_claim")
        secret = claim_observe(b, node_id, "obs-b")
        assert secret is not None
        b.execute("RELEASE SAVEPOINT observe_claim")

        # the provider call happens here: nobody can touch the node or its request
        assert not can_lock(c, "movement_request_nodes", node_id)
        assert not can_lock(c, "movement_requests", movement)
        assert claim_observe(c, node_id, "obs-c") is None

        b.execute("SELECT * FROM complete_observe(%s, %s, 'PENDING')", (node_id, secret))
        assert not can_lock(c, "movement_request_nodes", node_id)
        assert not can_lock(c, "movement_requests", movement)

    assert can_lock(c, "movement_request_nodes", node_id)
    assert can_lock(c, "movement_requests", movement)


def test_two_observers_racing_on_the_same_ids_claim_each_node_once(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    submitted = create_submitted(conn, 40)
    barrier = threading.Barrier(2)

    def observer(name: str) -> Callable[[], tuple[list[int], list[int]]]:
        worker = worker_conn(db, LATER)

        def run() -> tuple[list[int], list[int]]:
            candidates = [
                int(r[0]) for r in worker.execute("SELECT * FROM observe_candidates(100)")
            ]
            assert sorted(candidates) == submitted  # both observers see the same advisory IDs
            won: list[int] = []
            lost: list[int] = []
            for node_id in candidates:
                barrier.wait(timeout=BARRIER_TIMEOUT)  # both go for this node at once
                with worker.transaction():
                    worker.execute("SAVEPOINT observe_claim")
                    secret = claim_observe(worker, node_id, name)
                    if secret is None:
                        worker.execute("ROLLBACK TO SAVEPOINT observe_claim")
                    else:
                        worker.execute("RELEASE SAVEPOINT observe_claim")
                    # both have tried while the winner still holds its locks
                    barrier.wait(timeout=BARRIER_TIMEOUT)
                    if secret is None:
                        lost.append(node_id)
                    else:
                        worker.execute(
                            "SELECT * FROM complete_observe(%s, %s, 'COMPLETED')", (node_id, secret)
                        )
                        won.append(node_id)
            return won, lost

        return run

    (won1, lost1), (won2, lost2) = run_threads(observer("o1"), observer("o2"))

    assert sorted(won1 + won2) == submitted  # each node claimed by exactly one observer
    assert sorted(lost1 + lost2) == submitted  # and missed, without blocking, by the other
    assert ids_in_state(conn, "COMPLETED") == set(submitted)
    counts = conn.execute(
        "SELECT observe_count, claim_token, count(*) FROM movement_request_nodes GROUP BY 1, 2"
    ).fetchall()
    assert counts == [(1, 2, len(submitted))]  # one observation, one observer claim each
    completions = conn.execute(
        """SELECT entity_id::bigint, count(*) FROM audit_outbox
            WHERE entity = 'node' AND to_state = 'COMPLETED' GROUP BY 1"""
    ).fetchall()
    assert sorted(completions) == [(n, 1) for n in submitted]


# --- starters ----------------------------------------------------------------


def test_two_starters_start_each_movement_once(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    movements = create_approved(conn, 200)
    barrier = threading.Barrier(2)

    def starter(name: str) -> Callable[[], int]:
        worker = worker_conn(db)
        rng = random.Random(name)

        def run() -> int:
            total = 0
            while True:
                with worker.transaction():
                    row = worker.execute(
                        "SELECT start_approved_movements(%s, %s)", (rng.randint(5, 20), name)
                    ).fetchone()
                    assert row is not None
                    wait(barrier)  # both rounds uncommitted here
                total += int(row[0])
                if row[0] == 0:
                    barrier.abort()
                    return total

        return run

    started = run_threads(starter("s1"), starter("s2"))

    assert sum(started) == len(movements)
    states = conn.execute(
        "SELECT request_state::text, count(*) FROM movement_requests GROUP BY 1"
    ).fetchall()
    assert states == [("EXECUTING", len(movements))]
    executing = Counter(
        int(r[0])
        for r in conn.execute(
            "SELECT request_id FROM callback_outbox WHERE event_type = 'movement.executing'"
        )
    )
    assert executing == Counter({m: 1 for m in movements})
    readied = Counter(
        int(r[0])
        for r in conn.execute(
            """SELECT request_id FROM audit_outbox
                WHERE entity = 'node' AND from_state = 'PENDING' AND to_state = 'READY'"""
        )
    )
    assert readied == Counter({m: 1 for m in movements})
