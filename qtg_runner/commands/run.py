"""`qtg run` and `qtg worker`: the runner processes."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from qtg_runner.commands.common import AsOption, NetworkOption, resolve_network
from qtg_runner.config import NetworkMode, load_settings
from qtg_runner.db.embedded import database_url
from qtg_runner.db.pool import login_dsn
from qtg_runner.log import configure, event
from qtg_runner.loop import WorkerContext, WorkerEntry
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.wakeup import Wakeup
from qtg_runner.workers import BY_NAME, REGISTRY


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
    return await run_networks([(network, dsn)], entries, max_concurrency, name)


async def run_networks(
    targets: Sequence[tuple[NetworkMode, str]],
    entries: Sequence[WorkerEntry],
    max_concurrency: int,
    name: str,
) -> int:
    """Every worker once per (network, runner login DSN): each network its own
    runtime (pools bound to it, its login, its instance id and heartbeat rows),
    all in one process. A core worker's crash in any network stops them all
    (exit 1); SIGTERM/SIGINT stop them all cleanly (0)."""
    runtimes: list[Runtime] = []
    try:
        for network, dsn in targets:
            runtimes.append(
                await Runtime.open(dsn, network, name=name, max_concurrency=max_concurrency)
            )
        contexts = [runtime.context(max_concurrency) for runtime in runtimes]
        if len(contexts) == 1:
            runtime = runtimes[0]
            return await supervise(contexts[0], entries, Wakeup(runtime.conninfo, runtime.network))
        loop = asyncio.get_running_loop()

        def stop_all() -> None:
            for ctx in contexts:
                ctx.stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_all)

        async def one(runtime: Runtime, ctx: WorkerContext) -> int:
            wakeup = Wakeup(runtime.conninfo, runtime.network)
            code = await supervise(ctx, entries, wakeup, install_signal_handlers=False)
            if code != 0:
                stop_all()  # fail fast: one network's core crash stops the process
            return code

        try:
            codes = await asyncio.gather(
                *(one(r, c) for r, c in zip(runtimes, contexts, strict=True))
            )
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return max(codes)
    finally:
        for runtime in runtimes:
            await runtime.close()


def start(
    entries: Sequence[WorkerEntry],
    network: str | Sequence[str] | None,
    max_concurrency: int,
    name: str,
    as_login: str | Sequence[str] | None = None,
    idle_if_disabled: bool = False,
) -> None:
    configure()
    settings = load_settings()
    networks = resolve_networks(network)
    logins = _logins_for(networks, as_login)
    if not settings.workers_enabled:
        if not idle_if_disabled:
            typer.echo(
                "qtg: error: the workers' gate is off (QTG_WORKERS_ENABLED, or MG_WORKERS_ENABLED, "
                "is not true): this runner would start no worker and move nothing. Set "
                "QTG_WORKERS_ENABLED=true to run the workers, or pass --idle-if-disabled to wait "
                "as a standby that starts nothing.",
                err=True,
            )
            raise typer.Exit(2)
        typer.echo(
            "the workers' gate is off (QTG_WORKERS_ENABLED is not true): no worker started, as "
            "--idle-if-disabled asks. Movements can be created and approved and stay APPROVED."
            " Waiting for SIGTERM/SIGINT.",
            err=True,
        )
        raise typer.Exit(asyncio.run(_gate_closed()))
    targets = [
        (net, login_dsn(database_url(settings), login, settings))
        for net, login in zip(networks, logins, strict=True)
    ]
    for net in networks:
        event(
            logging.INFO, "runner_starting", network=net, workers=",".join(e.name for e in entries)
        )
    raise typer.Exit(asyncio.run(run_networks(targets, entries, max_concurrency, name)))


def resolve_networks(network: str | Sequence[str] | None) -> list[NetworkMode]:
    """The networks a runner serves: each --network given (no repeats), else the
    process's network."""
    if network is None or isinstance(network, str):
        return [resolve_network(network)]
    if not network:
        return [resolve_network(None)]
    networks = [resolve_network(n) for n in network]
    if len(set(networks)) != len(networks):
        raise typer.BadParameter("a network is named twice", param_hint="--network")
    return networks


def _logins_for(
    networks: Sequence[NetworkMode], as_login: str | Sequence[str] | None
) -> list[str | None]:
    """The login of each network: one --as for all, or one --as per --network in
    the same order; none: whoever QTG_DATABASE_URL names, for every network."""
    if as_login is None or isinstance(as_login, str):
        return [as_login] * len(networks)
    given: list[str | None] = list(as_login)
    if not given:
        return [None] * len(networks)
    if len(given) == 1:
        return given * len(networks)
    if len(given) != len(networks):
        raise typer.BadParameter(
            f"give one --as for every network, or one --as per --network in the same order "
            f"({len(networks)} networks, {len(given)} logins)",
            param_hint="--as",
        )
    return given


NetworksOption = Annotated[
    list[str] | None,
    typer.Option(
        "--network",
        "-n",
        help="mainnet or testnet (default: QTG_NETWORK_MODE, else testnet). Repeat it to "
        "serve several networks from one process: every worker runs once per network, "
        "each with its own connections, login and heartbeat rows.",
    ),
]

IdleOption = Annotated[
    bool,
    typer.Option(
        "--idle-if-disabled",
        help="With the workers' gate off (QTG_WORKERS_ENABLED not true), wait for "
        "SIGTERM/SIGINT and start nothing instead of exiting 2: a standby that is meant "
        "to idle. Without it a runner whose gate is off refuses to start.",
    ),
]

AsLoginsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--as",
        help="Log in as this runner login (its password from the credentials file); "
        "repeat it once per --network, in the same order, to use a login per network. "
        "Default: whoever QTG_DATABASE_URL names.",
    ),
]


def _concurrency(per: str) -> Any:
    """The --concurrency option: external calls in flight at once ``per`` what."""
    return typer.Option(
        min=1,
        max=256,
        help=f"External calls in flight at once {per}"
        " (node_dispatcher runs two batches at once, in two loops; node_observer"
        " claims and reports this many nodes, at most 32, in one transaction).",
    )


WorkersConcurrencyOption = Annotated[int, _concurrency("per worker batch")]
ConcurrencyOption = Annotated[int, _concurrency("per batch")]


def run_cmd(
    network: NetworksOption = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Run only this worker (repeatable). Default: every worker."),
    ] = None,
    concurrency: WorkersConcurrencyOption = 8,
    as_login: AsLoginsOption = None,
    idle_if_disabled: IdleOption = False,
) -> None:
    """Run the supervisor: every worker (or --only some) for one network, or for
    each --network given.

    Runs as a runner login and nothing else: QTG_DATABASE_URL is that login's
    DSN (`qtg db url --login NAME` prints it; the password stays in the
    credentials file), or --as NAME picks it. The admin's DSN, or any login
    that is not a member of qtg_<network>_runner, is refused, as is a build
    whose executors are not registered (the admin's `qtg executors register`).

    Core workers (node_dispatcher, node_observer, node_recovery) fail fast: a
    crash stops the process with exit code 1 (every network's workers). Sidecars
    (the rest) are isolated: a crash is logged and the rest keep running.
    SIGTERM/SIGINT stop cleanly with exit code 0. Nothing starts unless
    QTG_WORKERS_ENABLED=true (or the seed's MG_WORKERS_ENABLED=true); with the
    gate off it exits 2, unless --idle-if-disabled asks it to wait.
    """
    names = only or [entry.name for entry in REGISTRY]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise typer.BadParameter(
            f"unknown worker {', '.join(unknown)} (workers: {', '.join(BY_NAME)})",
            param_hint="--only",
        )
    start([BY_NAME[n] for n in names], network, concurrency, "qtg-run", as_login, idle_if_disabled)


def worker_cmd(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(BY_NAME)}.")],
    network: NetworkOption = None,
    concurrency: ConcurrencyOption = 8,
    as_login: AsOption = None,
    idle_if_disabled: IdleOption = False,
) -> None:
    """Run one worker alone in this process (one process per worker), as a runner
    login (see `qtg run --help`)."""
    if name not in BY_NAME:
        raise typer.BadParameter(f"unknown worker {name!r} (workers: {', '.join(BY_NAME)})")
    start([BY_NAME[name]], network, concurrency, f"qtg-{name}", as_login, idle_if_disabled)
