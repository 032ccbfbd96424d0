"""The throwaway engine a rehearsal runs the movement in: an embedded
PostgreSQL of its own in a temporary directory, migrated, marked a test
database, with the real registry's rows loaded into it (load_rehearsal_registry
refuses anywhere else), the shipped executors registered, two operators and a
runner of its own. The movement is created there again from its plan by one
operator and approved by the other, and the core workers (dispatcher,
observer, recovery) run it with the real executors, whose RPC variables name
the forks' proxies and whose signers are the stand-ins. Nothing of it
outlives the rehearsal: the server is stopped and its directory removed.

Two settings differ from the registry's, on purpose, and the summary says so:
every chain's finality depth is at most REHEARSAL_FINALITY_DEPTH blocks (a
fork's blocks are final the moment they are mined: no one else mines on it),
and every lane is paced at LANE_BASELINE_S (the real lanes wait minutes
between polls).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from qtg_runner.config import NetworkMode
from qtg_runner.db import procs
from qtg_runner.db.embedded import start_embedded, stop_embedded
from qtg_runner.db.migrate import mark_test_database, migrate
from qtg_runner.db.pool import bound_conninfo
from qtg_runner.executors.registry import SHIPPED, registration
from qtg_runner.loop import WorkerEntry
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.signers import Signer
from qtg_runner.wakeup import Wakeup
from qtg_runner.workers import BY_NAME
from qtg_world.commands.demo_logins import DemoLogins, demo_logins

REHEARSAL_FINALITY_DEPTH = 2
LANE_BASELINE_S = 2.0
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "EXPIRED"})
NODE_TERMINAL = frozenset({"COMPLETED", "FAILED", "SKIPPED"})


def core_entries() -> list[WorkerEntry]:
    """The workers a rehearsal runs: the core three, ticking fast. No sidecar
    (callbacks, balance reads, reapers) runs: nothing leaves the rehearsal."""
    fast = {"node_dispatcher": 0.25, "node_observer": 0.25, "node_recovery": 1.0}
    return [replace(BY_NAME[name], interval=s, jitter=s / 5) for name, s in fast.items()]


@dataclass
class Throwaway:
    """The throwaway server and its logins."""

    root: Path
    admin_dsn: str
    people: DemoLogins
    network: NetworkMode

    def conninfo(self, dsn: str, name: str) -> str:
        return bound_conninfo(dsn, self.network, name)


LIBPQ_ENVIRONMENT = (
    "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE",
    "PGSERVICE", "PGSERVICEFILE", "PGOPTIONS", "PGSSLMODE", "PGTARGETSESSIONATTRS",
)  # fmt: skip
"""What libpq reads from the environment before a DSN's own settings (a
PGPASSWORD beats the throwaway's password file): set aside while the
throwaway engine runs, so that the operator's shell cannot point it
elsewhere or break its logins."""


@contextlib.contextmanager
def libpq_environment_aside() -> Iterator[None]:
    kept = {name: os.environ.pop(name) for name in LIBPQ_ENVIRONMENT if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(kept)


@contextlib.contextmanager
def throwaway_engine(
    root: Path, network: NetworkMode, registry: Mapping[str, Any]
) -> Iterator[Throwaway]:
    """An engine of its own under ``root`` with ``registry`` loaded; stopped
    and removed after the block, whatever happened in it."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # the server may run as a system user (as root)
    data_dir = root / "pg"
    with libpq_environment_aside():
        try:
            server = start_embedded(data_dir, root / "pg.pgpass")
            admin = server.dsn()
            migrate(admin)
            mark_test_database(admin)
            people = demo_logins(admin, network, root / "pg.pgpass")
            engine = Throwaway(root, admin, people, network)
            load_registry(engine, registry)
            yield engine
        finally:
            with contextlib.suppress(Exception):
                stop_embedded(data_dir)
            shutil.rmtree(root, ignore_errors=True)


def load_registry(engine: Throwaway, registry: Mapping[str, Any]) -> None:
    """The real registry's rows (its executors' schemas among them), this
    build's executors the real registry lacks, then the rehearsal's two
    differences."""
    with psycopg.connect(engine.conninfo(engine.admin_dsn, "qtg-rehearsal-admin")) as conn:
        procs.load_rehearsal_registry(Jsonb(dict(registry))).one(conn)
        registered = {row.executor_key for row in procs.registered_executors().all(conn)}
        for executor in SHIPPED:
            if executor.key not in registered:
                registration(executor).one(conn)
        conn.execute(
            "UPDATE chains SET finality_depth = least(finality_depth, %s)",
            (REHEARSAL_FINALITY_DEPTH,),
        )
        conn.execute(
            "UPDATE lane_baselines SET baseline_seconds = %s, min_poll_seconds = 0.5, "
            "max_poll_seconds = %s",
            (LANE_BASELINE_S, LANE_BASELINE_S),
        )


@dataclass(frozen=True)
class NodeRun:
    key: str
    executor: str
    state: str
    error: str | None
    tx_hashes: list[str]


@dataclass(frozen=True)
class EngineRun:
    movement_state: str
    """The movement's state when the run ended; REFUSED when the engine
    refused to create or approve it (``refusal`` says why)."""
    nodes: list[NodeRun]
    timed_out: bool
    elapsed_s: float
    refusal: str | None = None


async def run_movement(
    engine: Throwaway,
    movement: Mapping[str, Any],
    plan: Mapping[str, Any],
    env: Mapping[str, str],
    signers: Mapping[str, Signer],
    settled: Callable[[list[NodeRun]], bool],
    timeout_s: float,
    progress: Callable[[str], Awaitable[None] | None] | None = None,
) -> EngineRun:
    """The movement created by one operator and approved by the other, then
    run by the core workers until it ends, ``settled`` says the rest cannot
    finish here, or ``timeout_s`` passes."""
    people = engine.people
    creator = engine.conninfo(people.creator.dsn, "qtg-rehearsal-creator")
    approver = engine.conninfo(people.approver.dsn, "qtg-rehearsal-approver")
    try:
        with psycopg.connect(creator, autocommit=True) as alice:
            created = procs.create_movement(
                f"rehearsal-of-{movement['id']}",
                Decimal(str(movement["amount"])),
                plan=dict(plan),
                asset=str(movement.get("asset") or "USDC"),
            ).one(alice)
        with psycopg.connect(approver, autocommit=True) as bob:
            procs.approve_movement(created.movement_id).one(bob)
    except psycopg.Error as exc:
        # the engine itself would refuse it (a value limit, a plan the
        # registry no longer allows): that is the rehearsal's finding
        refusal = f"{exc.sqlstate}: {exc.diag.message_primary or exc}"
        return EngineRun("REFUSED", [], False, 0.0, refusal)
    runtime = await Runtime.open(
        people.runner.dsn, engine.network, name="qtg-rehearsal", env=env, signers=signers
    )
    ctx = runtime.context(4)
    supervisor = asyncio.create_task(
        supervise(ctx, core_entries(), Wakeup(runtime.conninfo, engine.network))
    )
    started = time.monotonic()
    seen: dict[str, str] = {}
    state, nodes = "APPROVED", list[NodeRun]()
    admin = engine.conninfo(engine.admin_dsn, "qtg-rehearsal-admin")
    try:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            while not supervisor.done():
                state, nodes = await read_run(conn, created.movement_id)
                for node in nodes:
                    if seen.get(node.key) != node.state:
                        seen[node.key] = node.state
                        if progress is not None:
                            shown = progress(f"  step {node.key} ({node.executor}): {node.state}")
                            if shown is not None:
                                await shown
                if state in TERMINAL or settled(nodes):
                    break
                if time.monotonic() - started > timeout_s:
                    break
                await asyncio.sleep(0.5)
    finally:
        ctx.stopping.set()
        await supervisor
        await runtime.close()
    timed_out = state not in TERMINAL and not settled(nodes)
    return EngineRun(state, nodes, timed_out, time.monotonic() - started)


async def read_run(
    conn: psycopg.AsyncConnection[Any], movement_id: int
) -> tuple[str, list[NodeRun]]:
    """The movement's state and its nodes': state, last error, transactions."""
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute(
        "SELECT request_state::text AS s FROM movement_requests WHERE id = %s", (movement_id,)
    )
    row = await cur.fetchone()
    state = str(row["s"]) if row else "UNKNOWN"
    await cur.execute(
        """SELECT n.node_key, n.executor_key, n.node_state::text AS state, n.last_error,
                  coalesce((SELECT array_agg(t.tx_hash ORDER BY t.id)
                              FROM node_intents i JOIN evm_transactions t ON t.intent_id = i.id
                             WHERE i.node_id = n.id), '{}') AS txs
             FROM movement_request_nodes n
            WHERE n.request_id = %s
            ORDER BY n.id""",
        (movement_id,),
    )
    nodes = [
        NodeRun(r["node_key"], r["executor_key"], r["state"], r["last_error"], list(r["txs"]))
        for r in await cur.fetchall()
    ]
    return state, nodes
