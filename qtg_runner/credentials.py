"""The credentials file: the passwords qtg generated, in libpq's pgpass format.

One line per login, ``host:port:database:user:password`` (``\\`` escapes ``:``
and ``\\`` inside a field; ``*`` matches anything), so a DSN names the file
(``passfile=...``) and never carries a password: not in argv, not in an
environment dump, not in a log line. psql and every libpq client read it as
they read ~/.pgpass. It holds the embedded server's superuser password and the
password of every login `qtg operator|runner add` made (config.py says where it
is: beside the embedded server's data directory, else ~/.config/qtg/pgpass, or
QTG_CREDENTIALS_FILE): it is the admin's. Each login's password is also written
to a file of that login's own (login_file: ``logins/NAME.pgpass`` beside it),
the one to hand over: a runner given its file holds its own password and no
other.

The file is only ever written whole: a new file is created next to it with
O_EXCL and mode 0600 (so there is no moment when it is readable by anyone
else, whatever the umask), filled, flushed and renamed over the old one, under
an flock, so concurrent writers do not lose each other's lines. An existing
file keeps its mode if that is stricter than 0600 and is refused if it is
looser (libpq would ignore it, and its passwords may have been read): qtg never
loosens or silently repairs it. Directories it has to create are made 0700;
an existing directory's mode is never changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

PRIVATE = 0o600
HEADER = (
    "# qtg credentials (libpq pgpass format: host:port:database:user:password).\n"
    "# Written by qtg; keep it 0600. Point a DSN at it with passfile=<this file>.\n"
)


class CredentialsError(RuntimeError):
    """The credentials file cannot be used as it is, or lacks a login."""


@dataclass(frozen=True)
class Entry:
    host: str
    port: str
    database: str
    user: str
    password: str

    def matches(self, host: str, port: str, user: str) -> bool:
        return self.user == user and self.host in ("*", host) and self.port in ("*", port)

    def line(self) -> str:
        fields = (self.host, self.port, self.database, self.user, self.password)
        return ":".join(_escape(f) for f in fields) + "\n"


def login_file(credentials_file: Path, name: str) -> Path:
    """The credentials file of the login ``name`` alone, beside the admin's
    ``credentials_file`` (in its ``logins/`` directory): the file to hand to that
    person or runner deployment, which holds no other password."""
    return credentials_file.parent / "logins" / f"{name}.pgpass"


def generate_password() -> str:
    """256 random bits, URL-safe (no ``:`` or ``\\`` to escape)."""
    return secrets.token_urlsafe(32)


def server_of(dsn: str) -> tuple[str, str]:
    """The (host, port) a pgpass line must name for ``dsn``, as libpq matches them:
    the host parameter (a socket directory or a host name), ``localhost`` when
    there is none, and the port (5432 when there is none)."""
    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    return host, port


def login_dsn(dsn: str, user: str, passfile: Path) -> str:
    """``dsn`` (same server and database) logging in as ``user``, its password in
    ``passfile`` (any password in ``dsn`` is left out)."""
    params = conninfo_to_dict(dsn)
    params.pop("password", None)
    params.update(user=user, passfile=str(passfile))
    return make_conninfo("", **params)


def without_password(dsn: str) -> tuple[str, bool]:
    """``dsn`` without a password parameter, and whether it had one."""
    params = conninfo_to_dict(dsn)
    if params.pop("password", None) is None:
        return dsn, False
    return make_conninfo("", **params), True


def read(path: Path) -> list[Entry]:
    """The entries of the file (none when it does not exist); refuses a file that
    others may read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CredentialsError(f"cannot read the credentials file {path}: {exc.strerror}") from exc
    with os.fdopen(fd, encoding="utf-8") as fh:
        _check_private(path, os.fstat(fh.fileno()))
        return [entry for line in fh.read().splitlines() if (entry := _parse(line)) is not None]


def password_for(path: Path, dsn: str, user: str) -> str | None:
    """The password the file holds for ``user`` on the server of ``dsn`` (libpq's
    match: the first line whose host, port and user fit)."""
    host, port = server_of(dsn)
    for entry in read(path):
        if entry.matches(host, port, user):
            return entry.password
    return None


def put(path: Path, entry: Entry) -> None:
    """Add ``entry``, replacing any line for the same host, port and user."""

    def change(lines: list[str]) -> list[str]:
        kept = [
            line
            for line in lines
            if (old := _parse(line)) is None
            or (old.host, old.port, old.user) != (entry.host, entry.port, entry.user)
        ]
        return [*kept, entry.line()]

    _rewrite(path, change)


def remove(path: Path, host: str, port: str, user: str) -> bool:
    """Remove the lines of ``user`` on that host and port; whether there was one."""
    removed: list[str] = []

    def change(lines: list[str]) -> list[str]:
        kept = []
        for line in lines:
            old = _parse(line)
            if old is not None and (old.host, old.port, old.user) == (host, port, user):
                removed.append(line)
            else:
                kept.append(line)
        return kept

    if not path.exists():
        return False
    _rewrite(path, change)
    return bool(removed)


# -- the file --------------------------------------------------------------------------


def _escape(field: str) -> str:
    return field.replace("\\", "\\\\").replace(":", "\\:")


def _parse(line: str) -> Entry | None:
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    fields: list[str] = []
    current: list[str] = []
    chars = iter(line.rstrip("\n"))
    for ch in chars:
        if ch == "\\":
            current.append(next(chars, ""))
        elif ch == ":" and len(fields) < 4:
            fields.append("".join(current))
            current = []
        else:
            current.append(ch)
    fields.append("".join(current))
    if len(fields) != 5:
        return None
    return Entry(*fields)


def _check_private(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise CredentialsError(f"the credentials file {path} is not a regular file")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialsError(
            f"the credentials file {path} is open to other users (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); libpq ignores such a file and its passwords may "
            f"have been read: check who read it, rotate them, then chmod 600 {path}"
        )


def _make_dirs(directory: Path) -> None:
    """Create the missing directories of ``directory``, 0700 each; never touch an existing one."""
    missing: list[Path] = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock = path.with_name(f".{path.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, PRIVATE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _rewrite(path: Path, change: Callable[[list[str]], list[str]]) -> None:
    """Replace the file by ``change(its lines)``, atomically, under the lock."""
    _make_dirs(path.parent)
    with _locked(path):
        mode = PRIVATE
        lines: list[str] = []
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            lines = HEADER.splitlines(keepends=True)
        except OSError as exc:
            raise CredentialsError(
                f"cannot open the credentials file {path}: {exc.strerror}"
            ) from exc
        else:
            with os.fdopen(fd, encoding="utf-8") as fh:
                st = os.fstat(fh.fileno())
                _check_private(path, st)
                mode = stat.S_IMODE(st.st_mode) & PRIVATE  # never looser than it is
                lines = fh.read().splitlines(keepends=True)
        lines = [line if line.endswith("\n") else line + "\n" for line in lines]
        text = "".join(change(lines))
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
