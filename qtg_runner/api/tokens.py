"""Bearer tokens: a login and its password in one string (api/identity.py).

``issue`` (the admin) gives the login a fresh 256-bit password (only its
scram verifier reaches the server), optionally with an expiry that
PostgreSQL itself enforces (``VALID UNTIL``), keeps it in the credentials file
(so `--as NAME` still works on the admin's host) and returns the token
``qtg.<login>.<password>``. ``revoke`` gives the login another fresh password
(kept only in the credentials file) and ends the login's open sessions, the
operator page's included: the old token opens nothing from then on.

A token is the login's password in another form, so issuing one replaces the
password the person had (psql users read the new one from the credentials
file, or are handed it). Refused for a superuser or a login that may create
roles or databases: the API never acts as an admin.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from qtg_runner import credentials
from qtg_runner.api.identity import token_for
from qtg_runner.db.logins import LoginError, validate_name


def _check_login(conn: psycopg.Connection[Any], name: str) -> None:
    validate_name(name)
    row = conn.execute(
        "SELECT rolcanlogin, rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication"
        " OR rolbypassrls FROM pg_roles WHERE rolname = %s",
        [name],
    ).fetchone()
    if row is None or not row[0]:
        raise LoginError(f"{name} is not a login on this server: see `qtg operator list`")
    if row[1]:
        raise LoginError(
            f"{name} is an administrative role (superuser, createrole, createdb, replication "
            "or bypassrls): the API takes no token for it"
        )


def _set_password(
    conn: psycopg.Connection[Any], name: str, password: str, valid_until: datetime | None
) -> None:
    verifier = conn.pgconn.encrypt_password(password.encode(), name.encode(), b"scram-sha-256")
    conn.execute(
        sql.SQL("ALTER ROLE {} PASSWORD {} VALID UNTIL {}").format(
            sql.Identifier(name),
            sql.Literal(verifier.decode()),
            sql.Literal("infinity" if valid_until is None else valid_until.isoformat()),
        )
    )


@contextmanager
def _password_replaced(
    admin_dsn: str, name: str, passfile: Path, valid_until: datetime | None
) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    """The login ``name`` given a fresh password (valid until ``valid_until``),
    kept in ``passfile`` and committed: the admin's connection that did it,
    open for the block, and the password."""
    password = credentials.generate_password()
    host, port = credentials.server_of(admin_dsn)
    with psycopg.connect(admin_dsn) as conn:
        _check_login(conn, name)
        _set_password(conn, name, password, valid_until)
        credentials.put(passfile, credentials.Entry(host, port, "*", name, password))
        conn.commit()
        yield conn, password


def issue(admin_dsn: str, name: str, passfile: Path, valid_until: datetime | None) -> str:
    """A new token for the login ``name``; its password is replaced."""
    with _password_replaced(admin_dsn, name, passfile, valid_until) as (_conn, password):
        return token_for(name, password)


def revoke(admin_dsn: str, name: str, passfile: Path) -> int:
    """Revoke the login's token (a fresh password only the credentials file
    holds) and end its sessions; how many sessions were ended."""
    with _password_replaced(admin_dsn, name, passfile, None) as (conn, _password):
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE usename = %s",
            [name],
        ).fetchone()
        conn.commit()
    return int(row[0]) if row else 0
