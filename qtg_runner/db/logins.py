"""Logins: one database login per person and per runner.

The network roles `qtg_<network>_operator` and `qtg_<network>_runner` are
groups (NOLOGIN, sql/schemas/0013_login_roles.sql): a person or a runner logs
in as a login role of their own that is a member of one, so `session_user`
names who called and one credential can be removed alone.

PostgreSQL applies neither a connection limit nor `ALTER ROLE ... SET`
defaults through membership, so the group role holds them as a template
(0007: runners 30 connections, operators 10; statement 60 s, lock 30 s,
idle-in-transaction 5 min) and `create_login` copies them onto each login it
makes. The admin changes the template with ALTER ROLE on the group role, and a
login's own with ALTER ROLE on it.

A password is never sent to the server in clear: the client computes the
scram-sha-256 verifier (libpq's PQencryptPasswordConn) and the server stores
only that, so neither a statement log nor pg_stat_activity shows a password.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg import sql

from qtg_runner import credentials
from qtg_runner.config import NetworkMode

Kind = Literal["operator", "runner", "reader"]
KINDS: tuple[Kind, ...] = ("operator", "runner", "reader")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
RESERVED_PREFIXES = ("pg_", "qtg_")


class LoginError(ValueError):
    """A login cannot be made, found or removed as asked."""


@dataclass(frozen=True)
class LoginRow:
    name: str
    connection_limit: int
    settings: tuple[str, ...]
    sessions: int


def group_role(kind: Kind, network: NetworkMode | str) -> str:
    return f"qtg_{network}_{kind}"


def validate_name(name: str) -> None:
    if not NAME_PATTERN.match(name):
        raise LoginError(
            f"{name!r} is not a login name: use 1 to 63 lower-case letters, digits and _, "
            "starting with a letter (e.g. alice, runner_eu1)"
        )
    if name.startswith(RESERVED_PREFIXES) or name in ("public", "none"):
        raise LoginError(
            f"{name!r} is reserved: names starting with pg_ or qtg_ belong to PostgreSQL"
            " and the engine"
        )


def _check_group(conn: psycopg.Connection[Any], group: str) -> None:
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [group]).fetchone() is None:
        raise LoginError(
            f"role {group} does not exist: run `qtg db migrate` first (or check --network)"
        )


def create_login(conn: psycopg.Connection[Any], name: str, group: str, password: str) -> None:
    """Create the login ``name``, a member of ``group``, with ``password`` and the
    group's connection limit and SET defaults. In the caller's transaction."""
    validate_name(name)
    _check_group(conn, group)
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name]).fetchone() is not None:
        raise LoginError(
            f"a role named {name} already exists on this server (roles are shared by every "
            f"database of a server): pick another name, e.g. {name}_2, or remove it first"
        )
    row = conn.execute(
        """SELECT r.rolconnlimit, coalesce(s.setconfig, '{}')
             FROM pg_roles r
             LEFT JOIN pg_db_role_setting s ON s.setrole = r.oid AND s.setdatabase = 0
            WHERE r.rolname = %s""",
        [group],
    ).fetchone()
    assert row is not None
    limit, settings = int(row[0]), list(row[1])
    verifier = conn.pgconn.encrypt_password(password.encode(), name.encode(), b"scram-sha-256")
    conn.execute(
        sql.SQL(
            "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
            " INHERIT CONNECTION LIMIT {} PASSWORD {} IN ROLE {}"
        ).format(
            sql.Identifier(name),
            sql.Literal(limit),
            sql.Literal(verifier.decode()),
            sql.Identifier(group),
        )
    )
    for setting in settings:
        key, _, value = setting.partition("=")
        listed: sql.Composable
        if key == "search_path":
            # a list: each schema its own identifier (one literal would name a
            # single schema called "testnet, qtg")
            listed = sql.SQL(", ").join(
                sql.Identifier(part.strip().strip('"')) for part in value.split(",")
            )
        else:
            listed = sql.Literal(value)
        conn.execute(
            sql.SQL("ALTER ROLE {} SET {} = {}").format(
                sql.Identifier(name), sql.Identifier(key), listed
            )
        )


def list_logins(conn: psycopg.Connection[Any], group: str) -> list[LoginRow]:
    """The logins that are members of ``group``, with their limit, defaults and open sessions."""
    _check_group(conn, group)
    rows = conn.execute(
        """SELECT r.rolname, r.rolconnlimit, coalesce(s.setconfig, '{}'),
                  (SELECT count(*) FROM pg_stat_activity a WHERE a.usename = r.rolname)
             FROM pg_roles r
             JOIN pg_auth_members m ON m.member = r.oid
             JOIN pg_roles g ON g.oid = m.roleid
             LEFT JOIN pg_db_role_setting s ON s.setrole = r.oid AND s.setdatabase = 0
            WHERE g.rolname = %s AND r.rolcanlogin
            ORDER BY r.rolname""",
        [group],
    ).fetchall()
    return [LoginRow(str(n), int(c), tuple(sorted(s)), int(a)) for n, c, s, a in rows]


def drop_login(conn: psycopg.Connection[Any], name: str, group: str) -> None:
    """Drop the login ``name``, which must be a login member of ``group`` (and not a
    superuser), then end its open sessions. In a transaction of its own."""
    _check_group(conn, group)
    row = conn.execute(
        """SELECT r.rolsuper, r.rolcanlogin, pg_has_role(r.oid, %s, 'MEMBER'), r.oid
             FROM pg_roles r WHERE r.rolname = %s""",
        [group, name],
    ).fetchone()
    if row is None or not row[1] or row[0] or not row[2]:
        raise LoginError(f"{name} is not a login of {group}: see the list command")
    oid = row[3]
    try:
        with conn.transaction():
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
    except psycopg.errors.DependentObjectsStillExist as exc:
        raise LoginError(
            f"{name} cannot be removed: it owns objects or holds privileges "
            f"({' '.join(str(exc).split())}); reassign or drop them first"
            " (REASSIGN OWNED BY / DROP OWNED BY)"
        ) from exc
    # by oid: a dropped role's sessions no longer show its name; wait up to 5 s each
    conn.execute(
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usesysid = %s", [oid]
    )


MEMBER_QUERY = """SELECT session_user::text, r.rolsuper, pg_has_role(session_user, %s, 'MEMBER')
                    FROM pg_roles r WHERE r.rolname = session_user"""
"""The session's login, whether it is a superuser, and whether it is a member of
the group role given as the one parameter."""


def member_problem(row: tuple[Any, ...], kind: Kind, network: NetworkMode | str) -> str | None:
    """What is wrong with acting as ``kind`` of ``network`` for the session that
    MEMBER_QUERY described with ``row``: not a member of the group role, or a
    superuser (a member of everything, and an admin credential is not a person's
    or a runner's). None when it may."""
    login, superuser, member = str(row[0]), bool(row[1]), bool(row[2])
    group = group_role(kind, network)
    if superuser:
        return (
            f"connected as {login}, a superuser: this command runs as a {kind} login of its "
            f"own (a member of {group}). The admin makes one with `qtg {kind} add NAME "
            f"--network {network}`; then pass --as NAME, or set QTG_DATABASE_URL to "
            f'"$(qtg db url --login NAME)"'
        )
    if not member:
        return (
            f"login {login} is not {'an' if kind == 'operator' else 'a'} {kind} of {network}"
            f" (not a member of {group}): use a "
            f"login made by `qtg {kind} add NAME --network {network}`"
        )
    return None


def check_member(conn: psycopg.Connection[Any], kind: Kind, network: NetworkMode | str) -> str:
    """The session's login, if it may act as ``kind`` of ``network``; LoginError if not."""
    row = conn.execute(MEMBER_QUERY, [group_role(kind, network)]).fetchone()
    assert row is not None
    problem = member_problem(row, kind, network)
    if problem is not None:
        raise LoginError(problem)
    return str(row[0])


# -- the admin's commands: the role and its line in the credentials file together ----


def add(
    admin_dsn: str,
    kind: Kind,
    network: NetworkMode | str,
    name: str,
    passfile: Path,
    own_file: Path | None = None,
) -> str:
    """Create the ``kind`` login ``name`` of ``network`` with a generated password,
    kept in ``passfile`` and, when given, in ``own_file``, a file of that login's
    alone; return its DSN (which names the login's own file if any, else
    ``passfile``; never the password). The role is committed only once the
    password is written, and the lines are taken out again if the commit fails."""
    password = credentials.generate_password()
    host, port = credentials.server_of(admin_dsn)
    files = [passfile] + ([own_file] if own_file is not None and own_file != passfile else [])
    with psycopg.connect(admin_dsn) as conn:
        create_login(conn, name, group_role(kind, network), password)
        try:
            for file in files:
                credentials.put(file, credentials.Entry(host, port, "*", name, password))
            conn.commit()
        except BaseException:
            for file in files:
                credentials.remove(file, host, port, name)
            raise
    return credentials.login_dsn(admin_dsn, name, files[-1])


def remove(
    admin_dsn: str, kind: Kind, network: NetworkMode | str, name: str, passfile: Path
) -> bool:
    """Drop the ``kind`` login ``name`` of ``network`` and its line in ``passfile``;
    whether the file had one."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        drop_login(conn, name, group_role(kind, network))
    host, port = credentials.server_of(admin_dsn)
    own = credentials.login_file(passfile, name)
    if own.exists():
        credentials.remove(own, host, port, name)
    return credentials.remove(passfile, host, port, name)


def password(
    admin_dsn: str, kind: Kind, network: NetworkMode | str, name: str, passfile: Path
) -> str:
    """The password ``passfile`` holds for the ``kind`` login ``name`` of
    ``network`` (LoginError when it is not such a login, or the file holds none)."""
    group = group_role(kind, network)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        _check_group(conn, group)
        names = {row.name for row in list_logins(conn, group)}
    if name not in names:
        raise LoginError(f"{name} is not a login of {group}: `qtg {kind} list` shows them")
    found = credentials.password_for(passfile, admin_dsn, name)
    if found is None:
        raise LoginError(
            f"{passfile} holds no password for {name}: the file it was written to "
            "(`add` said where) has it, or `qtg api token issue` sets a new one"
        )
    return found


def listed(
    admin_dsn: str, kind: Kind, network: NetworkMode | str, passfile: Path
) -> list[tuple[LoginRow, bool]]:
    """The logins of ``kind`` in ``network``, each with whether ``passfile`` holds its password."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        rows = list_logins(conn, group_role(kind, network))
    return [
        (row, credentials.password_for(passfile, admin_dsn, row.name) is not None) for row in rows
    ]


def can_connect(dsn: str) -> bool:
    """Whether ``dsn`` logs in (a check after add: the server's pg_hba may not let it)."""
    try:
        with psycopg.connect(dsn, connect_timeout=5):
            return True
    except psycopg.Error:
        return False
