"""The runner as real processes against a real PostgreSQL.

What an operator relies on when running `qtg run` / `qtg worker`:
  * SIGTERM stops cleanly (exit 0): every worker marks itself not live, nothing
    is left claimed without an intent, and a restarted runner finishes every
    movement with exactly one side effect per node;
  * the supervisor's tiers: a crashing core worker stops the process (exit 1),
    a crashing sidecar is logged and the others keep beating and doing their work;
  * a worker that stops ticking is listed by stalled_workers, one that was
    stopped cleanly is not;
  * with the gate off (QTG_WORKERS_ENABLED not true) a runner refuses to start, or with
    --idle-if-disabled waits: no worker or sidecar starts and nothing advances;
  * two dispatcher processes claim every node exactly once between them;
  * a dispatcher killed between intent and submit, or between submit and
    report, is resolved by recovery without a duplicate side effect;
  * `qtg demo` runs end to end on the embedded default.

Waits poll a condition with a deadline; time-based rules (stalls, leases) are
reached by pinning the database clock, never by sleeping.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from conftest import server_parent_dir
from engine import (
    as_person,
    bind,
    create,
    node,
    node_ids,
    node_states,
    pin_clock,
    plan,
    request_state,
    snapshot,
)
from runner_helpers import (
    Runners,
    assert_demo_sidecars,
    heartbeats,
    node_rows,
    register_runner_sim,
    request_rows,
    runner_env,
    runners,
    side_effects,
    wait_until,
)

from qtg_runner.db import procs as procs_
from qtg_runner.db.embedded import stop_embedded
from qtg_runner.ports import free_port

# real processes, real waits: seconds each (`make test-quick` leaves them out)
pytestmark = pytest.mark.slow

ALL_WORKERS = {
    "node_dispatcher",
    "node_observer",
    "node_recovery",
    "expiration_checker",
    "template_proposal_expiration",
    "lane_pacing_refresh",
    "pipeline_rollup",
    "evm_nonce_reaper",
    "ccip_stranded_reaper",
    "capital_transfer_followup",
    "audit_outbox_promoter",
    "executor_health",
    "callback_dispatcher",
    "balance_snapshot",
    "verify_drift_worker",
    "session_watchdog",
    "endpoint_budget_lease",
}
# a node in one of these states is picked up again by a (re)started runner on its own
RESUMABLE = {"PENDING", "READY", "SUBMITTED", "OBSERVING"}
FUTURE = "2099-01-01T00:00:00Z"


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Runners]:
    with runners(tmp_path) as r:
        yield r


@pytest.fixture
def real_clock_conn(db: Any) -> psycopg.Connection[Any]:
    """A superuser connection bound to testnet, with the runner's sim executor.

    Unlike ``conn``, its clock is not pinned: the runner processes run on the real
    clock, and the movements they work on are created on it too."""
    c = bind(db.connect())
    register_runner_sim(c)
    return c


def approve(conn: psycopg.Connection[Any], movement_id: int) -> None:
    conn.execute("SELECT approve_movement(%s)", (movement_id,))


def one_node_movement(conn: psycopg.Connection[Any], external_id: str, **config: Any) -> int:
    movement_id = create(conn, plan(node("transfer", **config)), external_id)
    approve(conn, movement_id)
    return movement_id


# -- 1. SIGTERM ------------------------------------------------------------------------


def test_sigterm_exits_0_leaves_nothing_lost_and_a_restart_finishes_every_movement(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    # nodes take 1-2 s on their lane, so a SIGTERM soon after the first submits
    # lands while movements are in flight
    real_clock_conn.execute("SELECT upsert_lane_baseline('cctp_fast', 1.5, 0.1)")
    lane = {"lane": "cctp_fast", "min_latency_s": 1, "max_latency_s": 2}
    movements = []
    for i in range(6):
        the_plan = plan(node("send", **lane), node("credit", ["send"], **lane))
        movements.append(create(real_clock_conn, the_plan, f"sigterm-{i}"))
        approve(real_clock_conn, movements[-1])

    first = procs.start("run", env=runner_env(db.runner_dsn("testnet")))
    wait_until(
        lambda: set(heartbeats(real_clock_conn, first.pid)) == ALL_WORKERS,
        20,
        "heartbeats",
        alive=[first],
    )
    wait_until(
        lambda: {"SUBMITTED", "OBSERVING"} & set(node_rows(real_clock_conn).values()),
        20,
        "nodes in flight",
        alive=[first],
    )
    assert first.stop(timeout=15) == 0, first.describe()

    beats = heartbeats(real_clock_conn, first.pid)
    assert set(beats) == ALL_WORKERS
    assert {name: row["live"] for name, row in beats.items()} == dict.fromkeys(ALL_WORKERS, False)
    states = node_rows(real_clock_conn)
    assert set(states.values()) <= RESUMABLE | {"COMPLETED"}, (
        f"a clean stop left nodes a restarted runner cannot resume: {Counter(states.values())}"
    )
    assert set(request_rows(real_clock_conn).values()) != {"COMPLETED"}, (
        "nothing was in flight at SIGTERM"
    )

    second = procs.start("run", env=runner_env(db.runner_dsn("testnet")))
    wait_until(
        lambda: set(request_rows(real_clock_conn).values()) == {"COMPLETED"},
        30,
        "every movement COMPLETED",
        alive=[second],
    )
    assert second.stop(timeout=15) == 0, second.describe()

    assert set(node_rows(real_clock_conn).values()) == {"COMPLETED"}
    assert side_effects(real_clock_conn) == {node_id: [1] for node_id in node_rows(real_clock_conn)}


# -- 2. supervisor tiers ---------------------------------------------------------------


def log_events(stderr: str, name: str) -> list[str]:
    """The structured log lines of one event."""
    return [line for line in stderr.splitlines() if f"event={name} " in line + " "]


def test_a_crashing_core_worker_stops_the_whole_process_with_exit_1(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    runner = procs.start(
        "run", env=runner_env(db.runner_dsn("testnet"), QTG_FAILPOINTS="crash:node_observer")
    )

    assert runner.wait(timeout=20) == 1, runner.describe()
    stderr = runner.stderr()
    [crash] = log_events(stderr, "core_worker_crashed")
    assert "worker=node_observer" in crash
    assert "FailpointCrash" in crash and "Traceback (most recent call last)" in crash
    assert log_events(stderr, "supervisor_failed")
    # the other workers finished their batch and stopped cleanly, and say so; the
    # crashed one stays live in worker_heartbeats, so stalled_workers will flag it
    beats = heartbeats(real_clock_conn, runner.pid)
    assert {name: row["live"] for name, row in beats.items()} == {
        name: name == "node_observer" for name in ALL_WORKERS
    }
    stopped = {re.search(r"worker=(\w+)", line)[1] for line in log_events(stderr, "worker_stopped")}
    assert stopped == ALL_WORKERS


FAST_SIDECARS = {"callback_dispatcher", "audit_outbox_promoter"}
"""The sidecars that tick every one or two seconds (the others every 10 to 30 s)."""


def test_a_crashing_sidecar_is_logged_and_the_others_keep_beating_and_doing_their_work(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    """callback_dispatcher raises on its first pass (and would on every one): the
    crash is logged with its traceback, the process stays up, every other
    worker's heartbeat goes on (the ones that tick every few seconds tick again),
    and their work is done: the movement completes, its audit rows are promoted
    into a chain that verifies, every executor's health is recorded. Only the
    crashed sidecar's work waits: the movement's callbacks stay PENDING, never
    attempted."""
    real_clock_conn.execute("SELECT upsert_lane_baseline('cctp_fast', 1, 0.1)")
    with as_person(real_clock_conn, "alice"):
        movement = procs_.create_movement(
            "isolated", Decimal(1), plan=plan(node("transfer", lane="cctp_fast", min_latency_s=0.1,
            max_latency_s=0.3)), callback_url="http://127.0.0.1:9/hooks",
        ).one(real_clock_conn).movement_id  # fmt: skip
    approve(real_clock_conn, movement)
    runner = procs.start(
        "run", env=runner_env(db.runner_dsn("testnet"), QTG_FAILPOINTS="crash:callback_dispatcher")
    )
    wait_until(
        lambda: log_events(runner.stderr(), "sidecar_crashed"), 20, "the crash", alive=[runner]
    )
    [crash] = log_events(runner.stderr(), "sidecar_crashed")
    assert "worker=callback_dispatcher" in crash
    assert "FailpointCrash" in crash and "Traceback (most recent call last)" in crash

    wait_until(
        lambda: set(heartbeats(real_clock_conn, runner.pid)) == ALL_WORKERS,
        20,
        "every worker's first heartbeat",
        alive=[runner],
    )
    ticks = {name: row["ticks"] for name, row in heartbeats(real_clock_conn, runner.pid).items()}
    # the dispatcher and observer tick every ~1 s, recovery every ~1 s, the
    # promoter every ~2 s; the crashed sidecar never again
    ticking = {"node_dispatcher", "node_observer", "node_recovery", *FAST_SIDECARS} - {
        "callback_dispatcher"
    }
    wait_until(
        lambda: all(
            heartbeats(real_clock_conn, runner.pid)[name]["ticks"] > ticks[name] for name in ticking
        ),
        20,
        "the other workers to keep ticking after the sidecar crashed",
        alive=[runner],
    )
    wait_until(
        lambda: request_state(real_clock_conn, movement) == "COMPLETED",
        20,
        "the movement",
        alive=[runner],
    )

    def audit_promoted() -> bool:
        row = real_clock_conn.execute(
            "SELECT count(*) FILTER (WHERE promoted_at IS NULL), count(*) FROM audit_outbox"
            " WHERE request_id = %s",
            (movement,),
        ).fetchone()
        return row is not None and row[0] == 0 and row[1] > 0

    wait_until(audit_promoted, 20, "the movement's audit rows promoted", alive=[runner])
    [chain] = real_clock_conn.execute("SELECT ok FROM verify_audit_chain()").fetchall()
    assert chain == (True,)
    unchecked = (
        "SELECT count(*) FROM executors e"
        " WHERE NOT EXISTS (SELECT FROM executor_health h WHERE h.executor_key = e.executor_key)"
    )
    wait_until(
        lambda: real_clock_conn.execute(unchecked).fetchone() == (0,),
        20,
        "every executor's health recorded",
        alive=[runner],
    )
    assert runner.alive()
    assert runner.stop() == 0, runner.describe()
    assert not log_events(runner.stderr(), "core_worker_crashed")
    assert (
        heartbeats(real_clock_conn, runner.pid)["callback_dispatcher"]["ticks"]
        == ticks["callback_dispatcher"]
    )
    callbacks = real_clock_conn.execute(
        "SELECT delivery_state::text, attempts FROM callback_outbox WHERE request_id = %s",
        (movement,),
    ).fetchall()
    assert callbacks == [("PENDING", 0)] * 4, callbacks
    # the crashed sidecar stays live: the stalled_workers view flags it
    beats = heartbeats(real_clock_conn, runner.pid)
    assert {name: row["live"] for name, row in beats.items()} == {
        name: name == "callback_dispatcher" for name in ALL_WORKERS
    }


# -- 3. stalled workers ----------------------------------------------------------------


def stalled_at(conn: psycopg.Connection[Any], at: datetime) -> set[str]:
    """Instance ids stalled_workers lists when the clock reads ``at``."""
    pin_clock(conn, at.isoformat())
    try:
        return {r[0] for r in conn.execute("SELECT instance_id FROM stalled_workers").fetchall()}
    finally:
        pin_clock(conn, None)


def test_stalled_workers_lists_a_killed_worker_but_not_one_stopped_by_sigterm(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    killed = procs.start("worker", "node_observer", env=runner_env(db.runner_dsn("testnet")))
    stopped = procs.start("worker", "node_observer", env=runner_env(db.runner_dsn("testnet")))
    for process in (killed, stopped):
        wait_until(
            lambda p=process: heartbeats(real_clock_conn, p.pid), 20, "a heartbeat", alive=[process]
        )
    killed.signal(signal.SIGKILL)
    assert killed.wait(timeout=10) == -signal.SIGKILL
    assert stopped.stop() == 0, stopped.describe()

    row = heartbeats(real_clock_conn, killed.pid)["node_observer"]
    assert row["live"], "a killed worker cannot have said it stopped"
    assert not heartbeats(real_clock_conn, stopped.pid)["node_observer"]["live"]
    two_ticks = 2 * row["expected_interval_seconds"]
    last = row["last_tick_at"]

    assert stalled_at(real_clock_conn, last + two_ticks - timedelta(milliseconds=100)) == set()
    assert stalled_at(real_clock_conn, last + two_ticks + timedelta(milliseconds=100)) == {
        row["instance_id"]
    }
    assert stalled_at(real_clock_conn, last + timedelta(hours=1)) == {row["instance_id"]}
    pin_clock(real_clock_conn, (last + timedelta(hours=1)).isoformat())
    status = dict(real_clock_conn.execute("SELECT pid, status FROM worker_status").fetchall())
    pin_clock(real_clock_conn, None)
    assert status == {killed.pid: "stalled", stopped.pid: "stopped"}


# -- 5. the gate -----------------------------------------------------------------------


def holds_for(seconds: float, check: Callable[[], None], every: float = 0.05) -> None:
    """Run ``check`` (which asserts) repeatedly until ``seconds`` have passed: for
    claims that nothing happens, the only kind of wait that cannot be a condition."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(every)
    check()


def test_a_runner_whose_gate_is_off_refuses_to_start_unless_told_to_idle(
    db: Any, procs: Runners
) -> None:
    """A deployment missing its one variable must not look healthy and move
    nothing: `qtg run` and `qtg worker` with the gate off exit 2 with the reason
    and what to set. QTG_WORKERS_ENABLED is the gate's name (the seed's
    MG_WORKERS_ENABLED is read when it is unset); the two disagreeing is an
    error too."""
    env = runner_env(db.runner_dsn("testnet"), workers=False)
    for args in (("run",), ("worker", "node_dispatcher")):
        process = procs.start(*args, env=env)
        assert process.wait(30) == 2, process.describe()
        assert "QTG_WORKERS_ENABLED=true" in process.stderr()
        assert "--idle-if-disabled" in process.stderr()
    disagree = env | {"QTG_WORKERS_ENABLED": "true"}  # MG_WORKERS_ENABLED=false beside it
    process = procs.start("run", env=disagree)
    assert process.wait(30) != 0, process.describe()
    assert "disagree" in process.stderr()


def test_with_the_gate_off_no_worker_or_sidecar_starts_and_nothing_moves(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    """`qtg run` and `qtg worker` of a sidecar, gate off: no heartbeat, the approved
    movement stays APPROVED, its callbacks undelivered, its audit rows unpromoted,
    no executor's health checked."""
    env = runner_env(db.runner_dsn("testnet"), workers=False)
    gated = [
        procs.start("run", "--idle-if-disabled", env=env),
        procs.start("worker", "callback_dispatcher", "--idle-if-disabled", env=env),
    ]
    for process in gated:
        wait_until(
            lambda p=process: "no worker started" in p.stderr(), 20, "the message", alive=[process]
        )
    with as_person(real_clock_conn, "alice"):
        movement = procs_.create_movement(
            "gated", Decimal(1), plan=plan(node("transfer", lane="instant")),
            callback_url="http://127.0.0.1:9/hooks",
        ).one(real_clock_conn).movement_id  # fmt: skip
    approve(real_clock_conn, movement)
    tables = ("audit_log", "executor_health", "callback_outbox", "audit_outbox")
    before = snapshot(real_clock_conn) | snapshot(real_clock_conn, tables)
    assert request_state(real_clock_conn, movement) == "APPROVED"
    assert len(before["callback_outbox"]) == 2 and before["audit_log"] == []

    def nothing_moved() -> None:
        assert all(p.alive() for p in gated), [p.describe() for p in gated]
        assert request_state(real_clock_conn, movement) == "APPROVED"
        assert real_clock_conn.execute("SELECT count(*) FROM worker_heartbeats").fetchone() == (0,)

    holds_for(2.0, nothing_moved)
    assert snapshot(real_clock_conn) | snapshot(real_clock_conn, tables) == before
    assert side_effects(real_clock_conn) == {}
    for process in gated:
        assert process.stop() == 0, process.describe()


# -- 6. two dispatcher processes -------------------------------------------------------


def test_two_dispatcher_processes_claim_each_of_1000_nodes_exactly_once(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    one_instant_node = json.dumps(plan(node("transfer", lane="instant")))
    with as_person(real_clock_conn, "alice"):
        real_clock_conn.execute(
            "SELECT count(*) FROM generate_series(1, 1000) AS g,"
            " LATERAL create_movement('bulk-' || g, 100, %s::jsonb)",
            (one_instant_node,),
        )
    dispatchers = [
        procs.start("worker", "node_dispatcher", env=runner_env(db.runner_dsn("testnet")))
        for _ in range(2)
    ]
    for d in dispatchers:
        wait_until(lambda d=d: heartbeats(real_clock_conn, d.pid), 20, "a heartbeat", alive=[d])
    # both are up and idle: approving now makes them race for the same work
    real_clock_conn.execute("SELECT count(approve_movement(id)) FROM movement_requests")

    wait_until(
        lambda: set(request_rows(real_clock_conn).values()) == {"COMPLETED"},
        60,
        "1000 movements COMPLETED",
        alive=dispatchers,
    )
    for d in dispatchers:
        assert d.stop() == 0, d.describe()

    nodes = node_rows(real_clock_conn)
    assert len(nodes) == 1000 and set(nodes.values()) == {"COMPLETED"}
    intents = real_clock_conn.execute(
        "SELECT i.node_id, i.claimed_by, n.claimed_by FROM node_intents i"
        " JOIN movement_request_nodes n ON n.id = i.node_id"
    ).fetchall()
    assert Counter(node_id for node_id, _, _ in intents) == dict.fromkeys(nodes, 1)
    assert all(by_intent == by_node for _, by_intent, by_node in intents)
    assert side_effects(real_clock_conn) == {node_id: [1] for node_id in nodes}
    # each claim names its worker's heartbeat instance (host:pid:...)
    instances = real_clock_conn.execute(
        "SELECT detail->>'instance' FROM audit_outbox WHERE action = 'state_changed'"
        " AND from_state = 'READY' AND to_state = 'SUBMITTING'"
    ).fetchall()
    claims_per_pid = Counter(int(instance.split(":")[-2]) for (instance,) in instances)
    assert set(claims_per_pid) == {d.pid for d in dispatchers}, claims_per_pid
    assert sum(claims_per_pid.values()) == 1000


# -- 7. crash gaps ---------------------------------------------------------------------


def intent_rows(conn: psycopg.Connection[Any], node_id: int) -> list[str]:
    rows = conn.execute(
        "SELECT intent_state FROM node_intents WHERE node_id = %s ORDER BY claim_token", (node_id,)
    ).fetchall()
    return [r[0] for r in rows]


def test_a_dispatcher_killed_after_its_intent_is_resubmitted_with_the_prepared_payload_once(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    movement = one_node_movement(real_clock_conn, "gap-intent", lane="instant")
    [node_id] = node_ids(real_clock_conn, movement).values()

    crashing = procs.start(
        "worker",
        "node_dispatcher",
        env=runner_env(db.runner_dsn("testnet"), QTG_FAILPOINTS="after_intent"),
    )
    assert crashing.wait(timeout=20) == -signal.SIGKILL, crashing.describe()
    assert node_states(real_clock_conn, movement) == {"transfer": "SUBMITTING"}
    assert intent_rows(real_clock_conn, node_id) == ["PREPARED"]
    assert side_effects(real_clock_conn) == {}

    # the lease (300 s) has run out for workers that live in 2099. The intent is
    # PREPARED, so recovery may not call it NOT_SUBMITTED: it sends the prepared
    # payload (same idempotency key) and reports it in flight
    future = runner_env(db.runner_dsn("testnet"), PGOPTIONS=f"-c qtg.now={FUTURE}")
    recovery = procs.start("worker", "node_recovery", env=future)
    wait_until(
        lambda: node_states(real_clock_conn, movement) == {"transfer": "SUBMITTED"},
        20,
        "SUBMITTED",
        alive=[recovery],
    )
    assert recovery.stop() == 0, recovery.describe()
    assert intent_rows(real_clock_conn, node_id) == ["SUBMITTED"]

    # a pinned clock stands still: the observer lives an hour later, past the next look
    later = runner_env(db.runner_dsn("testnet"), PGOPTIONS="-c qtg.now=2099-01-01T01:00:00Z")
    observer = procs.start("worker", "node_observer", env=later)
    wait_until(
        lambda: request_state(real_clock_conn, movement) == "COMPLETED",
        20,
        "COMPLETED",
        alive=[observer],
    )
    assert observer.stop() == 0, observer.describe()
    assert node_states(real_clock_conn, movement) == {"transfer": "COMPLETED"}
    assert intent_rows(real_clock_conn, node_id) == ["SUBMITTED"]
    assert side_effects(real_clock_conn) == {node_id: [1]}


def test_a_dispatcher_killed_after_its_submit_is_recovered_from_evidence_without_a_resubmit(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    movement = one_node_movement(real_clock_conn, "gap-submit", lane="instant")
    [node_id] = node_ids(real_clock_conn, movement).values()

    crashing = procs.start(
        "worker",
        "node_dispatcher",
        env=runner_env(db.runner_dsn("testnet"), QTG_FAILPOINTS="after_submit"),
    )
    assert crashing.wait(timeout=20) == -signal.SIGKILL, crashing.describe()
    assert node_states(real_clock_conn, movement) == {"transfer": "SUBMITTING"}
    assert intent_rows(real_clock_conn, node_id) == ["PREPARED"]
    assert side_effects(real_clock_conn) == {node_id: [1]}

    recovery = procs.start(
        "worker",
        "node_recovery",
        env=runner_env(db.runner_dsn("testnet"), PGOPTIONS=f"-c qtg.now={FUTURE}"),
    )
    wait_until(
        lambda: request_state(real_clock_conn, movement) == "COMPLETED",
        20,
        "COMPLETED",
        alive=[recovery],
    )
    assert recovery.stop() == 0, recovery.describe()
    assert node_states(real_clock_conn, movement) == {"transfer": "COMPLETED"}
    assert intent_rows(real_clock_conn, node_id) == ["SUBMITTED"]
    assert side_effects(real_clock_conn) == {node_id: [1]}


# -- 7b. one process, both networks ---------------------------------------------------


def test_one_process_runs_every_worker_once_per_network_each_with_its_own_heartbeats(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    """`qtg run --network mainnet --network testnet` as a login that is a runner
    of both: each network's movement completes, each network's heartbeat rows
    name every worker once under an instance of their own."""
    login = db.login("both", "qtg_testnet_runner")
    real_clock_conn.execute(f'GRANT qtg_mainnet_runner TO "{login.name}"')
    mainnet = bind(db.connect(), "mainnet")
    register_runner_sim(mainnet)
    lane = {"lane": "cctp_fast", "min_latency_s": 0.1, "max_latency_s": 0.3}
    movements = {}
    for network, conn in (("testnet", real_clock_conn), ("mainnet", mainnet)):
        conn.execute("SELECT upsert_lane_baseline('cctp_fast', 1, 0.1)")
        movements[network] = (conn, one_node_movement(conn, f"both-{network}", **lane))
    runner = procs.start(
        "run", "--network", "mainnet", "--network", "testnet", env=runner_env(login.dsn)
    )
    for network, (conn, movement) in movements.items():
        wait_until(
            lambda c=conn, m=movement: request_state(c, m) == "COMPLETED",
            30,
            f"the {network} movement",
            alive=[runner],
        )
    instances = {}
    for network, (conn, _) in movements.items():
        beats = heartbeats(conn, runner.pid)
        assert set(beats) == ALL_WORKERS, network
        instances[network] = {row["instance_id"] for row in beats.values()}
        assert len(instances[network]) == 1, network
    assert instances["testnet"] != instances["mainnet"]
    assert runner.stop() == 0, runner.describe()

    mismatched = procs.start(
        "run", "--network", "mainnet", "--network", "testnet", "--as", "a", "--as", "b", "--as",
        "c", env=runner_env(login.dsn),
    )  # fmt: skip
    assert mismatched.wait(timeout=30) == 2
    assert "one --as per --network" in mismatched.stderr()


# -- 8. the demo -----------------------------------------------------------------------


def test_qtg_demo_completes_on_a_fresh_embedded_server_and_serves_its_page(
    procs: Runners,
) -> None:
    """The sim executor's demo (`--sim`), with --serve: its operator page stays up
    after the movements until Ctrl-C; on the local outside world it is in
    tests/chains/test_demo_world.py."""
    data_dir = server_parent_dir() / "pg18"
    port = free_port()
    try:
        demo = procs.start(
            "demo",
            "--sim",
            "--serve",
            "--port",
            str(port),
            env=runner_env(None, QTG_DATA_DIR=str(data_dir), COLUMNS="200"),
        )
        wait_until(
            lambda: "serving the operator page" in demo.stdout(),
            150,
            "the demo's movements, then its page served",
            every=0.2,
            alive=[demo],
        )
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10, follow_redirects=True)
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert demo.alive()  # still serving
        demo.signal(signal.SIGINT)
        assert demo.wait(timeout=30) == 0, demo.describe() + "\nstdout:\n" + demo.stdout()
    finally:
        stop_embedded(data_dir)
        shutil.rmtree(data_dir.parent, ignore_errors=True)
    assert re.search(r"all \d+ movements ended as expected", demo.stdout()), demo.stdout()
    assert "created by alice, approved by bob" in demo.stdout()
    assert_demo_sidecars(demo.stdout(), {"completed": 6, "failed": 1})


def test_qtg_demo_refuses_to_start_with_the_gate_off(procs: Runners) -> None:
    data_dir = server_parent_dir() / "pg18"
    try:
        demo = procs.start("demo", env=runner_env(None, workers=False, QTG_DATA_DIR=str(data_dir)))
        assert demo.wait(timeout=30) == 2
    finally:
        stop_embedded(data_dir)
        exists = data_dir.exists()
        shutil.rmtree(data_dir.parent, ignore_errors=True)
    assert "the workers' gate is off" in demo.stderr()
    assert "QTG_WORKERS_ENABLED=true" in demo.stderr()
    assert not exists, "the demo started a database although it refused to run"


# -- 9. a dead claimer's nodes in seconds; a poison node in a busy batch --------------


def test_a_killed_dispatchers_claims_settle_within_two_heartbeats_and_the_observation(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    # each node's side effect takes 0.2-0.5 s; the first look comes 0.7 s after the submit
    real_clock_conn.execute("SELECT upsert_lane_baseline('cctp_fast', 1, 0.1)")
    lane = {"lane": "cctp_fast", "min_latency_s": 0.2, "max_latency_s": 0.5}
    movements = [one_node_movement(real_clock_conn, f"killed-{i}", **lane) for i in range(20)]
    rest = procs.start(
        "run",
        "--only",
        "node_recovery",
        "--only",
        "node_observer",
        env=runner_env(db.runner_dsn("testnet")),
    )
    wait_until(
        lambda: {"node_recovery", "node_observer"} <= set(heartbeats(real_clock_conn, rest.pid)),
        20,
        "recovery and the observer up",
        alive=[rest],
    )

    # the dispatcher claims every node, records their intents and is killed
    # before any side effect: its claims' lease would hold them for 300 s
    dispatcher = procs.start(
        "worker",
        "node_dispatcher",
        env=runner_env(db.runner_dsn("testnet"), QTG_FAILPOINTS="after_intent"),
    )
    assert dispatcher.wait(timeout=30) == -signal.SIGKILL, dispatcher.describe()
    killed_at = time.monotonic()
    assert Counter(node_rows(real_clock_conn).values()) == {"SUBMITTING": 20}
    beat = heartbeats(real_clock_conn, dispatcher.pid)["node_dispatcher"]
    interval = beat["expected_interval_seconds"].total_seconds()

    wait_until(
        lambda: set(request_rows(real_clock_conn).values()) == {"COMPLETED"},
        60,
        "every movement COMPLETED",
        alive=[rest],
    )
    settled_in = time.monotonic() - killed_at
    # two missed ticks make the dispatcher known dead; then a recovery tick
    # (1 s), the first look (0.7 s) and an observer tick (1 s); the rest is a
    # margin for a busy two-core machine, far below the 300 s lease
    bound = 2 * interval + 1.2 + 0.7 + 1.2 + 4.0
    print(f"claims of a killed dispatcher settled in {settled_in:.1f} s (bound {bound:.1f} s)")
    assert settled_in < bound, f"settled in {settled_in:.1f} s, over {bound:.1f} s"
    assert rest.stop() == 0, rest.describe()
    assert len(movements) == 20
    assert side_effects(real_clock_conn) == {n: [1] for n in node_rows(real_clock_conn)}
    taken = real_clock_conn.execute(
        "SELECT count(*) FROM audit_outbox WHERE action = 'recovery_claimed'"
        " AND (detail->>'lost_claims')::int = 1"
    ).fetchone()
    assert taken == (20,)


def test_qtg_run_quarantines_a_poison_node_in_a_busy_batch_and_keeps_running(
    db: Any, real_clock_conn: psycopg.Connection[Any], procs: Runners
) -> None:
    real_clock_conn.execute("SELECT upsert_lane_baseline('instant', 1)")
    good = [one_node_movement(real_clock_conn, f"good-{i}", lane="instant") for i in range(30)]
    poison = one_node_movement(real_clock_conn, "poison", lane="instant", crash_at="submit")
    [poison_node] = node_ids(real_clock_conn, poison).values()

    runner = procs.start("run", env=runner_env(db.runner_dsn("testnet")))
    wait_until(
        lambda: all(request_state(real_clock_conn, m) == "COMPLETED" for m in good),
        30,
        "the 30 good movements COMPLETED",
        alive=[runner],
    )
    wait_until(
        lambda: real_clock_conn.execute(
            "SELECT node_id, node_state::text, reason FROM quarantined_nodes"
        ).fetchall(),
        10,
        "the poison node quarantined",
        alive=[runner],
    )
    [(node_id, state, reason)] = real_clock_conn.execute(
        "SELECT node_id, node_state::text, reason FROM quarantined_nodes"
    ).fetchall()
    assert (node_id, state) == (poison_node, "SUBMITTING")
    assert "SimCrash" in reason

    # the core workers keep ticking, and the poison node is not handed out again
    ticks = {n: r["ticks"] for n, r in heartbeats(real_clock_conn, runner.pid).items()}
    wait_until(
        lambda: all(
            heartbeats(real_clock_conn, runner.pid)[n]["ticks"] >= ticks[n] + 2
            for n in ("node_dispatcher", "node_observer", "node_recovery")
        ),
        15,
        "the core workers to keep ticking",
        alive=[runner],
    )
    assert runner.stop() == 0, runner.describe()
    stderr = runner.stderr()
    assert log_events(stderr, "node_quarantined")
    assert not log_events(stderr, "core_worker_crashed")
    assert request_state(real_clock_conn, poison) == "EXECUTING"
    effects = side_effects(real_clock_conn)
    assert poison_node not in effects
    assert sorted(effects.values()) == [[1]] * 30
    claims = real_clock_conn.execute(
        "SELECT count(*) FROM node_intents WHERE node_id = %s", (poison_node,)
    ).fetchone()
    assert claims == (1,)
