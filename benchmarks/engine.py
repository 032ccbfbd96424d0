"""The engine side of the bench: a migrated template database and bulk set-up helpers."""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg

from benchmarks.cluster import Cluster

NETWORK = "testnet"
TEMPLATE = "qtg_bench_template"


def bind(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute(f"SET search_path = {NETWORK}, qtg")
    return conn


def make_template(cluster: Cluster) -> str:
    """A migrated database with the sim executor registered, to clone per case."""
    from qtg_runner.db.migrate import migrate
    from qtg_runner.executors.sim import SimExecutor

    logging.getLogger("yoyo").setLevel(logging.WARNING)
    dsn = cluster.create_db(TEMPLATE)
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        bind(conn)
        conn.execute(
            "SELECT register_executor(%s, %s, %s::jsonb, %s)",
            (
                SimExecutor.key,
                SimExecutor.has_side_effect,
                json.dumps(SimExecutor.node_config_schema),
                SimExecutor.description,
            ),
        )
    cluster.disconnect_all(TEMPLATE)
    return TEMPLATE


def clone(cluster: Cluster, name: str) -> str:
    return cluster.create_db(name, TEMPLATE)


def create_movements(
    conn: psycopg.Connection[Any],
    count: int,
    plan: dict[str, Any],
    prefix: str,
    *,
    approve: bool = True,
    chunk: int = 2000,
) -> None:
    """``count`` movements through create_movement (and approve_movement), set-based.

    Set-up only, never measured. create_movement's cycle check (a recursive
    CTE over the plan's edges) is estimated at millions of rows, and PostgreSQL
    sizes the recursive UNION's hash table from that estimate, bounded by
    work_mem: about 9 ms a call at the default 4MB, almost all of it
    allocating that table. A small work_mem for this session keeps set-up fast
    without touching the procedure (reported as a finding, see README).
    """
    conn.execute("SET work_mem = '64kB'")
    done = 0
    while done < count:
        n = min(chunk, count - done)
        call = (
            "SELECT approve_movement(m.movement_id, 'bob')" if approve else "SELECT m.movement_id"
        )
        conn.execute(
            f"""{call}
                  FROM generate_series(%s::int, %s::int) g
                 CROSS JOIN LATERAL create_movement(%s || g, 100, %s::jsonb,
                                                   p_actor => 'alice') m""",
            (done + 1, done + n, prefix, json.dumps(plan)),
        )
        done += n
    conn.execute("RESET work_mem")


def vacuum_analyze(conn: psycopg.Connection[Any]) -> None:
    conn.execute("VACUUM ANALYZE")
