"""Network-bound connection pools for runners.

A runner logs in as its network's runner role (qtg_<network>_runner) and pins
search_path and application_name in the connection's startup options, so the
binding cannot be undone by a rolled-back transaction: every statement on
every pooled connection runs as that role, against that network's schema.
"""

from __future__ import annotations

import os
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from qtg_runner.config import NetworkMode


def runner_role(network: NetworkMode) -> str:
    return f"qtg_{network}_runner"


def operator_role(network: NetworkMode) -> str:
    return f"qtg_{network}_operator"


def runner_conninfo(admin_dsn: str, network: NetworkMode, application_name: str) -> str:
    """The DSN a runner of ``network`` uses.

    QTG_RUNNER_DATABASE_URL, when set, is used as given (it must log in as the
    network's runner role, e.g. with a password). Otherwise the admin DSN with
    the user swapped for the runner role (enough for the embedded server and
    trust or peer authentication).
    """
    return _bound_conninfo(
        admin_dsn, network, application_name, runner_role(network), "QTG_RUNNER_DATABASE_URL"
    )


def operator_conninfo(admin_dsn: str, network: NetworkMode, application_name: str) -> str:
    """The DSN operator commands (create, approve, cancel) use: the network's
    operator role, from QTG_OPERATOR_DATABASE_URL or the admin DSN, as above."""
    return _bound_conninfo(
        admin_dsn, network, application_name, operator_role(network), "QTG_OPERATOR_DATABASE_URL"
    )


def _bound_conninfo(
    admin_dsn: str, network: NetworkMode, application_name: str, role: str, explicit_env: str
) -> str:
    explicit = os.environ.get(explicit_env, "").strip()
    params: dict[str, Any] = conninfo_to_dict(explicit or admin_dsn)
    if not explicit:
        params["user"] = role
        params.pop("password", None)
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


def open_pool(
    conninfo: str, *, name: str, min_size: int = 1, max_size: int = 8
) -> AsyncConnectionPool[Any]:
    """An autocommit pool; transactions are opened explicitly where a claim needs one.

    Every connection is checked before it is handed out (an empty round trip:
    one whose backend was terminated, or whose server restarted, is replaced
    instead of failing its first statement), and one returned broken after an
    error is discarded; the pool reconnects in the background."""
    return AsyncConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        name=name,
        kwargs={"autocommit": True},
        check=AsyncConnectionPool.check_connection,
        open=False,
    )
