"""`qtg run` and `qtg worker`: the runner processes."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Annotated

import typer

from qtg_runner.config import NETWORK_MODES, NetworkMode, load_settings
from qtg_runner.db.embedded import database_url
from qtg_runner.db.pool import login_dsn
from qtg_runner.log import configure, event
from qtg_runner.loop import WorkerEntry
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.wakeup import Wakeup
from qtg_runner.workers import BY_NAME, REGISTRY

NetworkOption = Annotated[
    str | None,
    typer.Option(
        "--network", "-n", help="mainnet or testnet (default: QTG_NETWORK_MODE, else testnet)."
    ),
]


AsOption = Annotated[
    str | None,
    typer.Option(
        "--as",
        help=(
            "Log in as this login (made by `qtg operator add` or `qtg runner add`) on the "
            "server of QTG_DATABASE_URL (or the embedded one), its password from the "
            "credentials file. Default: whoever QTG_DATABASE_URL names."
        ),
    ),
]


def resolve_network(network: str | None) -> NetworkMode:
    settings = load_settings()
    if network is None:
        return settings.network_mode
    if network not in NETWORK_MODES:
        raise typer.BadParameter(
            f"{network!r} is not a network (use one of: {', '.join(NETWORK_MODES)})"
        )
    return network


async def _gate_closed() -> int:
    """Workers disabled: start nothing, stay up until asked to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    return 0


async def run_workers(
    dsn: str, network: NetworkMode, entries: Sequence[WorkerEntry], max_concurrency: int, name: str
) -> int:
    runtime = await Runtime.open(dsn, network, name=name, max_concurrency=max_concurrency)
    try:
        ctx = runtime.context(max_concurrency)
        return await supervise(ctx, entries, Wakeup(runtime.conninfo, network))
    finally:
        await runtime.close()


def start(
    entries: Sequence[WorkerEntry],
    network: str | None,
    max_concurrency: int,
    name: str,
    as_login: str | None = None,
) -> None:
    configure()
    settings = load_settings()
    net = resolve_network(network)
    if not settings.workers_enabled:
        typer.echo(
            "MG_WORKERS_ENABLED is false: no worker started. Movements can be created and approved "
            "and stay APPROVED; set MG_WORKERS_ENABLED=true to run them."
            " Waiting for SIGTERM/SIGINT.",
            err=True,
        )
        raise typer.Exit(asyncio.run(_gate_closed()))
    dsn = login_dsn(database_url(settings), as_login, settings)
    event(logging.INFO, "runner_starting", network=net, workers=",".join(e.name for e in entries))
    raise typer.Exit(asyncio.run(run_workers(dsn, net, entries, max_concurrency, name)))


def run_cmd(
    network: NetworkOption = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Run only this worker (repeatable). Default: every worker."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=256, help="External calls in flight at once per worker.")
    ] = 8,
    as_login: AsOption = None,
) -> None:
    """Run the supervisor: every worker (or --only some) for one network.

    Runs as a runner login and nothing else: QTG_DATABASE_URL is that login's
    DSN (`qtg db url --login NAME` prints it; the password stays in the
    credentials file), or --as NAME picks it. The admin's DSN, or any login
    that is not a member of qtg_<network>_runner, is refused, as is a build
    whose executors are not registered (the admin's `qtg executors register`).

    Core workers (node_dispatcher, node_observer, node_recovery) fail fast: a
    crash stops the process with exit code 1. Sidecars (expiration_checker,
    template_proposal_expiration) are isolated: a crash is logged and the rest
    keep running. SIGTERM/SIGINT stop cleanly with exit code 0. Nothing starts
    unless MG_WORKERS_ENABLED=true.
    """
    names = only or [entry.name for entry in REGISTRY]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise typer.BadParameter(
            f"unknown worker {', '.join(unknown)} (workers: {', '.join(BY_NAME)})",
            param_hint="--only",
        )
    start([BY_NAME[n] for n in names], network, concurrency, "qtg-run", as_login)


def worker_cmd(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(BY_NAME)}.")],
    network: NetworkOption = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=256, help="External calls in flight at once.")
    ] = 8,
    as_login: AsOption = None,
) -> None:
    """Run one worker alone in this process (one process per worker), as a runner
    login (see `qtg run --help`)."""
    if name not in BY_NAME:
        raise typer.BadParameter(f"unknown worker {name!r} (workers: {', '.join(BY_NAME)})")
    start([BY_NAME[name]], network, concurrency, f"qtg-{name}", as_login)
