"""roll_up_pipeline_counts and the pipeline_counts view it keeps cheap.

pipeline_counts shows how many movements and nodes are in each state. The
finished ones under each entity's below_id come from pipeline_rollup_totals,
which roll_up_pipeline_counts (the pipeline_rollup sidecar, every minute)
adds to; the rest are counted as they are. So the view must equal a count of
the tables at every moment (before any roll-up, between two, while a
transaction that the fence saw running has not committed), and after a
roll-up it must read only the rows made since and those still open. A call
sets its fence first and counts up to it on the next call, once the
transactions that ran at the fence have ended.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase, dsn_for
from engine import (
    bind,
    claim,
    create,
    create_started,
    node,
    node_ids,
    pin_clock,
    plan,
    submit,
)
from rows import T0, migrations_from, movement_in

from qtg_runner.db import procs
from qtg_runner.db.migrate import migrate, rollback

COUNTED = """
    SELECT 'movement', request_state::text, count(*) FROM movement_requests GROUP BY 2
    UNION ALL
    SELECT 'node', node_state::text, count(*) FROM movement_request_nodes GROUP BY 2
     ORDER BY 1, 2
"""


def counts(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int]]:
    return conn.execute("SELECT entity, state, total FROM pipeline_counts ORDER BY 1, 2").fetchall()


def assert_exact(conn: psycopg.Connection[Any]) -> None:
    assert counts(conn) == conn.execute(COUNTED).fetchall()


def roll_up(conn: psycopg.Connection[Any]) -> dict[str, procs.PipelineRollup]:
    return {row.entity: row for row in procs.roll_up_pipeline_counts().all(conn)}


def test_finished_rows_are_counted_once_and_the_view_stays_exact(
    conn: psycopg.Connection[Any],
) -> None:
    for i in range(3):
        movement_in(conn, "COMPLETED", f"done-{i}")
    waiting = create(conn, plan(node("a"), node("b", ["a"])), "waiting")
    running = create_started(conn, plan(node("a"), node("b", ["a"])), "running")
    assert_exact(conn)

    first = roll_up(conn)  # the fence only
    assert {e: (r.below_id, r.rolled) for e, r in first.items()} == {
        "movement": (1, False),
        "node": (1, False),
    }
    assert_exact(conn)

    second = roll_up(conn)
    assert second["movement"].rolled and second["node"].rolled
    assert second["movement"].below_id == running + 1
    assert (second["movement"].open_rows, second["node"].open_rows) == (2, 4)
    assert conn.execute(
        "SELECT entity, state, total FROM pipeline_rollup_totals ORDER BY 1, 2"
    ).fetchall() == [("movement", "COMPLETED", 3), ("node", "COMPLETED", 3)]
    assert_exact(conn)

    # the open rows rolled up finish, a new one comes: still exact, before and after
    for _ in "ab":
        (claimed,) = claim(conn)
        assert claimed["request_id"] == running
        assert submit(conn, claimed, settled=True) == "COMPLETED"
    movement_in(conn, "COMPLETED", "done-late")
    assert_exact(conn)
    roll_up(conn)
    third = roll_up(conn)
    assert third["node"].rolled and third["movement"].rolled
    assert (third["movement"].open_rows, third["node"].open_rows) == (1, 2)  # waiting
    assert conn.execute(
        "SELECT open_ids FROM pipeline_rollups WHERE entity = 'movement'"
    ).fetchone() == ([waiting],)
    assert_exact(conn)
    assert conn.execute(
        "SELECT entity, state, total FROM pipeline_rollup_totals ORDER BY 1, 2"
    ).fetchall() == [("movement", "COMPLETED", 5), ("node", "COMPLETED", 6)]


@pytest.fixture
def other(db: TestDatabase) -> Iterator[psycopg.Connection[Any]]:
    """A second superuser connection, in transactions of its own (not autocommit)."""
    c = bind(db.connect(autocommit=False))
    pin_clock(c, T0.isoformat())
    c.commit()
    yield c
    c.rollback()


def test_a_movement_made_while_the_fence_was_drawn_is_not_lost(
    conn: psycopg.Connection[Any], other: psycopg.Connection[Any]
) -> None:
    """The fence's id was handed out to a transaction that had not committed: the
    next call must not count past it until that transaction has ended, or its
    rows, under below_id and in no open_ids, would be missed for good."""
    movement_in(conn, "COMPLETED", "done-0")
    slow = create(other, plan(node("pay")), "slow")  # not committed
    roll_up(conn)  # the fence: slow's id, its transaction running
    movement_in(conn, "COMPLETED", "done-1")

    held = roll_up(conn)
    assert not held["movement"].rolled and not held["node"].rolled
    assert held["movement"].below_id == 1
    assert_exact(conn)  # slow is not there yet

    other.commit()
    assert roll_up(conn)["movement"].rolled  # up to the fence of the call before
    assert_exact(conn)
    rolled = roll_up(conn)
    assert rolled["movement"].below_id > slow
    assert (
        slow
        in conn.execute(
            "SELECT open_ids FROM pipeline_rollups WHERE entity = 'movement'"
        ).fetchone()[0]
    )
    assert_exact(conn)
    assert ("movement", "PENDING_APPROVAL", 1) in counts(conn)


def test_a_transaction_that_rolls_back_leaves_nothing_counted(
    conn: psycopg.Connection[Any], other: psycopg.Connection[Any]
) -> None:
    movement_in(conn, "COMPLETED", "done-0")
    create(other, plan(node("pay")), "abandoned")
    roll_up(conn)
    other.rollback()
    roll_up(conn)
    assert roll_up(conn)["movement"].rolled
    assert_exact(conn)
    assert ("movement", "PENDING_APPROVAL", 1) not in counts(conn)


def test_a_long_history_is_counted_p_max_ids_a_call(conn: psycopg.Connection[Any]) -> None:
    """The first roll-up of a network with a long history counts it in calls of
    p_max ids each (the runner's statement timeout bounds a call), the view
    exact between them, and says how many ids are left (behind)."""
    for i in range(5):
        movement_in(conn, "COMPLETED", f"done-{i}")
    waiting = create(conn, plan(node("a")), "waiting")
    first = procs.roll_up_pipeline_counts(2).all(conn)
    assert [(r.entity, r.rolled, r.behind) for r in first] == [
        ("movement", False, 6),  # no transaction ran at the fence: all 6 may be counted
        ("node", False, 6),
    ]
    seen = []
    while True:
        rows = {r.entity: r for r in procs.roll_up_pipeline_counts(2).all(conn)}
        assert_exact(conn)
        seen.append((rows["movement"].below_id, rows["movement"].behind))
        if not rows["movement"].behind:
            break
    assert seen == [(3, 4), (5, 2), (7, 0)]
    assert conn.execute(
        "SELECT open_ids FROM pipeline_rollups WHERE entity = 'movement'"
    ).fetchone() == ([waiting],)


def test_a_transaction_in_another_database_does_not_hold_the_fence(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    """A transaction of another database in the cluster cannot write this one's
    rows: a fence that waited for it would stay held for as long as a neighbour
    (another test, another application) kept a transaction open."""
    neighbour = db.connect(dsn_for(db.dsn, dbname="postgres"), autocommit=False)
    neighbour.execute("SELECT 1")  # its transaction runs, with a virtual id of its own
    movement_in(conn, "COMPLETED", "done-0")
    assert [(r.entity, r.behind) for r in procs.roll_up_pipeline_counts().all(conn)] == [
        ("movement", 1),
        ("node", 1),
    ]
    assert roll_up(conn)["movement"].rolled
    assert conn.execute(
        "SELECT entity, state, total FROM pipeline_rollup_totals ORDER BY 1, 2"
    ).fetchall() == [("movement", "COMPLETED", 1), ("node", "COMPLETED", 1)]
    neighbour.rollback()


@pytest.mark.slow
def test_an_autovacuum_worker_does_not_hold_the_fence(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    """An autovacuum worker writes no row of the engine, and its VACUUM of a
    large table may run for hours: a fence that waited for it would be held as
    long. Here a table vacuumed at the slowest cost keeps a worker busy in this
    database (autovacuum wakes each second for the test) while the roll-up
    draws its fence and counts up to it."""
    admin = db.connect()
    admin.execute(
        """CREATE TABLE public.vacuumed (id bigint)
           WITH (autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0,
                 autovacuum_vacuum_cost_delay = 100, autovacuum_vacuum_cost_limit = 1)"""
    )
    admin.execute("INSERT INTO public.vacuumed SELECT generate_series(1, 100000)")
    admin.execute("DELETE FROM public.vacuumed")
    admin.execute("ALTER SYSTEM SET autovacuum_naptime = 1")
    admin.execute("SELECT pg_reload_conf()")
    try:
        deadline = time.monotonic() + 60
        while not admin.execute(
            """SELECT 1 FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
                WHERE a.backend_type = 'autovacuum worker' AND a.datname = current_database()
                  AND a.query LIKE '%%vacuumed%%' AND l.locktype = 'virtualxid'"""
        ).fetchone():
            assert time.monotonic() < deadline, "no autovacuum worker came within 60 s"
            time.sleep(0.1)
        movement_in(conn, "COMPLETED", "done-0")
        first = procs.roll_up_pipeline_counts().all(conn)
        assert [(r.entity, r.behind) for r in first] == [("movement", 1), ("node", 1)]
        assert roll_up(conn)["movement"].rolled
        assert admin.execute(  # still at work: it ran through both calls
            "SELECT 1 FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
            " AND datname = current_database()"
        ).fetchone()
    finally:
        admin.execute("ALTER SYSTEM RESET autovacuum_naptime")
        admin.execute("SELECT pg_reload_conf()")
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE backend_type = 'autovacuum worker' AND datname = current_database()"
        )
    assert_exact(conn)


def test_needs_read_committed(db: TestDatabase, conn: psycopg.Connection[Any]) -> None:
    movement_in(conn, "COMPLETED", "done-0")
    roll_up(conn)
    other = bind(db.connect(autocommit=False))
    other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    before = other.execute("SELECT to_jsonb(r)::text FROM pipeline_rollups r ORDER BY 1").fetchall()
    with pytest.raises(psycopg.Error) as refused:
        other.execute("SELECT * FROM roll_up_pipeline_counts()")
    assert refused.value.sqlstate == "QT002"
    assert "READ COMMITTED" in str(refused.value)
    other.rollback()
    after = conn.execute("SELECT to_jsonb(r)::text FROM pipeline_rollups r ORDER BY 1").fetchall()
    assert after == before


def test_the_runner_login_rolls_up_and_an_operator_may_not(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    movement_in(conn, "COMPLETED", "done-0")
    runner = bind(db.connect(db.runner_dsn("testnet")))
    roll_up(runner)
    assert roll_up(runner)["node"].rolled
    assert_exact(conn)
    operator = bind(db.connect(db.operator_dsn("testnet")))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        operator.execute("SELECT * FROM roll_up_pipeline_counts()")
    assert counts(operator) == counts(conn)  # the view is the operators' to read


def test_another_logins_open_transaction_holds_the_fence_of_a_runner_login(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    """The fence leaves out only what cannot write here; a login of this database
    cannot hide its transaction from it. The runner's calls (as the owner) see
    another user's session with its database and user alone, and that is
    enough: an operator's open transaction holds the fence until it ends."""
    movement_in(conn, "COMPLETED", "done-0")
    operator = bind(db.connect(db.operator_dsn("testnet"), autocommit=False))
    operator.execute("SELECT count(*) FROM pipeline_counts")  # its transaction runs
    runner = bind(db.connect(db.runner_dsn("testnet")))
    roll_up(runner)  # the fence: the operator's transaction running
    held = roll_up(runner)
    assert not held["movement"].rolled and not held["node"].rolled
    operator.commit()
    assert roll_up(runner)["movement"].rolled
    assert_exact(conn)


def test_the_migration_rolls_up_the_history_there_is(
    db: TestDatabase, conn: psycopg.Connection[Any]
) -> None:
    """0039 on a network with a history: its totals and open ids are counted as
    it is applied (its triggers hold the writers off meanwhile), so the view
    is cheap before the sidecar ever runs."""
    for i in range(2):
        movement_in(conn, "COMPLETED", f"done-{i}")
    waiting = create(conn, plan(node("a"), node("b", ["a"])), "waiting")
    nodes = sorted(node_ids(conn, waiting).values())
    since = migrations_from("0039_pipeline_rollups")
    assert rollback(db.dsn, len(since)) == since[::-1]
    migrate(db.dsn)

    assert conn.execute(
        "SELECT entity, below_id, open_ids, fence_id FROM pipeline_rollups ORDER BY 1"
    ).fetchall() == [
        ("movement", waiting + 1, [waiting], None),
        ("node", max(nodes) + 1, nodes, None),
    ]
    assert conn.execute(
        "SELECT entity, state, total FROM pipeline_rollup_totals ORDER BY 1, 2"
    ).fetchall() == [("movement", "COMPLETED", 2), ("node", "COMPLETED", 2)]
    assert_exact(conn)
    roll_up(conn)
    assert roll_up(conn)["node"].rolled
    assert_exact(conn)
