"""`qtg api`: the HTTP API and the operator page; `qtg api token issue|revoke`."""

from __future__ import annotations

import ipaddress
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from qtg_runner.api import tokens
from qtg_runner.api.identity import Database, server_conninfo
from qtg_runner.commands.common import (
    CommandError,
    NetworkOption,
    cli_errors,
    parse_duration,
    resolve_network,
)
from qtg_runner.config import load_settings
from qtg_runner.db.embedded import database_url

if TYPE_CHECKING:  # fastapi is imported by the commands that serve, not by every `qtg`
    from qtg_runner.api.app import ApiConfig

app = typer.Typer(
    help=(
        "The HTTP API (/v1, /docs, /metrics) and the operator page (/), served as the "
        "callers' own logins; `qtg api token` issues and revokes bearer tokens."
    ),
    invoke_without_command=True,
)
token_app = typer.Typer(
    help="Bearer tokens: a login and its password in one string (admin).", no_args_is_help=True
)
app.add_typer(token_app, name="token")
out = Console()
err = Console(stderr=True)


def api_config(network: str | None, *, secure_cookies: bool = False) -> ApiConfig:
    """Where callers log in: the server of QTG_DATABASE_URL (or the embedded
    one), with no user or password of the process's own."""
    from qtg_runner.api.app import ApiConfig

    settings = load_settings()
    net = resolve_network(network)
    return ApiConfig(
        database=Database(server_conninfo(database_url(settings)), net),
        workers_enabled=settings.workers_enabled,
        secure_cookies=secure_cookies,
    )


@app.callback()
def serve_cmd(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="TLS certificate (PEM): serve HTTPS.")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="TLS private key (PEM) of --tls-cert.")
    ] = None,
    behind_tls_proxy: Annotated[
        bool,
        typer.Option(
            "--behind-tls-proxy",
            help="A reverse proxy terminates TLS in front of this API: serve plain HTTP on a "
            "non-loopback --host to it alone, and mark the page's cookies Secure.",
        ),
    ] = False,
    network: NetworkOption = None,
) -> None:
    """Serve the API and the operator page (uvicorn) until SIGTERM or Ctrl-C.

    Every request logs in to the database as the caller (HTTP Basic or a bearer
    token); the process holds no credential of its own. It runs with or without
    workers: with QTG_WORKERS_ENABLED not true (API-only mode) movements are created
    and approved and stay APPROVED.
    """
    if ctx.invoked_subcommand is not None:
        return
    if (tls_cert is None) != (tls_key is None):
        raise typer.BadParameter("give both --tls-cert and --tls-key, or neither")
    for path in (tls_cert, tls_key):
        if path is not None and not path.is_file():
            raise typer.BadParameter(f"{path}: no such file")
    if tls_cert is None and not behind_tls_proxy and not loopback(host):
        raise typer.BadParameter(
            f"{host} is reachable from other hosts, and every request carries a login's "
            "password: serve HTTPS (--tls-cert and --tls-key), or give --behind-tls-proxy "
            "when a proxy in front of it does",
            param_hint="--host",
        )
    from qtg_runner.api.server import uvicorn_config

    with cli_errors():
        config = api_config(network, secure_cookies=tls_cert is not None or behind_tls_proxy)
    import uvicorn

    scheme = "https" if tls_cert else "http"
    where = f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}"
    out.print(
        f"qtg api on {config.database.network}: API {where}/v1 (docs {where}/docs), "
        f"operator page {where}/ , metrics {where}/metrics"
        + ("" if config.workers_enabled else " · QTG_WORKERS_ENABLED is not true: API-only mode"),
        highlight=False,
    )
    server = uvicorn.Server(uvicorn_config(config, host, port, tls_cert=tls_cert, tls_key=tls_key))
    server.run()
    if not server.started:
        raise CommandError(f"could not serve on {host}:{port} (see the log above)", 1)


def loopback(host: str) -> bool:
    """Whether ``host`` listens on loopback only (``localhost`` or a loopback address)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


CredentialsFile = Annotated[
    Path | None,
    typer.Option(
        "--credentials-file",
        help="Where the login's new password is kept (default: QTG_CREDENTIALS_FILE).",
    ),
]


@token_app.command("issue")
def issue_cmd(
    name: Annotated[str, typer.Argument(help="The login the token logs in as.")],
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="Write the token to this file (created 0600); '-' prints it."
        ),
    ],
    valid_for: Annotated[
        str | None,
        typer.Option("--valid-for", help="Expire after e.g. 30d (PostgreSQL's VALID UNTIL)."),
    ] = None,
    credentials_file: CredentialsFile = None,
) -> None:
    """Issue a bearer token for the login NAME (as the admin): a fresh password for
    the login, in the form qtg.NAME.SECRET. It replaces the login's password."""
    until = None
    if valid_for is not None:
        until = datetime.now(UTC) + parse_duration(valid_for, "--valid-for")
    with cli_errors():
        settings = load_settings()
        passfile = (credentials_file or settings.credentials_file).absolute()
        if str(output) != "-" and output.exists():
            raise CommandError(f"{output} exists: give a new file", 2)
        token = tokens.issue(database_url(settings), name, passfile, until)
    if str(output) == "-":
        sys.stdout.write(token + "\n")
        return
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    out.print(
        f"token for {name} written to {output} (0600)"
        + (f", valid until {until.isoformat(timespec='seconds')}" if until else ""),
        highlight=False,
    )


@token_app.command("revoke")
def revoke_cmd(
    name: Annotated[str, typer.Argument(help="The login whose token to revoke.")],
    credentials_file: CredentialsFile = None,
) -> None:
    """Revoke the login's token (as the admin): a fresh password that only the
    credentials file holds, and the login's open sessions ended."""
    with cli_errors():
        settings = load_settings()
        passfile = (credentials_file or settings.credentials_file).absolute()
        ended = tokens.revoke(database_url(settings), name, passfile)
    out.print(f"token of {name} revoked; {ended} open session(s) ended", highlight=False)
