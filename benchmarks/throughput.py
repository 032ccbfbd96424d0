"""Case 1 (throughput) and case 5 (runner memory).

The engine: 20,000 one-step movements on the sim executor's `instant` lane
(the side effect is settled at submit: no observation), created and approved
through create_movement/approve_movement, then drained by 1 and by 2 `qtg
worker node_dispatcher` processes: the real runner, its real dispatcher path
(claim_ready_nodes, which starts the approved movements and claims their roots
in one call, record the intent, submit, complete_submit). The figure runs from
the processes' launch to the last movement COMPLETED. Then the audit chain's
share, which the drain leaves to the audit_outbox_promoter sidecar: the
drain's events promoted into the hash-chained audit_log (promote_chain), its
time, CPU and row writes; and a drain by 2 runners with the promoter beside
them, as `qtg run` deploys it.

Beside it, on the same server: the same number of no-op jobs drained by
Procrastinate, PgQueuer and Graphile Worker, each enqueued with its bulk call,
and the bare ceiling: a one-table queue drained by a minimal
`FOR UPDATE SKIP LOCKED` claim that completes 10 rows per transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from benchmarks import engine, equal
from benchmarks.cluster import Cluster
from benchmarks.procs import PYTHON, QTG, Child, cpu_seconds, runner_env, spawn, wait_for
from qtg_runner.workers import audit_outbox_promoter

# Case 1's movements name a callback target, so the engine writes a callback
# row per state change ready to deliver, as the equal-guarantee peers do.
# Nothing delivers them here: no callback_dispatcher runs.
CALLBACK_URL = "https://hooks.bench.invalid/qtg"
ENGINE_SCHEMAS = ("testnet", "qtg_sim")  # the engine's tables; the sim's outside world
INSTANT_PLAN = {"nodes": [{"key": "step", "executor": "sim", "config": {"lane": "instant"}}]}
DRAIN_TIMEOUT = 300.0


def _stats_reset(conn: psycopg.Connection[Any]) -> bool:
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public")
        conn.execute("SELECT public.pg_stat_statements_reset()")
        return True
    except psycopg.Error:
        return False


def top_statements(conn: psycopg.Connection[Any], limit: int = 12) -> list[dict[str, Any]]:
    """The statements that took the most time (nested ones included), for the profile."""
    try:
        rows = conn.execute(
            """SELECT calls, round(total_exec_time::numeric, 1) AS total_ms,
                      round(mean_exec_time::numeric, 3) AS mean_ms,
                      left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query
                 FROM public.pg_stat_statements
                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                ORDER BY total_exec_time DESC LIMIT %s""",
            [limit],
        ).fetchall()
    except psycopg.Error:
        return []
    return [
        {"calls": int(c), "total_ms": float(t), "mean_ms": float(m), "query": q}
        for c, t, m, q in rows
    ]


def row_writes(dsn: str, schemas: tuple[str, ...]) -> dict[str, int]:
    """Rows inserted, updated and deleted so far in ``schemas``' tables, per schema
    (pg_stat_user_tables; a backend reports its counts when it ends a transaction
    a second after its last report, and when it exits)."""
    time.sleep(1.2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            """SELECT schemaname, sum(n_tup_ins + n_tup_upd + n_tup_del)::bigint
                 FROM pg_stat_user_tables WHERE schemaname = ANY(%s) GROUP BY 1""",
            [list(schemas)],
        ).fetchall()
    return {str(schema): int(n) for schema, n in rows}


def wal_position(dsn: str) -> int:
    """The server's WAL insert position, in bytes: what it has written to its
    WAL so far (the whole cluster's: the benchmark runs one system at a
    time, so a difference is that system's, its autovacuum and checkpoints'
    full-page images included)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')").fetchone()
    assert row is not None
    return int(row[0])


def _per_job(before: dict[str, int], after: dict[str, int], jobs: int) -> dict[str, float]:
    return {k: round((after.get(k, 0) - before.get(k, 0)) / jobs, 2) for k in after}


# -- the engine ----------------------------------------------------------------


def prepare_engine_source(cluster: Cluster, jobs: int) -> tuple[str, float]:
    """A database with ``jobs`` approved one-step movements, to clone per run."""
    name = "qtg_bench_throughput_src"
    dsn = engine.clone(cluster, name)
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        engine.create_movements(conn, jobs, INSTANT_PLAN, "tp-", callback_url=CALLBACK_URL)
        # the creation's events chained now: promote_chain counts the drain's alone
        while conn.execute("SELECT promote_audit('bench-setup', 10000)").fetchone() != (0,):
            pass
    cluster.disconnect_all(name)
    return name, time.monotonic() - started


LIVE_CHAIN = "audit chain promoted live"
"""The setting of an engine run whose audit_outbox_promoter runs beside the
dispatchers, as `qtg run` deploys it."""


def run_engine(
    cluster: Cluster,
    source: str,
    jobs: int,
    processes: int,
    concurrency: int,
    log_dir: Path,
    promoter: bool = False,
) -> dict[str, Any]:
    """One drain of ``source``'s movements by ``processes`` dispatchers. With
    ``promoter``, a `qtg worker audit_outbox_promoter` process runs beside
    them and the run waits for the audit chain to hold every event (its lag
    behind the last movement is reported); without, the chain's share is
    measured after the drain (promote_chain)."""
    name = f"qtg_bench_engine_{processes}p" + ("_chain" if promoter else "")
    dsn = cluster.create_db(name, source)
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        engine.vacuum_analyze(conn)
        profiled = _stats_reset(conn)
        writes_before = row_writes(dsn, ENGINE_SCHEMAS)
        before = conn.execute("SELECT coalesce(max(id), 0) FROM audit_outbox").fetchone()[0]  # type: ignore[index]
        env = runner_env(cluster.runner_dsn(dsn))
        cpu = equal.ServerCpu.open(conn)
        wal_before = wal_position(dsn)
        # the database clock at launch: the wall clock ends at the last movement's finished_at
        t0_db = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        cpu0 = cpu.seconds() if cpu else None
        clients0 = cpu_seconds()
        t0 = time.monotonic()
        children = [
            spawn(
                f"engine-{processes}p-{i}",
                [QTG, "worker", "node_dispatcher", "--concurrency", str(concurrency)],
                env,
                log_dir,
            )
            for i in range(processes)
        ]
        if promoter:
            children.append(
                spawn(
                    f"engine-{processes}p-promoter",
                    [QTG, "worker", "audit_outbox_promoter"],
                    env,
                    log_dir,
                )
            )
        try:

            def remaining() -> int:
                row = conn.execute(
                    "SELECT count(*) FROM movement_requests WHERE request_state <> 'COMPLETED'"
                ).fetchone()
                return int(row[0]) if row else -1

            last_sample = [0.0]

            def tick(now: float) -> None:
                if now - last_sample[0] >= 0.25:
                    last_sample[0] = now
                    for child in children:
                        child.sample_rss(now - t0)

            # a light poll (a count over the movements): the figure comes from the
            # database's own timestamps, not from this loop's cadence
            wait_for(
                lambda: remaining() == 0, DRAIN_TIMEOUT, "the engine to drain", 0.25, children, tick
            )
            chain_lag = audited_s = None
            if promoter:
                drained = time.monotonic()

                def unchained() -> int:
                    row = conn.execute(
                        "SELECT count(*) FROM audit_batches WHERE promoted_at IS NULL"
                    ).fetchone()
                    return int(row[0]) if row else -1

                wait_for(lambda: unchained() == 0, DRAIN_TIMEOUT, "the audit chain", 0.05, children)
                chain_lag = time.monotonic() - drained
                # on the database clock, as the drain's wall: the last promotion
                last = conn.execute(
                    "SELECT extract(epoch FROM promoted_at - %s) FROM audit_log"
                    " ORDER BY seq DESC LIMIT 1",
                    [t0_db],
                ).fetchone()
                audited_s = float(last[0]) if last else None
            db_cpu = cpu.seconds() - cpu0 if cpu and cpu0 is not None else None
            peaks = [child.peak_rss() for child in children]
            span_row = conn.execute(
                """SELECT extract(epoch FROM max(finished_at) - min(started_at)),
                          count(*) FILTER (WHERE request_state = 'COMPLETED'),
                          extract(epoch FROM max(finished_at) - %s)
                     FROM movement_requests""",
                [t0_db],
            ).fetchone()
            transitions = conn.execute(
                """SELECT count(*) FILTER (WHERE entity = 'node'),
                          count(*) FILTER (WHERE entity = 'request')
                     FROM audit_outbox
                    WHERE id > %s AND action = 'state_changed'""",
                [before],
            ).fetchone()
            side_effects = conn.execute(
                "SELECT count(*), sum(submit_count) FROM qtg_sim.side_effects"
            ).fetchone()
            statements = top_statements(conn) if profiled else []
        finally:
            codes = [child.stop() for child in children]
    client_cpu = cpu_seconds() - clients0
    writes_after = row_writes(dsn, ENGINE_SCHEMAS)
    writes = _per_job(writes_before, writes_after, jobs)
    wal_drained = wal_position(dsn)
    chain = (
        {"live": True, "lag_s": round(chain_lag or 0.0, 2)}
        if promoter
        else promote_chain(dsn, jobs, writes_after)
    )
    wal_chained = wal_position(dsn)
    assert span_row and transitions and side_effects
    db_span = float(span_row[0])
    wall = float(span_row[2])
    node_transitions = int(transitions[0])
    audited = _with_audit_rows(
        jobs, wall, audited_s, db_cpu, client_cpu, None if promoter else chain
    )
    return {
        "system": "QTG engine",
        "processes": processes,
        "concurrency": concurrency,
        "setting": f"c={concurrency}, {LIVE_CHAIN}" if promoter else None,
        "jobs": jobs,
        "completed": int(span_row[1]),
        "wall_s": round(wall, 3),
        "db_span_s": round(db_span, 3),
        "per_s": round(jobs / wall, 1),
        "per_s_db_span": round(jobs / db_span, 1),
        "node_transitions": node_transitions,
        "request_transitions": int(transitions[1]),
        "node_transitions_per_s": round(node_transitions / wall, 1),
        "side_effects": int(side_effects[0]),
        "submits": int(side_effects[1] or 0),
        "exit_codes": codes,
        "peak_rss_mb": [round(p / 2**20, 1) for p in peaks],
        "rss_samples_mb": {
            child.name: [(round(t, 2), round(r / 2**20, 1)) for t, r in child.rss_samples]
            for child in children
        },
        "row_writes_per_job": writes,
        # the drain's WAL, and the whole life's: with the audit chain's promotion
        "wal_bytes_per_job": round((wal_drained - wal_before) / jobs),
        "wal_bytes_per_job_chained": round((wal_chained - wal_before) / jobs),
        "db_cpu_s": round(db_cpu, 3) if db_cpu is not None else None,
        "db_cpu_ms_per_job": round(1000 * db_cpu / jobs, 4) if db_cpu is not None else None,
        "client_cpu_s": round(client_cpu, 3),
        "client_cpu_ms_per_job": round(1000 * client_cpu / jobs, 4),
        "top_statements": statements,
        "audit_chain": chain,
        "with_audit_rows": audited,
    }


def _with_audit_rows(
    jobs: int,
    wall: float,
    audited_s: float | None,
    db_cpu: float | None,
    client_cpu: float,
    chain: dict[str, Any] | None,
) -> dict[str, Any]:
    """A drain counted as the equal-guarantee peers' handlers are: until every
    transition has its audit row (audit_log's, one per event). With the
    promoter live (``audited_s``), from the launch until the last promotion
    (both on the database clock), its CPU inside the run's; without (``chain``, promoted after the
    drain), the drain's time and CPU plus the promotion's."""
    seconds = audited_s if audited_s is not None else wall + float((chain or {})["seconds"])
    db_ms = None if db_cpu is None else 1000 * db_cpu / jobs
    client_ms = 1000 * client_cpu / jobs
    if chain is not None:
        chain_db, chain_client = chain.get("db_cpu_ms_per_job"), chain["client_cpu_ms_per_job"]
        db_ms = None if db_ms is None or chain_db is None else db_ms + chain_db
        client_ms += chain_client
    return {
        "seconds": round(seconds, 3),
        "per_s": round(jobs / seconds, 1),
        "db_cpu_ms_per_job": None if db_ms is None else round(db_ms, 4),
        "total_cpu_ms_per_job": None if db_ms is None else round(db_ms + client_ms, 4),
    }


def promote_chain(dsn: str, jobs: int, writes_before: dict[str, int]) -> dict[str, Any]:
    """The audit chain's share, measured after the drain: promote_audit called
    until nothing is left, as the audit_outbox_promoter sidecar does (it does
    not run during the drain). Chaining is the engine's guarantee beyond the
    equal-guarantee peers' audit row per transition (that is the drain's
    audit batch): each event becomes an audit_log row, hashed to the one
    before, and its batch is deleted. Counts the events, the time and the
    database CPU it took, and its row writes per movement."""
    with (
        psycopg.connect(dsn, autocommit=True) as poll,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        engine.bind(conn)
        cpu = equal.ServerCpu.open(poll)
        cpu0 = cpu.seconds() if cpu else None
        own0 = cpu_seconds(own=True)
        events = calls = 0
        started = time.monotonic()
        while True:
            row = conn.execute(
                "SELECT promote_audit('bench-promoter', %s)", [audit_outbox_promoter.BATCH_SIZE]
            ).fetchone()
            calls += 1
            if not row or not row[0]:
                break
            events += int(row[0])
        seconds = time.monotonic() - started
        db_cpu = cpu.seconds() - cpu0 if cpu and cpu0 is not None else None
        client_cpu = cpu_seconds(own=True) - own0
    writes = _per_job(writes_before, row_writes(dsn, ENGINE_SCHEMAS), jobs)
    return {
        "events": events,
        "calls": calls,
        "seconds": round(seconds, 3),
        "events_per_s": round(events / seconds, 1) if seconds else None,
        "movements_per_s": round(jobs / seconds, 1) if seconds else None,
        "row_writes_per_job": writes,
        "db_cpu_ms_per_job": round(1000 * db_cpu / jobs, 4) if db_cpu is not None else None,
        # the promoter's client side: this process, calling promote_audit
        "client_cpu_ms_per_job": round(1000 * client_cpu / jobs, 4),
    }


# -- the peers -----------------------------------------------------------------


def _node_url(dsn: str) -> str:
    p = conninfo_to_dict(dsn)
    host = str(p.get("host") or "localhost")
    user = quote(str(p.get("user") or "postgres"))
    password = f":{quote(str(p['password']))}" if p.get("password") else ""
    if host.startswith("/"):
        return (
            f"postgres://{user}{password}@/{quote(str(p['dbname']))}"
            f"?host={quote(host)}&port={p.get('port') or 5432}"
        )
    return f"postgres://{user}{password}@{host}:{p.get('port') or 5432}/{quote(str(p['dbname']))}"


PEERS: dict[str, dict[str, Any]] = {
    "Procrastinate": {
        "argv": lambda dsn, action, arg: [
            PYTHON,
            "-m",
            "benchmarks.peer_worker",
            "procrastinate",
            action,
            dsn,
            str(arg),
        ],
        "remaining": "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
        "done_span": """SELECT extract(epoch FROM max(at) - min(at)) FROM procrastinate_events
                         WHERE type IN ('started', 'succeeded')""",
        "exits_when_drained": True,
        "poll_s": 0.05,
        "schemas": ("public",),
    },
    "PgQueuer": {
        "argv": lambda dsn, action, arg: [
            PYTHON,
            "-m",
            "benchmarks.peer_worker",
            "pgqueuer",
            action,
            dsn,
            str(arg),
        ],
        "remaining": "SELECT count(*) FROM pgqueuer",
        "done_span": "SELECT extract(epoch FROM max(created) - min(created))"
        " FROM pgqueuer_log WHERE status <> 'queued'",
        "exits_when_drained": True,
        "poll_s": 0.02,
        "schemas": ("public",),
    },
    "Graphile Worker": {
        "argv": lambda dsn, action, arg: [
            "node",
            "benchmarks/graphile/bench.js",
            action,
            _node_url(dsn),
            str(arg),
        ],
        "remaining": "SELECT count(*) FROM graphile_worker._private_jobs",
        "done_span": None,
        "exits_when_drained": False,
        "poll_s": 0.01,  # it drains in well under a second: poll finely
        "schemas": ("graphile_worker",),
    },
}


def peer_env(dsn: str) -> dict[str, str]:
    """The environment of a peer's process. The bench's DSNs name a credentials file
    (``passfile``) that only libpq reads: asyncpg (PgQueuer) and node-postgres
    (Graphile Worker) take the password from PGPASSWORD instead, set here (the
    environment, unlike the command line, is private to the process's user)."""
    from qtg_runner import credentials

    env = runner_env(dsn)
    params = conninfo_to_dict(dsn)
    if params.get("passfile") and not params.get("password"):
        password = credentials.password_for(
            Path(str(params["passfile"])), dsn, str(params.get("user") or "postgres")
        )
        if password:
            env["PGPASSWORD"] = password
    return env


def peer_version(peer: str) -> str | None:
    """The version of ``peer`` that runs (the bench extra pins none exactly)."""
    import importlib.metadata
    import json

    if peer == "Graphile Worker":
        manifest = Path(__file__).parent / "graphile/node_modules/graphile-worker/package.json"
        with contextlib.suppress(OSError, ValueError):
            return str(json.loads(manifest.read_text())["version"])
        return None
    package = {"Procrastinate": "procrastinate", "PgQueuer": "pgqueuer"}.get(peer, "dbos")
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(package)
    return None


def graphile_available() -> str | None:
    """None when Graphile Worker can run, else why not."""
    if shutil.which("node") is None:
        return "Node.js is not installed"
    if not (Path(__file__).parent / "graphile" / "node_modules" / "graphile-worker").is_dir():
        return "graphile-worker is not installed (make bench runs npm install when node is present)"
    return None


def python_peer_available(module: str) -> str | None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install -e '.[bench]')"
    return None


def run_peer(
    cluster: Cluster, peer: str, jobs: int, processes: int, concurrency: int, log_dir: Path
) -> dict[str, Any]:
    spec = PEERS[peer]
    slug = f"{peer.lower().replace(' ', '_')}_{processes}p_c{concurrency}"
    name = f"bench_{slug}"
    dsn = cluster.create_db(name)
    env = peer_env(dsn)
    for action, arg in (("setup", 0), ("enqueue", jobs)):
        child = spawn(f"{slug}-{action}", spec["argv"](dsn, action, arg), env, log_dir)
        t_start = time.monotonic()
        code = child.proc.wait(300)
        child.log.close()
        if code != 0:
            raise RuntimeError(
                f"{peer} {action} failed (exit {code}); see {log_dir}/{child.name}.log"
            )
        if action == "enqueue":
            enqueue_s = time.monotonic() - t_start
    writes_before = row_writes(dsn, spec["schemas"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        queued = conn.execute(spec["remaining"]).fetchone()[0]  # type: ignore[index]
        if queued != jobs:
            raise RuntimeError(f"{peer}: {queued} jobs queued, expected {jobs}")
        cpu = equal.ServerCpu.open(conn)
        cpu0 = cpu.seconds() if cpu else None
        clients0 = cpu_seconds()
        t0 = time.monotonic()
        children: list[Child] = [
            spawn(
                f"{slug}-work-{i}",
                spec["argv"](dsn, "work", concurrency),
                env,
                log_dir,
            )
            for i in range(processes)
        ]
        try:
            t_done = wait_for(
                lambda: conn.execute(spec["remaining"]).fetchone()[0] == 0,  # type: ignore[index]
                DRAIN_TIMEOUT,
                f"{peer} to drain",
                spec["poll_s"],
                children,
            )
            db_cpu = cpu.seconds() - cpu0 if cpu and cpu0 is not None else None
            span = conn.execute(spec["done_span"]).fetchone()[0] if spec["done_span"] else None  # type: ignore[index]
        finally:
            if spec["exits_when_drained"]:
                for child in children:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.proc.wait(30)
            for child in children:
                child.stop()
    client_cpu = cpu_seconds() - clients0
    wall = t_done - t0
    writes = _per_job(writes_before, row_writes(dsn, spec["schemas"]), jobs)
    return {
        "row_writes_per_job": writes,
        "system": peer,
        "version": peer_version(peer),
        "processes": processes,
        "concurrency": concurrency,
        "jobs": jobs,
        "enqueue_s": round(enqueue_s, 3),
        "wall_s": round(wall, 3),
        "db_span_s": round(float(span), 3) if span is not None else None,
        "per_s": round(jobs / wall, 1),
        "db_cpu_s": round(db_cpu, 3) if db_cpu is not None else None,
        "db_cpu_ms_per_job": round(1000 * db_cpu / jobs, 4) if db_cpu is not None else None,
        "client_cpu_ms_per_job": round(1000 * client_cpu / jobs, 4),
    }


# -- equal-guarantee peers -------------------------------------------------------
#
# Each peer's job handler writes what a movement writes (benchmarks/equal/
# movement.sql) in the peer's own database: N APPROVED movements are set up, one
# job (or DBOS workflow) per movement is enqueued with the peer's own call, and
# the workers drain them. The figure runs from the workers' launch until every
# movement is COMPLETED; the server's CPU time over the same window.


def _dbos(workflow: str, slug: str) -> dict[str, Any]:
    """DBOS Transact's worker processes, running ``workflow`` (benchmarks/dbos_peer.py:
    ``movement``, three plain steps, or ``movement_datasource``, its record
    steps as datasource transactions)."""
    return {
        "slug": slug,
        "setup": lambda dsn, sys_dsn, n: [
            PYTHON,
            "-m",
            "benchmarks.dbos_peer",
            "setup",
            dsn,
            sys_dsn,
            str(n),
        ],
        "enqueue": lambda dsn, sys_dsn, n: [
            PYTHON,
            "-m",
            "benchmarks.dbos_peer",
            "enqueue",
            dsn,
            sys_dsn,
            str(n),
            workflow,
        ],
        # c is (worker_concurrency, polling_interval_sec)
        "work": lambda dsn, sys_dsn, c, i: [
            PYTHON,
            "-m",
            "benchmarks.dbos_peer",
            "work",
            dsn,
            sys_dsn,
            str(c[0]),
            str(c[1]),
            f"bench-worker-{i}",
        ],
        "exits_when_drained": False,
        "schemas": ("dbos",),  # the datasource's step outputs, in the app database
        "system_db": True,  # DBOS's workflow and step records, in a database of its own
    }


EQUAL_PEERS: dict[str, dict[str, Any]] = {
    "Graphile Worker": {
        "setup": lambda dsn, sys_dsn, n: [
            "node",
            "benchmarks/graphile/bench.js",
            "setup",
            _node_url(dsn),
        ],
        "enqueue": lambda dsn, sys_dsn, n: [
            "node",
            "benchmarks/graphile/bench.js",
            "enqueue-eg",
            _node_url(dsn),
            str(n),
        ],
        "work": lambda dsn, sys_dsn, c, i: [
            "node",
            "benchmarks/graphile/bench.js",
            "work-eg",
            _node_url(dsn),
            str(c),
        ],
        "exits_when_drained": False,
        "schemas": ("graphile_worker",),
        "system_db": False,
    },
    "PgQueuer": {
        "setup": lambda dsn, sys_dsn, n: [
            PYTHON,
            "-m",
            "benchmarks.peer_worker",
            "pgqueuer",
            "setup",
            dsn,
        ],
        "enqueue": lambda dsn, sys_dsn, n: [
            PYTHON,
            "-m",
            "benchmarks.peer_worker",
            "pgqueuer",
            "enqueue-eg",
            dsn,
            str(n),
        ],
        "work": lambda dsn, sys_dsn, c, i: [
            PYTHON,
            "-m",
            "benchmarks.peer_worker",
            "pgqueuer",
            "work-eg",
            dsn,
            str(c),
        ],
        "exits_when_drained": True,
        "schemas": ("public",),
        "system_db": False,
    },
    "DBOS Transact": _dbos("movement", "dbos"),
    "DBOS Transact (datasource transactions)": _dbos("movement_datasource", "dbos_ds"),
}


def dbos_available() -> str | None:
    import importlib.util

    if importlib.util.find_spec("dbos") is None:
        return "dbos is not installed (pip install -e '.[bench]')"
    return None


def _setting_label(concurrency: Any) -> str:
    if isinstance(concurrency, tuple):
        return f"c={concurrency[0]}, poll {concurrency[1]:g} s"
    return f"c={concurrency}"


def run_equal_peer(
    cluster: Cluster, peer: str, jobs: int, processes: int, concurrency: Any, log_dir: Path
) -> dict[str, Any]:
    """``jobs`` movements drained by ``peer``'s equal-guarantee handler in
    ``processes`` worker processes at ``concurrency``."""
    spec = EQUAL_PEERS[peer]
    c_slug = (
        "_".join(str(x) for x in concurrency) if isinstance(concurrency, tuple) else concurrency
    )
    short = spec.get("slug") or peer.lower().replace(" ", "_")
    slug = f"eg_{short}_{processes}p_c{c_slug}".replace(".", "")
    name = f"bench_{slug}"
    dsn = cluster.create_db(name)
    sys_dsn = cluster.create_db(f"{name}_sys") if spec["system_db"] else dsn
    env = peer_env(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        equal.setup(conn, jobs)
    enqueue_s = 0.0
    for action in ("setup", "enqueue"):
        child = spawn(f"{slug}-{action}", spec[action](dsn, sys_dsn, jobs), env, log_dir)
        t_start = time.monotonic()
        code = child.proc.wait(600)
        child.log.close()
        if code != 0:
            raise RuntimeError(
                f"{peer} {action} failed (exit {code}); see {log_dir}/{child.name}.log"
            )
        if action == "enqueue":
            enqueue_s = time.monotonic() - t_start
    own = (*equal.SCHEMAS, *spec["schemas"])
    writes_before = row_writes(dsn, (*own, *equal.WORLD))
    sys_before = row_writes(sys_dsn, ("dbos",)) if spec["system_db"] else {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        if spec["system_db"]:
            with psycopg.connect(sys_dsn, autocommit=True) as sys_conn:
                sys_conn.execute("VACUUM ANALYZE")
                # pg_stat_statements is read per database: its view in DBOS's too
                with contextlib.suppress(psycopg.Error):
                    sys_conn.execute(
                        "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public"
                    )
        profiled = _stats_reset(conn)
        cpu = equal.ServerCpu.open(conn)
        cpu0 = cpu.seconds() if cpu else None
        wal_before = wal_position(dsn)
        clients0 = cpu_seconds()
        t0 = time.monotonic()
        children: list[Child] = [
            spawn(f"{slug}-work-{i}", spec["work"](dsn, sys_dsn, concurrency, i), env, log_dir)
            for i in range(processes)
        ]
        try:
            t_done = wait_for(
                lambda: conn.execute(equal.REMAINING).fetchone()[0] == 0,  # type: ignore[index]
                DRAIN_TIMEOUT,
                f"{peer} (equal guarantees) to drain",
                0.05,
                children,
            )
            db_cpu = cpu.seconds() - cpu0 if cpu and cpu0 is not None else None
        finally:
            if spec["exits_when_drained"]:
                for child in children:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.proc.wait(30)
            for child in children:
                child.stop()
        client_cpu = cpu_seconds() - clients0
        record = equal.check(conn, jobs)
        statements = top_statements(conn, 8) if profiled else []
    if profiled and spec["system_db"]:
        with psycopg.connect(sys_dsn, autocommit=True) as sys_conn:
            statements += [{**st, "database": "system"} for st in top_statements(sys_conn, 8)]
    wall = t_done - t0
    writes = _per_job(writes_before, row_writes(dsn, (*own, *equal.WORLD)), jobs)
    wal_after = wal_position(dsn)
    if spec["system_db"]:
        for schema, n in _per_job(sys_before, row_writes(sys_dsn, ("dbos",)), jobs).items():
            writes[f"{schema} (system db)"] = n
    return {
        "system": peer,
        "version": peer_version(peer),
        "equal_guarantees": True,
        "processes": processes,
        "concurrency": list(concurrency) if isinstance(concurrency, tuple) else concurrency,
        "setting": _setting_label(concurrency),
        "jobs": jobs,
        "enqueue_s": round(enqueue_s, 3),
        "wall_s": round(wall, 3),
        "per_s": round(jobs / wall, 1),
        "db_cpu_s": round(db_cpu, 3) if db_cpu is not None else None,
        "db_cpu_ms_per_job": round(1000 * db_cpu / jobs, 4) if db_cpu is not None else None,
        "client_cpu_ms_per_job": round(1000 * client_cpu / jobs, 4),
        "row_writes_per_job": writes,
        "wal_bytes_per_job": round((wal_after - wal_before) / jobs),
        "record": record,
        "top_statements": statements,
    }


# -- the bare ceiling ----------------------------------------------------------

BARE_SCHEMA = """
CREATE TABLE bare_queue (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload jsonb NOT NULL DEFAULT '{}',
    done    boolean NOT NULL DEFAULT false
);
CREATE INDEX bare_queue_todo_idx ON bare_queue (id) WHERE NOT done;
"""

BARE_CLAIM_COMPLETE = """
WITH claimed AS (
    SELECT id FROM bare_queue WHERE NOT done ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED
)
UPDATE bare_queue q SET done = true FROM claimed WHERE q.id = claimed.id
"""


async def _bare_drain(dsn: str, connections: int) -> None:
    async def worker() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while True:
                cur = await conn.execute(BARE_CLAIM_COMPLETE)
                if cur.rowcount == 0:
                    return

    await asyncio.gather(*(worker() for _ in range(connections)))


def run_bare(cluster: Cluster, jobs: int, connections: int) -> dict[str, Any]:
    dsn = cluster.create_db(f"bench_bare_{connections}c")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(BARE_SCHEMA)
        conn.execute(
            "INSERT INTO bare_queue (payload) SELECT '{}' FROM generate_series(1, %s)", [jobs]
        )
        conn.execute("VACUUM ANALYZE bare_queue")
    writes_before = row_writes(dsn, ("public",))
    wal_before = wal_position(dsn)
    t0 = time.monotonic()
    asyncio.run(_bare_drain(dsn, connections))
    wall = time.monotonic() - t0
    with psycopg.connect(dsn, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM bare_queue WHERE NOT done").fetchone()[0]  # type: ignore[index]
    if left:
        raise RuntimeError(f"bare ceiling left {left} rows undone")
    writes = _per_job(writes_before, row_writes(dsn, ("public",)), jobs)
    wal_after = wal_position(dsn)
    return {
        "row_writes_per_job": writes,
        "wal_bytes_per_job": round((wal_after - wal_before) / jobs),
        "system": "bare SKIP LOCKED ceiling",
        "processes": 1,
        "concurrency": connections,
        "jobs": jobs,
        "wall_s": round(wall, 3),
        "per_s": round(jobs / wall, 1),
    }
