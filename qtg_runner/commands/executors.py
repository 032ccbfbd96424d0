"""`qtg executors register`: the deploy step that registers the executors this
build ships, as the admin. Runners only check the registry at start."""

from __future__ import annotations

import typer
from rich.console import Console

from qtg_runner.commands.common import NetworkOption, cli_errors, resolve_network
from qtg_runner.commands.tables import Grid, WideOption, show
from qtg_runner.config import load_settings
from qtg_runner.db.embedded import database_url
from qtg_runner.executors.registry import SHIPPED, register_shipped

app = typer.Typer(no_args_is_help=True)  # its help: its line in cli.Qtg.lazy
out = Console()


@app.command("register")
def register_cmd(wide: WideOption = False, network: NetworkOption = None) -> None:
    """Register the executors this build ships in the network's registry.

    Run it as the admin (QTG_DATABASE_URL, or the embedded server's superuser)
    when deploying a build, before its runners start: a runner refuses to start
    (`qtg: error: ...`, exit 1) while an executor it carries is not registered
    with the same has_side_effect and node config schema. Registering again
    what is already registered changes nothing. An executor that has nodes can
    never lose its side effect (QT041).
    """
    with cli_errors():
        net = resolve_network(network)
        results = register_shipped(database_url(load_settings()), net)
    table = Grid(f"executors of {net}", ["executor", "has side effect", "registration"], wide=wide)
    for executor, status in zip(SHIPPED, results, strict=True):
        table.add_row(executor.key, str(executor.has_side_effect).lower(), status)
    show(out, table)
