"""The chaos harness's invariant checker (chaos/checker.py), on a real small run.

One module database runs a small mixed workload (every kind of movement
`make chaos` feeds: DAGs, failing and flaky lanes, lost receipts, refused
submits, a cancel, an expiry) through a real `qtg run` process, fed by the
harness's own feeder (one login creates, another approves) and settled by its
own settle loop. The checker must find every invariant holding there; then
each test plants one fault in a transaction of its own, checks, and rolls
back: the checker must fail exactly the invariant the fault breaks.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import create_database, drop_database, dsn_for
from engine import as_person
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from runner_helpers import register_runner_sim, runner_env, runners

from chaos import checker, workload
from chaos.checker import Ledger, check
from chaos.cluster import Clock
from chaos.scenarios import settle
from qtg_runner.db import procs
from qtg_runner.db.logins import create_login

pytestmark = pytest.mark.slow

NETWORK = "testnet"


@dataclass(frozen=True)
class SmallRun:
    dsn: str  # superuser
    ledger: Ledger
    planned: int


@pytest.fixture(scope="module")
def small_run(
    pg_server: str, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SmallRun]:
    """Two of each kind of movement, run to the end by one `qtg run`."""
    name = f"qtg_chaos_{os.getpid()}"
    create_database(pg_server, name, template_db)
    dsn = dsn_for(pg_server, dbname=name)
    made: dict[str, str] = {}  # login -> its DSN
    try:
        with psycopg.connect(dsn) as admin:
            for login, group in (
                ("chaos_creator", "qtg_testnet_operator"),
                ("chaos_approver", "qtg_testnet_operator"),
                ("chaos_runner", "qtg_testnet_runner"),
            ):
                role, password = f"{login}_{os.getpid()}", secrets.token_urlsafe(24)
                create_login(admin, role, group, password)
                made[login] = dsn_for(dsn, user=role, password=password)
            admin.commit()
        with psycopg.connect(
            dsn, autocommit=True, options=f"-c search_path={NETWORK},qtg"
        ) as owner:
            register_runner_sim(owner)
            for lane, settings in workload.lane_settings().items():
                procs.upsert_lane_baseline(lane, **settings).one(owner)
        ledger = Ledger()
        plan = [
            workload.Planned(0.1 * i, kind)
            for i, kind in enumerate([*workload.KINDS, *workload.KINDS])
        ]
        feeder = workload.Feeder(
            made["chaos_creator"],
            made["chaos_approver"],
            NETWORK,
            "checker",
            plan,
            ledger,
            random.Random(7),
            lambda: dt.datetime.now(dt.UTC),
        )
        with runners(Path(tmp_path_factory.mktemp("chaos-runner"))) as procs_:
            runner = procs_.start("run", env=runner_env(made["chaos_runner"]))
            feeder.start()
            feeder.join(timeout=120)
            assert feeder.done.is_set() and not feeder.errors, feeder.errors
            clock = Clock()
            clock.attach(dsn)
            # no clock advance: nothing here waits for a lease (stall never reached)
            settled = settle(dsn, clock, budget_seconds=90, stall_seconds=1e9)
            assert settled.settled, f"{settled.open_left} movements open; {runner.describe()}"
            assert clock.jumps == 0
            assert runner.stop() == 0, runner.describe()
        yield SmallRun(dsn, ledger, len(plan))
    finally:
        drop_database(pg_server, name)
        with psycopg.connect(pg_server, autocommit=True) as admin:
            for login_dsn in made.values():
                role = conninfo_to_dict(login_dsn)["user"]
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@contextmanager
def planted(run: SmallRun) -> Iterator[psycopg.Connection[Any]]:
    """A superuser connection in a transaction that is rolled back afterwards."""
    with psycopg.connect(run.dsn) as conn:
        conn.execute(f"SET LOCAL search_path = {NETWORK}, qtg")
        try:
            yield conn
        finally:
            conn.rollback()


def one(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params or None).fetchone()
    assert row is not None, query
    return row[0] if len(row) == 1 else row


def completed_node(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """A COMPLETED node with its side effect, and its movement."""
    return one(  # type: ignore[no-any-return]
        conn,
        "SELECT n.id, n.request_id FROM movement_request_nodes n"
        " JOIN movement_requests r ON r.id = n.request_id AND r.request_state = 'COMPLETED'"
        " WHERE n.node_state = 'COMPLETED' ORDER BY n.id LIMIT 1",
    )


def stuck_claim(conn: psycopg.Connection[Any]) -> procs.ClaimedNode:
    """A movement created (alice), approved (bob), started, and its node claimed
    by a runner that never reports: SUBMITTING, as a killed dispatcher leaves it."""
    with as_person(conn, "alice"):
        created = procs.create_movement(
            "planted-stuck", 10, plan={"nodes": [workload.node("transfer", "cctp_fast")]}
        ).one(conn)
    with as_person(conn, "bob"):
        procs.approve_movement(created.movement_id).one(conn)
    procs.start_approved_movements().one(conn)
    [claim] = procs.claim_ready_nodes("planted-dead-dispatcher", 10).all(conn)
    assert claim.request_id == created.movement_id
    return claim


# -- the run itself ------------------------------------------------------------------------


def test_a_small_run_holds_every_invariant(small_run: SmallRun) -> None:
    with psycopg.connect(small_run.dsn) as conn:
        result = check(conn, small_run.ledger, NETWORK)
    assert result.ok, result.describe()
    assert result.tried == result.created == small_run.planned
    assert result.terminal == result.created
    assert (result.stuck, result.lost, result.duplicates, result.in_flight) == (0, 0, 0, 0)
    # the mix reached every end a movement can have, and its side effects happened
    assert set(result.by_state) == {"COMPLETED", "FAILED", "CANCELLED", "EXPIRED"}
    assert result.side_effects > small_run.planned
    assert set(result.violations) == set(checker.INVARIANTS)


# -- the faults the brief names --------------------------------------------------------------


def test_a_planted_duplicate_side_effect_fails_the_check(small_run: SmallRun) -> None:
    with planted(small_run) as conn:
        node_id, _ = completed_node(conn)
        conn.execute(
            "INSERT INTO qtg_sim.side_effects (network, idempotency_key, node_id, lane, amount,"
            " outcome, completes_at)"
            " SELECT network, idempotency_key || '-again', node_id, lane, amount, outcome,"
            " completes_at FROM qtg_sim.side_effects WHERE node_id = %s",
            (node_id,),
        )
        result = check(conn, small_run.ledger, NETWORK)
    assert result.duplicates == 1
    assert result.violations["duplicate_effect"] == 1
    # its key is none of the node's intents, and the completed node has two effects
    assert set(result.failed()) == {"duplicate_effect", "foreign_effect", "completed_effect"}
    assert f"node {node_id}: 2 side effects" in result.describe()[0]


def test_a_planted_stuck_node_fails_the_check(small_run: SmallRun) -> None:
    with planted(small_run) as conn:
        movement_id = stuck_claim(conn).request_id
        result = check(conn, small_run.ledger, NETWORK)
    assert (result.stuck, result.stuck_nodes, result.in_flight) == (1, 1, 0)
    assert result.created == result.terminal + 1
    assert result.failed() == ["terminal"]
    assert (
        f"movement {movement_id} (planted-stuck) EXECUTING: transfer SUBMITTING"
        in (result.describe()[0])
    )


def test_a_planted_missing_callback_fails_the_check(small_run: SmallRun) -> None:
    with planted(small_run) as conn:
        _, movement_id = completed_node(conn)
        deleted = conn.execute(
            "DELETE FROM callback_outbox"
            " WHERE request_id = %s AND event_type = 'movement.completed'",
            (movement_id,),
        ).rowcount
        assert deleted == 1
        result = check(conn, small_run.ledger, NETWORK)
    assert result.failed() == ["final_callback"]
    assert result.violations["final_callback"] == 1


# -- every other invariant, one planted fault each -------------------------------------------


def _lost(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    ledger.ack("acknowledged-then-gone", 999_999)


def _unstarted_effect(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    node_id = one(
        conn, "SELECT id FROM movement_request_nodes WHERE node_state = 'SKIPPED' LIMIT 1"
    )
    intent_key = f"planted-{node_id}"
    conn.execute(
        "INSERT INTO node_intents (node_id, claim_token, idempotency_key, claimed_by,"
        " intent_state, created_at, finished_at) VALUES (%s, 99, %s, 'planted', 'ABANDONED',"
        " now(), now())",
        (node_id, intent_key),
    )
    conn.execute(
        "INSERT INTO qtg_sim.side_effects (network, idempotency_key, node_id, lane, amount,"
        " outcome, completes_at) VALUES ('testnet', %s, %s, 'cctp_fast', 1, 'COMPLETED', now())",
        (intent_key, node_id),
    )


def _wrong_amount(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    node_id, _ = completed_node(conn)
    conn.execute(
        "UPDATE qtg_sim.side_effects SET amount = amount + 1 WHERE node_id = %s", (node_id,)
    )


def _open_intent(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    node_id, _ = completed_node(conn)
    conn.execute("UPDATE node_intents SET intent_state = 'PREPARED' WHERE node_id = %s", (node_id,))


def _node_audit(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    node_id, _ = completed_node(conn)
    _rewrite_last_event(conn, "node", node_id, "FAILED")


def _movement_audit(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    _, movement_id = completed_node(conn)
    _rewrite_last_event(conn, "request", movement_id, "EXECUTING")


def _rewrite_last_event(conn: psycopg.Connection[Any], entity: str, ident: int, to: str) -> None:
    """The entity's last audit event says ``to``: edited inside its batch while
    it waits there, in audit_log (its append-only trigger off) once promoted."""
    event = "(b.events[t.k])"
    waiting = conn.execute(
        f"""WITH last AS (SELECT max(id) AS id FROM audit_outbox
                           WHERE entity = %s AND entity_id = %s::text),
                 target AS (SELECT b.base, (last.id - b.base)::integer AS k
                              FROM audit_batches b, last
                             WHERE b.base < last.id AND b.promoted_at IS NULL
                               AND last.id <= b.base + cardinality(b.events)
                             ORDER BY b.base DESC LIMIT 1)
            UPDATE audit_batches b
               SET events[t.k] = ROW({event}.actor, {event}.entity, {event}.entity_id,
                                     {event}.request_id, {event}.action, {event}.from_state,
                                     %s, {event}.detail)::qtg.audit_event
              FROM target t
             WHERE b.base = t.base""",
        (entity, ident, to),
    )
    if waiting.rowcount:
        return
    with conn.transaction():
        conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
        promoted = conn.execute(
            """UPDATE audit_log SET to_state = %s
                WHERE outbox_id = (SELECT max(outbox_id) FROM audit_log
                                    WHERE entity = %s AND entity_id = %s::text)""",
            (to, entity, ident),
        )
        conn.execute("ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only")
    assert promoted.rowcount == 1


def _counters(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    _, movement_id = completed_node(conn)
    conn.execute(
        "UPDATE movement_requests SET failed_nodes = failed_nodes + 1 WHERE id = %s",
        (movement_id,),
    )


def _pipeline_counts(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    conn.execute(
        "INSERT INTO pipeline_rollup_totals (entity, state, total) VALUES ('node', 'FAILED', 1)"
        " ON CONFLICT (entity, state) DO UPDATE SET total = pipeline_rollup_totals.total + 1"
    )


@pytest.mark.parametrize(
    ("plant", "broken"),
    [
        (_lost, {"lost"}),
        (_unstarted_effect, {"unstarted_effect"}),
        (_wrong_amount, {"completed_effect"}),
        (_open_intent, {"open_intent"}),
        (_node_audit, {"node_audit"}),
        (_movement_audit, {"movement_audit"}),
        (_counters, {"counters"}),
        (_pipeline_counts, {"pipeline_counts"}),
    ],
    ids=lambda p: p.__name__.strip("_") if callable(p) else "",
)
def test_each_planted_fault_fails_its_invariant(
    small_run: SmallRun,
    plant: Callable[[psycopg.Connection[Any], Ledger], None],
    broken: set[str],
) -> None:
    ledger = Ledger()
    tried, acknowledged, _, _ = small_run.ledger.snapshot()
    for external_id, kind in tried.items():
        ledger.try_(external_id, kind)
    for external_id, movement_id in acknowledged.items():
        ledger.ack(external_id, movement_id)
    with planted(small_run) as conn:
        plant(conn, ledger)
        result = check(conn, ledger, NETWORK)
    assert set(result.failed()) == broken, result.describe()
    assert all(result.violations[name] == 1 for name in broken)


# -- a quarantined node is legitimately in flight ------------------------------------------


def test_a_quarantined_node_is_in_flight_not_stuck(small_run: SmallRun) -> None:
    """A node the engine set aside for an operator (quarantine_nodes, as a runner
    whose executor crashed on it calls it) leaves its movement legitimately in
    flight: it is not stuck, and the operator's release is what moves it."""
    with planted(small_run) as conn:
        claim = stuck_claim(conn)
        [row] = procs.quarantine_nodes(
            [claim.node_id], [claim.claim_secret], ["planted: the executor crashed on it"]
        ).all(conn)
        assert row.error_code is None, row
        result = check(conn, small_run.ledger, NETWORK)
    assert (result.stuck, result.in_flight) == (0, 1)
    assert result.ok, result.describe()
