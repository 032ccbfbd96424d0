"""`qtg operator add|list|remove` and `qtg runner add|list|remove`: one database
login per person and per runner, made by the admin (QTG_DATABASE_URL or the
embedded server's superuser)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from qtg_runner import credentials
from qtg_runner.commands.common import NetworkOption, cli_errors, resolve_network
from qtg_runner.commands.tables import Grid, WideOption, show
from qtg_runner.config import Settings, load_settings
from qtg_runner.db import logins
from qtg_runner.db.embedded import database_url

out = Console()

CredentialsFileOption = Annotated[
    Path | None,
    typer.Option(
        "--credentials-file",
        help=(
            "Write the password to this file (pgpass format, created 0600) only, instead of "
            "the login's own file (logins/NAME.pgpass) and the admin's credentials file "
            "(QTG_CREDENTIALS_FILE, else beside the embedded server's data directory, else "
            "~/.config/qtg/pgpass)."
        ),
    ),
]

ONE_PER: dict[logins.Kind, str] = {
    "operator": "person",
    "runner": "runner deployment",
    "reader": "dashboard or scraper",
}
WHAT: dict[logins.Kind, str] = {
    "operator": (
        "a person: creates, approves and cancels movements in their own name "
        "(four eyes: the creator's login cannot approve)"
    ),
    "runner": "a runner deployment: `qtg run` and `qtg worker` log in as it, never as the admin",
    "reader": (
        "a dashboard, an auditor or a metrics scraper: reads every table and view of its "
        "network (e.g. /metrics of `qtg api`), changes nothing"
    ),
}


def _target(network: str | None, credentials_file: Path | None) -> tuple[Settings, str, Path]:
    """What a login command works on: the settings, the network and the
    credentials file (``credentials_file``, else the admin's), made absolute."""
    settings = load_settings()
    net = resolve_network(network)
    return settings, net, (credentials_file or settings.credentials_file).absolute()


def _make_app(kind: logins.Kind) -> typer.Typer:
    group = f"qtg_<network>_{kind}"
    app = typer.Typer(
        help=(
            f"{kind.capitalize()} logins, one per {ONE_PER[kind]}: login roles that "
            f"are members of {group}, made by the admin (QTG_DATABASE_URL, or the embedded "
            "server's superuser)."
        ),
        no_args_is_help=True,
    )

    @app.command(
        "add",
        help=(
            f"Create the {kind} login NAME for {WHAT[kind]}.\n\n"
            f"A login role that is a member of {group}, with a generated password (256 "
            "bits, scram-sha-256: only its verifier reaches the server) written once to a "
            "credentials file of that login's own (logins/NAME.pgpass beside the "
            "credentials file, pgpass format, 0600: the file to hand over, holding no other "
            "password) and to the admin's credentials file, and the connection limit and the "
            f"statement, lock and idle-transaction timeouts configured on {group} (ALTER "
            "ROLE on it changes them for the logins made afterwards). Refused when a role "
            "of that name exists."
        ),
    )
    def add_cmd(
        name: Annotated[
            str,
            typer.Argument(
                help="Login name: lower-case letters, digits and _, starting with a letter; "
                "unique on the server (roles are shared by all its databases)."
            ),
        ],
        network: NetworkOption = None,
        credentials_file: CredentialsFileOption = None,
    ) -> None:
        with cli_errors():
            settings, net, passfile = _target(network, credentials_file)
            own = None if credentials_file is not None else credentials.login_file(passfile, name)
            dsn = logins.add(database_url(settings), kind, net, name, passfile, own)
        out.print(
            f"{kind} login [bold]{name}[/bold] created on {net} (member of "
            f"{logins.group_role(kind, net)})",
            highlight=False,
        )
        out.print(
            f"its password is in {own or passfile}"
            + (
                f", a file of its own to hand to that {ONE_PER[kind]} (it holds no other "
                f"password), and in the admin's credentials file {passfile}"
                if own
                else ""
            ),
            highlight=False,
        )
        use = "qtg run --as" if kind == "runner" else "qtg movement ... --as"
        out.print(
            f'connect with: psql "$(qtg db url --login {name})"  or  {use} {name}',
            highlight=False,
        )
        if not logins.can_connect(dsn):
            out.print(
                f"[yellow]note[/yellow]: connecting as {name} from here failed; check the "
                "server's pg_hba.conf for this login",
                highlight=False,
            )

    @app.command("list")
    def list_cmd(wide: WideOption = False, network: NetworkOption = None) -> None:
        """List the logins of the network with their limits and open sessions."""
        with cli_errors():
            settings = load_settings()
            net = resolve_network(network)
            dsn = database_url(settings)
            rows = logins.listed(dsn, kind, net, settings.credentials_file)
        table = Grid(
            f"{kind} logins of {net}",
            ["login", "connection limit", "defaults", "sessions", "in credentials file"],
            text=["defaults"],
            drop=["in credentials file", "connection limit"],
            wide=wide,
        )
        for row, in_file in rows:
            table.add_row(
                row.name,
                str(row.connection_limit),
                ", ".join(row.settings),
                str(row.sessions),
                "yes" if in_file else "no",
            )
        show(out, table)

    @app.command(
        "password",
        help=(
            f"Print the password of the {kind} login NAME, as the admin's credentials file "
            "holds it, and nothing else: to sign in to the operator page or hand it over. "
            "Nothing changes (`qtg api token issue` sets a new one). Refused for a name "
            f"that is not a login of {group}."
        ),
    )
    def password_cmd(
        name: Annotated[str, typer.Argument(help="The login.")],
        network: NetworkOption = None,
        credentials_file: Annotated[
            Path | None,
            typer.Option(
                "--credentials-file",
                help="Read it from this file (pgpass format) instead of the admin's "
                "credentials file (QTG_CREDENTIALS_FILE, else beside the embedded server's "
                "data directory, else ~/.config/qtg/pgpass).",
            ),
        ] = None,
    ) -> None:
        with cli_errors():
            settings, net, passfile = _target(network, credentials_file)
            password = logins.password(database_url(settings), kind, net, name, passfile)
        typer.echo(password)

    @app.command(
        "remove",
        help=(
            f"Remove the {kind} login NAME: drop the role, end its open sessions and take "
            "its password out of the credentials file. Refused for a name that is not a "
            f"login of {group} (a superuser, another network's login, an unknown name). "
            "Audit rows keep the name."
        ),
    )
    def remove_cmd(
        name: Annotated[str, typer.Argument(help="The login to remove.")],
        network: NetworkOption = None,
        credentials_file: CredentialsFileOption = None,
    ) -> None:
        with cli_errors():
            settings, net, passfile = _target(network, credentials_file)
            had = logins.remove(database_url(settings), kind, net, name, passfile)
        out.print(
            f"{kind} login {name} removed from {net}"
            + (f"; its password removed from {passfile}" if had else ""),
            highlight=False,
        )

    return app


operator_app = _make_app("operator")
runner_app = _make_app("runner")
reader_app = _make_app("reader")
