"""The PostgreSQL every case runs on: an embedded server of its own, or QTG_DATABASE_URL.

The embedded server lives in a temporary data directory, is configured once
(pg_stat_statements preloaded, so it needs one restart) and is stopped and
removed at the end. With QTG_DATABASE_URL (an admin login that can create
databases and roles) nothing is configured: the server's settings are recorded
as they are. The engine's runners log in as a runner login of the run's own
(made once, its password in a private file of the run, dropped at the end),
as `qtg run` requires.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# Settings of the embedded bench server. Durability stays at PostgreSQL's
# defaults (fsync, synchronous_commit, full_page_writes on): every system
# measured here pays for its commits as it would in production.
EMBEDDED_SETTINGS: dict[str, str] = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "shared_buffers": "1GB",
    "max_connections": "200",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
    "maintenance_work_mem": "512MB",
}

RECORDED_SETTINGS = (
    "server_version",
    "shared_buffers",
    "max_connections",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "max_wal_size",
    "checkpoint_timeout",
    "work_mem",
    "random_page_cost",
    "effective_cache_size",
    "jit",
    "shared_preload_libraries",
)


@dataclass
class Cluster:
    admin_dsn: str  # superuser, database postgres (or the URL's database)
    embedded: bool
    data_dir: Path | None = None
    made: list[str] = field(default_factory=list)
    runner_login: str | None = None
    passfile: Path | None = None

    def dsn(self, dbname: str) -> str:
        return make_conninfo(self.admin_dsn, dbname=dbname)

    def connect(self, dbname: str | None = None, **kw: Any) -> psycopg.Connection[Any]:
        kw.setdefault("autocommit", True)
        return psycopg.connect(self.dsn(dbname) if dbname else self.admin_dsn, **kw)

    def create_db(self, name: str, template: str | None = None) -> str:
        self.drop_db(name)
        with self.connect() as conn:
            if template:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                        sql.Identifier(name), sql.Identifier(template)
                    )
                )
            else:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.made.append(name)
        return self.dsn(name)

    def drop_db(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def disconnect_all(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                [name],
            )

    def has_pg_stat_statements(self) -> bool:
        with self.connect() as conn:
            row = conn.execute(
                "SELECT current_setting('shared_preload_libraries') ~ 'pg_stat_statements'"
            ).fetchone()
        return bool(row and row[0])

    def facts(self) -> dict[str, Any]:
        with self.connect() as conn:
            settings = {
                name: conn.execute("SELECT current_setting(%s, true)", [name]).fetchone()[0]  # type: ignore[index]
                for name in RECORDED_SETTINGS
            }
        cpu_model = ""
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
        mem_gib = None
        with contextlib.suppress(OSError, ValueError):
            kb = int(Path("/proc/meminfo").read_text().split()[1])
            mem_gib = round(kb / 1024 / 1024, 1)
        return {
            "cores": os.cpu_count(),
            "cpu": cpu_model,
            "memory_gib": mem_gib,
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "postgres": settings.pop("server_version"),
            "server": "embedded (temporary data directory)"
            if self.embedded
            else "QTG_DATABASE_URL",
            "settings": settings,
        }

    def runner_dsn(self, dsn: str) -> str:
        """``dsn`` (a migrated database of this cluster) as the run's runner login, a
        member of qtg_testnet_runner, made on first use."""
        from qtg_runner import credentials
        from qtg_runner.db.logins import create_login

        if self.runner_login is None or self.passfile is None:
            name = f"bench_runner_{os.getpid()}"
            password = credentials.generate_password()
            passfile = Path(tempfile.mkdtemp(prefix="qtg-bench-login-")) / "pgpass"
            host, port = credentials.server_of(self.admin_dsn)
            credentials.put(passfile, credentials.Entry(host, port, "*", name, password))
            with psycopg.connect(self.admin_dsn) as conn:
                create_login(conn, name, "qtg_testnet_runner", password)
            self.runner_login, self.passfile = name, passfile
        return credentials.login_dsn(dsn, self.runner_login, self.passfile)

    def close(self) -> None:
        for name in reversed(self.made):
            with contextlib.suppress(psycopg.Error):
                self.drop_db(name)
        self.made.clear()
        if self.runner_login is not None:
            with contextlib.suppress(psycopg.Error), self.connect() as conn:
                conn.execute(
                    sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(self.runner_login))
                )
            self.runner_login = None
        if self.passfile is not None:
            shutil.rmtree(self.passfile.parent, ignore_errors=True)
            self.passfile = None


def _configure_embedded(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, value in EMBEDDED_SETTINGS.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), value))


def _restart_embedded(data_dir: Path) -> None:
    """pg_ctl restart keeps the socket options the server was started with."""
    import subprocess

    from qtg_runner.db.embedded import SYSTEM_USER_AS_ROOT, bin_dir

    subprocess.run(
        [
            str(bin_dir() / "pg_ctl"),
            "-D",
            str(data_dir),
            "-w",
            "-m",
            "fast",
            "-t",
            "60",
            "-l",
            str(data_dir / "log"),
            "restart",
        ],
        check=True,
        capture_output=True,
        user=SYSTEM_USER_AS_ROOT if os.geteuid() == 0 else None,
    )


@contextlib.contextmanager
def open_cluster() -> Iterator[Cluster]:
    """The bench's server for the duration of the run."""
    url = os.environ.get("QTG_DATABASE_URL", "").strip()
    if url:
        params = conninfo_to_dict(url)
        params.setdefault("dbname", "postgres")
        cluster = Cluster(make_conninfo(**params), embedded=False)
        try:
            yield cluster
        finally:
            cluster.close()
        return

    from qtg_runner.db.embedded import start_embedded, stop_embedded

    tmp = Path(tempfile.mkdtemp(prefix="qtg-bench-pg-"))
    tmp.chmod(0o711)  # ours: as root, the server's system user must traverse it
    data_dir = tmp / "pg18"
    try:
        server = start_embedded(data_dir)
        _configure_embedded(server.dsn())
        _restart_embedded(data_dir)  # shared_preload_libraries needs a restart
        server = start_embedded(data_dir)
        cluster = Cluster(server.dsn(), embedded=True, data_dir=data_dir)
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        with contextlib.suppress(Exception):
            stop_embedded(data_dir)
        shutil.rmtree(tmp, ignore_errors=True)
