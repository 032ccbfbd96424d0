"""Network-bound connection pools, and how a command finds the login it runs as.

A runner logs in as a runner login of its own (a member of qtg_<network>_runner,
made by `qtg runner add`) and pins search_path and application_name in the
connection's startup options, so the binding cannot be undone by a rolled-back
transaction: every statement on every pooled connection runs as that login,
against that network's schema. The DSN is used as given: the login is whoever
the DSN names (QTG_DATABASE_URL, or `--as NAME` on the same server); nothing
here swaps users or adds a password.
"""

from __future__ import annotations

import os
import select
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import ConnStatus
from psycopg_pool import AsyncConnectionPool

from qtg_runner import credentials
from qtg_runner.config import NetworkMode, Settings


def bound_conninfo(dsn: str, network: NetworkMode, application_name: str) -> str:
    """``dsn`` bound to ``network``: search_path (and the session timeouts) in the
    startup options, and an application name."""
    params: dict[str, Any] = conninfo_to_dict(dsn)
    # PGOPTIONS (e.g. -c qtg.now=... to pin the clock of a test database in a drill) is
    # kept: libpq would otherwise drop it in favour of these options
    params["options"] = " ".join(
        part
        for part in (
            f"-c search_path={network},qtg -c statement_timeout=60000",
            "-c idle_in_transaction_session_timeout=300000",
            os.environ.get("PGOPTIONS", "").strip(),
        )
        if part
    )
    params["application_name"] = application_name[:63]
    return make_conninfo(**params)


def login_dsn(dsn: str, name: str | None, settings: Settings) -> str:
    """The DSN a command runs with: ``dsn`` itself, or with ``name`` (``--as NAME``)
    the login ``name`` on the same server, its password in the login's own
    credentials file (credentials.login_file) when there is one, else in the
    credentials file."""
    if name is None:
        return dsn
    own = credentials.login_file(settings.credentials_file, name)
    if own.exists() and credentials.password_for(own, dsn, name) is not None:
        return credentials.login_dsn(dsn, name, own)
    passfile: Path = settings.credentials_file
    if credentials.password_for(passfile, dsn, name) is None:
        host, port = credentials.server_of(dsn)
        raise credentials.CredentialsError(
            f"the credentials file {passfile} holds no password for {name} on {host}:{port}: "
            f"the admin makes logins with `qtg operator add {name}` or `qtg runner add {name}` "
            "(or set QTG_CREDENTIALS_FILE to the file that has it)"
        )
    return credentials.login_dsn(dsn, name, passfile)


def open_pool(
    conninfo: str, *, name: str, min_size: int = 1, max_size: int = 8
) -> AsyncConnectionPool[Any]:
    """An autocommit pool; transactions are opened explicitly where a claim needs one.

    Every connection is checked before it is handed out (check_idle_connection:
    one whose backend was terminated, or whose server restarted, is replaced
    instead of failing its first statement), and one returned broken after an
    error is discarded; the pool reconnects in the background."""
    return AsyncConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        name=name,
        kwargs={"autocommit": True},
        check=check_idle_connection,
        open=False,
    )


async def check_idle_connection(conn: AsyncConnection[Any]) -> None:
    """The pool's check of a connection before it is handed out; raises when
    the connection cannot be used.

    A connection that sat idle in the pool has nothing to read from the server
    unless the server spoke first: a backend that was terminated sends its
    FATAL error and closes the socket, and a server that went away closes it.
    So the socket is polled without waiting, and only a connection with
    something to read pays a round trip (the pool's own check, which reads it,
    raises on the error and lets the pool replace the connection). An idle
    connection costs no round trip, which matters on the DAG step, whose every
    call takes a connection from the pool."""
    if conn.closed or conn.pgconn.status != ConnStatus.OK:
        raise ConnectionError("the pooled connection is closed")
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    if poller.poll(0):
        await AsyncConnectionPool.check_connection(conn)
