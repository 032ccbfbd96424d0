"""The engine side of the bench: a migrated template database and bulk set-up helpers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from benchmarks.cluster import Cluster
from qtg_runner.db import procs

NETWORK = "testnet"
TEMPLATE = "qtg_bench_template"


def bind(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute(f"SET search_path = {NETWORK}, qtg")
    return conn


def make_template(cluster: Cluster) -> str:
    """A migrated database with every shipped executor registered (a runner
    refuses to start otherwise) and the sim's lane presets given their rows (a
    plan names only lanes that have one), to clone per case."""
    from qtg_runner.db.migrate import mark_test_database, migrate
    from qtg_runner.executors.registry import register_shipped
    from qtg_runner.executors.sim import lane_baselines

    logging.getLogger("yoyo").setLevel(logging.WARNING)
    dsn = cluster.create_db(TEMPLATE)
    migrate(dsn)
    mark_test_database(dsn)  # cases 2-4 pin the clock
    register_shipped(dsn, NETWORK)
    with psycopg.connect(dsn, autocommit=True) as conn:
        bind(conn)
        for lane, pacing in lane_baselines().items():
            procs.upsert_lane_baseline(
                lane, pacing["baseline_seconds"], pacing["min_poll_seconds"]
            ).one(conn)
    cluster.disconnect_all(TEMPLATE)
    return TEMPLATE


def clone(cluster: Cluster, name: str) -> str:
    return cluster.create_db(name, TEMPLATE)


def levels_side_by_side(
    cluster: Cluster,
    name: str,
    levels: Iterable[int],
    set_up: Callable[[psycopg.Connection[Any]], None],
    load: Callable[[psycopg.Connection[Any], int], dict[str, Any]],
    time: Callable[[dict[str, str]], dict[str, dict[str, Any]]],
) -> dict[str, dict[str, Any]]:
    """Cases 3 and 7: one database set up once (``set_up``), then loaded level
    by level (``load`` brings it to a level, after which it is vacuumed and
    analyzed, and says what it holds); each level but the last copied off
    (CREATE DATABASE ... TEMPLATE) before the next load, and all of them timed
    side by side at the end (``time``: the level's DSN by level, to each
    level's figures), so that the machine's load weighs on every level alike.
    Returns each level's facts and figures; the databases are dropped."""
    dsn = clone(cluster, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        bind(conn)
        set_up(conn)
    ordered = list(levels)
    out: dict[str, dict[str, Any]] = {}
    dsns: dict[str, str] = {}
    copies = [f"{name}_{level}" for level in ordered[:-1]]
    try:
        for level in ordered:
            with psycopg.connect(dsn, autocommit=True) as conn:
                bind(conn)
                out[str(level)] = load(conn, level)
                conn.execute("VACUUM ANALYZE")
            if level == ordered[-1]:
                dsns[str(level)] = dsn
            else:  # a copy of this level, timed beside the others at the end
                dsns[str(level)] = cluster.create_db(f"{name}_{level}", name)
        for key, timed in time(dsns).items():
            out[key].update(timed)
    finally:
        for db in [name, *copies]:
            cluster.drop_db(db)
    return out


def create_movements(
    conn: psycopg.Connection[Any],
    count: int,
    plan: dict[str, Any],
    prefix: str,
    *,
    approve: bool = True,
    chunk: int = 2000,
    callback_url: str | None = None,
) -> None:
    """``count`` movements through create_movement (and approve_movement), sent
    ``chunk`` calls at a time in a pipeline.

    Set-up only, never measured. create_movement's cycle check was once a
    recursive CTE whose hash table PostgreSQL sized from an estimate of
    millions of rows, bounded by work_mem (about 9 ms a call at the default
    4MB); check_plan now walks the plan's edges once (Kahn's), and the small
    work_mem kept here no longer matters.
    """
    conn.execute("SET work_mem = '64kB'")
    done = 0
    while done < count:
        n = min(chunk, count - done)
        created = procs.one_each(
            conn,
            [
                procs.create_movement(f"{prefix}{i}", 100, plan=plan, callback_url=callback_url)
                for i in range(done + 1, done + n + 1)
            ],
        )
        if approve:
            # four eyes: a second identity approves (the admin session becomes the owner)
            conn.execute("SET SESSION AUTHORIZATION qtg_owner")
            try:
                procs.one_each(conn, [procs.approve_movement(c.movement_id) for c in created])
            finally:
                conn.execute("RESET SESSION AUTHORIZATION")
        done += n
    conn.execute("RESET work_mem")


def vacuum_analyze(conn: psycopg.Connection[Any]) -> None:
    conn.execute("VACUUM ANALYZE")
