"""Every input has a bound (engine_limits), played with the runner's and an
operator's own logins: a lease or a wait of years, NaN and Infinity, a
document or a text beyond its size, a plan beyond its node count are refused
with QT005 and a message that says the limit, and nothing changes. In a batch
report, the side effects of the other nodes went out: only the oversized
element is refused, in its own row. Heartbeat rows of long-silent instances
are pruned, and a runner login cannot make up more than 64 instances of a
worker or 256 worker names (in one call or over many): a new one takes the
place of the oldest dead one, and with none dead it is refused (QT005).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import bind, claim, create_started, node, node_ids, plan, snapshot
from rows import T0, iso_at

Conn = psycopg.Connection[Any]
BIG = json.dumps({"log": "x" * 70_000})  # beyond the default 64 KiB


@pytest.fixture
def runner(db: TestDatabase) -> Conn:
    conn = bind(db.connect(db.runner_dsn("testnet")))
    conn.execute("SELECT set_config('qtg.now', %s, false)", (T0.isoformat(),))
    return conn


def refused(conn: Conn, attacker: Conn, query: str, params: tuple[Any, ...], limit: str) -> None:
    before = snapshot(conn)
    with pytest.raises(psycopg.Error) as caught:
        attacker.execute(query, params)
    assert caught.value.sqlstate == "QT005", caught.value
    assert limit in str(caught.value), caught.value
    assert snapshot(conn) == before


def claimed(conn: Conn, external_id: str) -> tuple[int, str]:
    movement = create_started(conn, plan(node("a")), external_id)
    node_id = node_ids(conn, movement)["a"]
    [row] = [c for c in claim(conn, "owner") if c["node_id"] == node_id]
    return node_id, row["claim_secret"]


@pytest.mark.parametrize("lease", ["1e12", "NaN", "Infinity", "3601"])
def test_a_lease_beyond_the_limit_is_refused(conn: Conn, runner: Conn, lease: str) -> None:
    create_started(conn, plan(node("a")), "bound-1")
    refused(
        conn,
        runner,
        "SELECT * FROM claim_ready_nodes('w', 10, %s::numeric)",
        (lease,),
        "at most 3600 seconds",
    )


@pytest.mark.parametrize("wait", ["1e9", "NaN", "Infinity"])
def test_a_retry_hint_beyond_the_limit_is_refused(conn: Conn, runner: Conn, wait: str) -> None:
    node_id, secret = claimed(conn, "bound-2")
    refused(
        conn,
        runner,
        "SELECT fail_submit(%s, %s, 'busy', true, %s::numeric)",
        (node_id, secret, wait),
        "at most 3600 seconds",
    )


def test_evidence_beyond_the_limit_is_refused(conn: Conn, runner: Conn) -> None:
    node_id, secret = claimed(conn, "bound-3")
    conn.execute("SELECT complete_submit(%s, %s, 'ref')", (node_id, secret))
    conn.execute("SELECT set_config('qtg.now', %s, false)", (iso_at(60),))
    runner.execute("SELECT set_config('qtg.now', %s, false)", (iso_at(60),))
    with runner.transaction():
        [(obs_secret,)] = runner.execute(
            "SELECT claim_secret FROM claim_observe(%s, 'obs')", (node_id,)
        )
        with pytest.raises(psycopg.Error) as caught, runner.transaction():
            runner.execute(
                "SELECT * FROM complete_observe(%s, %s, 'PENDING', %s::jsonb)",
                (node_id, obs_secret, BIG),
            )
    assert caught.value.sqlstate == "QT005"
    assert "limit of 65536 bytes" in str(caught.value)
    assert conn.execute(
        "SELECT node_state::text, evidence FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone() == ("SUBMITTED", None)


def test_an_error_text_beyond_the_limit_is_refused(conn: Conn, runner: Conn) -> None:
    node_id, secret = claimed(conn, "bound-4")
    refused(
        conn,
        runner,
        "SELECT fail_submit(%s, %s, %s, true)",
        (node_id, secret, "e" * 5000),
        "limit of 4096 bytes",
    )


def test_one_oversized_report_is_refused_in_its_row_and_the_rest_of_the_batch_goes_on(
    conn: Conn, runner: Conn
) -> None:
    (big, big_secret), (ok, ok_secret) = claimed(conn, "bound-5"), claimed(conn, "bound-6")
    rows = runner.execute(
        "SELECT node_id, node_state::text, error_code FROM complete_submit_batch("
        "%s::bigint[], %s::text[], %s::text[], %s::jsonb[], %s::boolean[])",
        ([big, ok], [big_secret, ok_secret], ["ref-big", "ref-ok"], [BIG, "{}"], [True, True]),
    ).fetchall()
    assert rows == [(big, None, "QT005"), (ok, "COMPLETED", None)]
    assert conn.execute(
        "SELECT node_state::text FROM movement_request_nodes WHERE id = %s", (big,)
    ).fetchone() == ("SUBMITTING",)


def test_an_operator_cannot_create_a_plan_beyond_the_node_limit(
    db: TestDatabase, conn: Conn
) -> None:
    operator = bind(db.connect(db.operator_dsn("testnet")))
    too_many = plan(*(node(f"n{i}") for i in range(201)))
    refused(
        conn,
        operator,
        "SELECT * FROM create_movement('bound-7', 10, %s::jsonb)",
        (json.dumps(too_many),),
        "limit of 200 nodes",
    )


def test_the_admin_may_raise_a_limit(conn: Conn, runner: Conn) -> None:
    conn.execute("UPDATE engine_limits SET max_lease_seconds = 7200")
    create_started(conn, plan(node("a")), "bound-8")
    assert len(runner.execute("SELECT * FROM claim_ready_nodes('w', 10, 7200)").fetchall()) == 1
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runner.execute("UPDATE engine_limits SET max_lease_seconds = 1e9")


def test_heartbeat_rows_of_long_silent_instances_are_pruned(conn: Conn, runner: Conn) -> None:
    runner.execute("SELECT heartbeat('node_dispatcher', 'old', 'core', 1)")
    conn.execute("SELECT set_config('qtg.now', %s, false)", ((T0 + timedelta(days=2)).isoformat(),))
    conn.execute("SELECT heartbeat('node_dispatcher', 'new', 'core', 1)")
    instances = conn.execute("SELECT instance_id FROM worker_heartbeats ORDER BY 1").fetchall()
    assert instances == [("new",)]


def instances(conn: Conn) -> list[str]:
    rows = conn.execute("SELECT instance_id FROM worker_heartbeats ORDER BY 1").fetchall()
    return [r[0] for r in rows]


def test_a_runner_cannot_beat_for_more_than_64_instances_of_a_worker(
    conn: Conn, runner: Conn
) -> None:
    beat = "SELECT heartbeat('node_dispatcher', %s, 'core', 1)"
    limit = "max_heartbeat_instances"
    refused(
        conn,
        runner,
        "SELECT count(heartbeat('node_dispatcher', 'i-' || g, 'core', 1))"
        " FROM generate_series(1, 20000) g",
        (),
        limit,
    )
    for i in range(64):
        runner.execute(beat, (f"i-{i:02}",))
    refused(conn, runner, beat, ("i-64",), limit)
    runner.execute(beat, ("i-00",))  # a live instance beats on
    # a stopped instance makes room
    runner.execute("SELECT worker_stopped('node_dispatcher', 'i-05')")
    runner.execute(beat, ("i-64",))
    assert len(instances(conn)) == 64 and "i-05" not in instances(conn)
    refused(conn, runner, beat, ("i-65",), limit)
    # instances that missed two ticks are dead: a new one takes the oldest's place
    runner.execute("SELECT set_config('qtg.now', %s, false)", (iso_at(3),))
    runner.execute(beat, ("i-00",))
    runner.execute(beat, ("i-65",))
    assert len(instances(conn)) == 64
    assert "i-00" in instances(conn) and "i-01" not in instances(conn)
    # another worker's instances are its own
    runner.execute("SELECT heartbeat('node_observer', 'i-00', 'core', 1)")


def test_a_runner_cannot_beat_for_more_than_256_worker_names(conn: Conn, runner: Conn) -> None:
    limit = "max_heartbeat_workers"
    refused(
        conn,
        runner,
        "SELECT count(heartbeat('w-' || g, 'i', 'core', 1)) FROM generate_series(1, 20000) g",
        (),
        limit,
    )
    runner.execute(
        "SELECT count(heartbeat('w-' || g, 'i', 'core', 1)) FROM generate_series(1, 256) g"
    )
    refused(conn, runner, "SELECT heartbeat('w-257', 'i', 'core', 1)", (), limit)
    runner.execute("SELECT worker_stopped('w-9', 'i')")
    runner.execute("SELECT heartbeat('w-257', 'i', 'core', 1)")
    names = conn.execute("SELECT count(DISTINCT worker_name) FROM worker_heartbeats").fetchone()
    assert names == (256,)
    assert conn.execute(
        "SELECT count(*) FROM worker_heartbeats WHERE worker_name = 'w-9'"
    ).fetchone() == (0,)
