"""`qtg demo`: the whole system on the embedded default, in about a minute.

As the admin it migrates the database, registers the executors this build
ships (the deploy step) and makes two operator logins (alice, bob) and a
runner login (runner1) when they are missing (on another network than testnet,
named alice_<network>, ...). Then, over those logins and no other, alice
creates a batch of realistic movements, bob approves them, and every worker
runs in this process as runner1; it ends with a summary checked against each
movement's expected end, the callbacks a local receiver got (one per movement
state change, each signature verified) and the audit chain verified
(qtg_world/commands/demo_sidecars.py). By default the movements are real transactions on the
local outside world (qtg_world/commands/demo_world.py); `--sim` runs the sim
executor's lanes, scaled down 60x, with a live progress view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import psycopg
import typer
from psycopg import AsyncConnection
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from qtg_runner.api.identity import Database, server_conninfo
from qtg_runner.commands.common import (
    ENVIRONMENT,
    USAGE,
    CommandError,
    NetworkOption,
    cli_errors,
    finite,
    resolve_network,
)
from qtg_runner.config import NetworkMode, Settings, load_settings
from qtg_runner.db import procs
from qtg_runner.db.embedded import database_url, reset_database
from qtg_runner.db.migrate import migrate
from qtg_runner.db.pool import bound_conninfo
from qtg_runner.executors.registry import register_shipped
from qtg_runner.executors.sim import lane_baselines
from qtg_runner.log import configure
from qtg_runner.loop import WorkerEntry
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.wakeup import Wakeup
from qtg_runner.workers import BY_NAME
from qtg_world.callback_receiver import CallbackReceiver
from qtg_world.chains.local import DEFAULT_CHAINS, AnvilNotFound, find_anvil, rpc
from qtg_world.chains.registry import LOCAL_FINALITY_DEPTH
from qtg_world.commands.chains import chain_errors
from qtg_world.commands.demo_logins import DemoLogins, demo_logins
from qtg_world.commands.demo_sidecars import (
    callback_summary,
    check_callbacks,
    finish_audit,
    start_receiver,
)
from qtg_world.commands.demo_world import (
    DEMO_CONCURRENCY,
    WorldMovement,
    WorldView,
    run_world_demo,
    scaled_lanes,
    world_movements,
)
from qtg_world.commands.world import bring_up_world

out = Console()


def require_workers(what: str, how: str) -> Settings:
    """The settings, once the workers' gate is on: ``what`` (the demo, a drill)
    runs workers and refuses to start without it (exit 2), saying ``how`` to
    run it."""
    settings = load_settings()
    if not settings.workers_enabled:
        raise CommandError(
            f"the workers' gate is off (QTG_WORKERS_ENABLED, or the seed's "
            f"MG_WORKERS_ENABLED, is not true): {what} runs workers and refuses to start. "
            f"Run it with QTG_WORKERS_ENABLED=true {how}."
        )
    return settings


@dataclass(frozen=True)
class DemoMovement:
    name: str
    amount: str
    nodes: list[dict[str, Any]]
    expected: str


def _sim(
    key: str, lane: str, depends_on: tuple[str, ...] = (), scale: float = 60.0, **extra: Any
) -> dict[str, Any]:
    return {
        "key": key,
        "executor": "sim",
        "depends_on": list(depends_on),
        "config": {"lane": lane, "time_scale": scale, **extra},
    }


def demo_movements(scale: float) -> list[DemoMovement]:
    return [
        DemoMovement(
            "CCTP fast burn -> mint -> Bybit deposit",
            "250000",
            [
                _sim("burn", "cctp_fast", scale=scale),
                _sim("mint", "cctp_fast", ("burn",), scale=scale),
                _sim("deposit", "bybit_deposit", ("mint",), scale=scale),
            ],
            "COMPLETED",
        ),
        DemoMovement(
            "CCTP standard Ethereum -> Base",
            "1000000",
            [
                _sim("burn", "cctp_standard", scale=scale),
                _sim("mint", "cctp_fast", ("burn",), scale=scale),
            ],
            "COMPLETED",
        ),
        DemoMovement(
            "CCIP transfer Arbitrum -> Ethereum",
            "500000",
            [
                _sim("ccip_send", "ccip", scale=scale),
            ],
            "COMPLETED",
        ),
        DemoMovement(
            "Stargate bus ride, then Bybit withdrawal",
            "75000",
            [
                _sim("bus", "stargate_bus", scale=scale),
                _sim("withdraw", "bybit_withdrawal", ("bus",), scale=scale),
            ],
            "COMPLETED",
        ),
        DemoMovement(
            "Fan-out: one withdrawal split over taxi and CCTP",
            "300000",
            [
                _sim("withdraw", "bybit_withdrawal", scale=scale),
                _sim("taxi", "stargate_taxi", ("withdraw",), scale=scale),
                _sim("cctp", "cctp_fast", ("withdraw",), scale=scale),
                _sim("settle", "bybit_deposit", ("taxi", "cctp"), scale=scale),
            ],
            "COMPLETED",
        ),
        DemoMovement(
            "Failing lane: the bridge rejects the transfer",
            "40000",
            [
                _sim("bridge", "stargate_taxi", scale=scale, fail_p=1.0),
                _sim("deposit", "bybit_deposit", ("bridge",), scale=scale),
            ],
            "FAILED",
        ),
        DemoMovement(
            "Lost receipt: UNKNOWN, then recovered from evidence",
            "125000",
            [
                _sim("burn", "cctp_fast", scale=scale, unknown_p=1.0),
                _sim("mint", "cctp_fast", ("burn",), scale=scale),
            ],
            "COMPLETED",
        ),
    ]


def demo_entries(speed: float) -> list[WorkerEntry]:
    """The registry's workers, ticking faster for a scaled-down demo."""
    return [
        replace(BY_NAME["node_dispatcher"], interval=0.5, jitter=0.1),
        replace(BY_NAME["node_observer"], interval=0.25, jitter=0.05),
        replace(BY_NAME["node_recovery"], interval=1.0, jitter=0.2),
        replace(BY_NAME["expiration_checker"], interval=2.0, jitter=0.5),
        replace(BY_NAME["template_proposal_expiration"], interval=2.0, jitter=0.5),
        replace(BY_NAME["callback_dispatcher"], interval=0.5, jitter=0.1),
        replace(BY_NAME["audit_outbox_promoter"], interval=1.0, jitter=0.2),
    ]


async def _progress(conn: AsyncConnection[Any], ids: dict[int, DemoMovement]) -> tuple[Table, bool]:
    rows = await (
        await conn.execute(
            "SELECT movement_id, request_state::text, nodes_total, nodes_completed, nodes_failed,"
            " nodes_skipped, nodes_in_flight, age FROM movement_progress"
            " WHERE movement_id = ANY(%s)"
            " ORDER BY movement_id",
            (list(ids),),
        )
    ).fetchall()
    flights = await (
        await conn.execute(
            "SELECT movement_id, string_agg(node_key || ' ' || node_state::text"
            " || coalesce(' (' || observe_phase::text || ')', ''), ', ' ORDER BY node_id)"
            " FROM in_flight_nodes WHERE movement_id = ANY(%s) GROUP BY movement_id",
            (list(ids),),
        )
    ).fetchall()
    in_flight = dict(flights)
    table = Table(title="demo movements", title_justify="left")
    for col in ("id", "movement", "state", "nodes done", "in flight", "expected", "age"):
        table.add_column(col)
    done = True
    for movement_id, state, total, completed, failed, skipped, _, age in rows:
        terminal = state in ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED")
        done = done and terminal
        expected = ids[movement_id].expected
        style = "" if not terminal else ("green" if state == expected else "red")
        table.add_row(
            str(movement_id),
            ids[movement_id].name,
            f"[{style}]{state}[/{style}]" if style else state,
            f"{completed + failed + skipped}/{total}",
            in_flight.get(movement_id, ""),
            expected,
            str(age).split(".")[0],
        )
    return table, done


async def run_demo(
    admin_dsn: str,
    people: DemoLogins,
    network: NetworkMode,
    scale: float,
    timeout: float,
    data_dir: Path,
) -> int:
    # lane pacing and the callback target are configuration: set here by the
    # admin, as deploy steps
    admin = bound_conninfo(admin_dsn, network, "qtg-demo-admin")
    async with await AsyncConnection.connect(admin, autocommit=True) as conn:
        for lane, params in lane_baselines(scale).items():
            await procs.upsert_lane_baseline(
                lane, params["baseline_seconds"], params["min_poll_seconds"]
            ).aone(conn)
        receiver = await start_receiver(conn, data_dir)
    try:
        return await _run_sim_demo(admin, people, network, scale, timeout, receiver)
    finally:
        receiver.stop()


async def _run_sim_demo(
    admin: str,
    people: DemoLogins,
    network: NetworkMode,
    scale: float,
    timeout: float,
    receiver: CallbackReceiver,
) -> int:
    runtime = await Runtime.open(
        people.runner.dsn, network, name="qtg-demo", max_concurrency=DEMO_CONCURRENCY
    )
    ctx = runtime.context(DEMO_CONCURRENCY)
    run_tag = time.strftime("%Y%m%d-%H%M%S")
    ids: dict[int, DemoMovement] = {}
    creator = bound_conninfo(people.creator.dsn, network, "qtg-demo-creator")
    approver = bound_conninfo(people.approver.dsn, network, "qtg-demo-approver")
    async with (
        await AsyncConnection.connect(creator, autocommit=True) as alice,
        await AsyncConnection.connect(approver, autocommit=True) as bob,
    ):
        for i, movement in enumerate(demo_movements(scale)):
            created = await procs.create_movement(
                f"demo-{run_tag}-{i}",
                Decimal(movement.amount),
                plan={"nodes": movement.nodes},
                callback_url=receiver.url,
            ).aone(alice)
            ids[created.movement_id] = movement
            await procs.approve_movement(created.movement_id).aone(bob)
    out.print(
        f"created and approved {len(ids)} movements on [bold]{network}[/bold] "
        f"(created by {people.creator.name}, approved by {people.approver.name}, each over "
        f"their own login); the workers run as the runner login {people.runner.name}; "
        f"lanes run {scale:g}x faster than real; callbacks to {receiver.url}",
        soft_wrap=True,
    )

    supervisor = asyncio.create_task(
        supervise(ctx, demo_entries(scale), Wakeup(runtime.conninfo, network))
    )
    started = time.monotonic()
    finished = False
    async with await AsyncConnection.connect(runtime.conninfo, autocommit=True) as view:
        with Live(console=out, refresh_per_second=4) as live:
            while not supervisor.done():
                table, finished = await _progress(view, ids)
                live.update(Group(table))
                if finished or time.monotonic() - started > timeout:
                    break
                await asyncio.sleep(0.25)
        callbacks = None
        if finished and not supervisor.done():
            async with await AsyncConnection.connect(admin, autocommit=True) as conn:
                callbacks = await check_callbacks(conn, receiver, network, list(ids))
        ctx.stopping.set()
        code = await supervisor
        async with await AsyncConnection.connect(creator, autocommit=True) as alice:
            audit = await finish_audit(ctx, alice)
        table, finished = await _progress(view, ids)
        rows = await (
            await view.execute(
                "SELECT movement_id, request_state::text FROM movement_progress"
                " WHERE movement_id = ANY(%s)",
                (list(ids),),
            )
        ).fetchall()
    await runtime.close()

    out.print(table)
    mismatched = [(mid, state) for mid, state in rows if state != ids[mid].expected]
    elapsed = time.monotonic() - started
    problems = []
    if callbacks is not None:
        out.print("callbacks received, per movement:")
        for line in callbacks.paths():
            out.print(line, highlight=False)
        out.print(callback_summary(callbacks, receiver.url), highlight=False, soft_wrap=True)
        problems.extend(callbacks.problems(receiver.url))
    out.print(audit.summary(), highlight=False)
    if not audit.chain.ok:
        problems.append(f"the audit chain breaks at row {audit.chain.first_bad_seq}")
    if code != 0:
        out.print(f"[red]a core worker crashed (exit {code})[/red]")
        return code
    if not finished or mismatched or problems:
        out.print(
            f"[red]demo did not end as expected after {elapsed:.0f}s: "
            f"{mismatched or problems or 'movements still running'}[/red]"
        )
        return 1
    out.print(f"[green]all {len(ids)} movements ended as expected in {elapsed:.0f}s[/green]")
    out.print(
        "inspect the rows with (as alice, an operator, who may read them):\n"
        f'  psql "$(qtg db url --login {people.creator.name})"'
        f" -c 'SET search_path = {network}, qtg' "
        "-c 'SELECT * FROM movement_progress ORDER BY movement_id DESC' "
        "-c 'SELECT * FROM movement_nodes ORDER BY node_id DESC LIMIT 20'"
    )
    return 0


def world_entries() -> list[WorkerEntry]:
    """Every worker of the registry, the core ones ticking fast: the demo
    watches a few movements closely."""
    fast = {
        "node_dispatcher": (0.5, 0.1),
        "node_observer": (0.25, 0.05),
        "node_recovery": (1.0, 0.2),
    }
    return [
        replace(entry, interval=fast[name][0], jitter=fast[name][1]) if name in fast else entry
        for name, entry in BY_NAME.items()
    ]


def demo_cmd(
    network: NetworkOption = None,
    sim: Annotated[
        bool,
        typer.Option(
            "--sim/--world",
            help="--world (the default): real transactions on the local outside world "
            "(`qtg world up`'s, started when it does not run). --sim: the sim executor's "
            "lanes only, no chain.",
        ),
    ] = False,
    scale: Annotated[
        float,
        typer.Option(
            min=1,
            max=10000,
            help="How many times faster than real: the sim's lanes, or the time scale a "
            "world started here runs at (a running world keeps its own).",
        ),
    ] = 60.0,
    timeout: Annotated[
        float, typer.Option(min=10, max=86400, help="Give up after this many seconds.")
    ] = 240.0,
    port_base: Annotated[
        int,
        typer.Option(
            "--port-base",
            min=1024,
            max=65000,
            help="Where a world started here listens: the first chain's port, then the "
            "next chain, the attestation service and the exchange (as `qtg world up`).",
        ),
    ] = DEFAULT_CHAINS[0].port,
    reset: Annotated[
        bool,
        typer.Option(
            "--reset",
            help="Start from an empty database: the embedded server's database is dropped "
            "and made again first (the logins and their passwords stay). Refused with "
            "QTG_DATABASE_URL.",
        ),
    ] = False,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="After the movements, keep the operator page and the API up on --port "
            "until Ctrl-C.",
        ),
    ] = False,
    port: Annotated[
        int,
        typer.Option(min=1, max=65535, help="The API's port with --serve (else a free one)."),
    ] = 8080,
) -> None:
    """Run a batch of realistic movements end to end, checked at the end.

    As the admin (QTG_DATABASE_URL, else the embedded server's superuser):
    migrates, registers the executors, sets the lanes and makes the logins
    alice, bob (operators) and runner1 (a runner) when missing, their passwords
    in the credentials file. Then alice creates, bob approves and the workers
    run as runner1, each over their own login. On the local outside world
    (the default) the movements are real transactions: their hashes are
    printed, and the balances on every chain are checked against what they
    moved. The database and the world are left running to explore; when the
    world was started afresh after this database used an earlier one (`qtg
    world down`, a reboot), the embedded server's database is started afresh
    with it. Needs QTG_WORKERS_ENABLED=true (`make run` sets it), like every
    drill.
    """
    finite(scale, "--scale", 1, 10000)
    finite(timeout, "--timeout", 10, 86400)
    settings = require_workers("the demo", "qtg demo (or make run)")
    configure(logging.WARNING)
    net = resolve_network(network)
    with cli_errors():
        if reset:
            reset_database(settings)
            out.print("the embedded server's database was dropped and made again (--reset)")
        dsn, people = prepare_database(settings, net)
    out.print(
        f"database migrated, executors registered; network {net}; logins "
        f"{people.creator.name}, {people.approver.name} (operators) and {people.runner.name} "
        f"(runner), their passwords in {settings.credentials_file}",
        highlight=False,
    )
    # the API's server (fastapi, uvicorn) is imported here, not by every `qtg`
    from qtg_runner.api.app import ApiConfig
    from qtg_runner.api.server import serve_in_thread

    config = ApiConfig(Database(server_conninfo(dsn), net), workers_enabled=True)
    with cli_errors():
        try:
            api = serve_in_thread(config, port=port if serve else 0)
        except RuntimeError as exc:
            raise CommandError(f"{exc}: is --port {port} taken? give another", USAGE) from exc
    out.print(
        f"HTTP API {api.url}/v1 (docs {api.url}/docs), operator page {api.url}/ : sign "
        f"in as {people.creator.name} or {people.approver.name}",
        highlight=False,
    )
    if not sim:
        try:
            find_anvil()
        except AnvilNotFound as exc:
            out.print(f"[yellow]{exc}: the demo runs the sim executor's lanes instead[/yellow]")
            sim = True
    if sim:
        with cli_errors():
            code = asyncio.run(run_demo(dsn, people, net, scale, timeout, settings.data_dir))
    else:
        code = run_world_movements(
            dsn,
            people,
            net,
            world_movements,
            scale,
            port_base,
            timeout,
            settings.data_dir,
            on_stale=None if settings.database_url else lambda: start_afresh(settings, net),
        )
    print_next_steps(people, api.url if serve else None)
    if serve:
        out.print(f"serving the operator page on {api.url}/ until Ctrl-C", highlight=False)
        with contextlib.suppress(KeyboardInterrupt):
            api.thread.join()
    raise typer.Exit(code)


def prepare_database(settings: Settings, network: NetworkMode) -> tuple[str, DemoLogins]:
    """As the admin: the database migrated, the shipped executors registered and
    the demo's logins made where missing; the admin's DSN and the logins."""
    dsn = database_url(settings)
    migrate(dsn)
    register_shipped(dsn, network)
    return dsn, demo_logins(dsn, network, settings.credentials_file)


def start_afresh(settings: Settings, network: NetworkMode) -> None:
    """The embedded server's database dropped, made and prepared again: a world
    started afresh cannot serve a database that used the one before."""
    reset_database(settings)
    prepare_database(settings, network)


def command_name() -> str:
    """How this shell reaches `qtg`: by name when it is on the PATH, else by the
    path it was run as (`.venv/bin/qtg` after `make run`)."""
    ran = Path(sys.argv[0])
    found = shutil.which("qtg")
    if found is not None and Path(found).resolve() == ran.resolve():
        return "qtg"
    try:
        return str(ran.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(ran.resolve())


def print_next_steps(people: DemoLogins, serving: str | None) -> None:
    """What the demo leaves and how to look at it, as the two operators."""
    qtg = command_name()
    alice, bob = people.creator.name, people.approver.name
    page = (
        f"open {serving}/ (up until Ctrl-C)"
        if serving
        else f"{qtg} api   (then open http://127.0.0.1:8080/; Ctrl-C stops it)"
    )
    rows = [
        (f"psql as {alice}", f"{qtg} db psql --login {alice}   then  SELECT * FROM movements;"),
        (f"psql as {bob}", f"{qtg} db psql --login {bob}"),
        ("the operator page", page),
        ("its passwords", f"{qtg} operator password {alice}  (and {bob}; nothing changes)"),
        ("the demo, page kept up", f"{qtg} demo --serve"),
        ("what to do next", 'README.md, "Five minutes as an operator"'),
    ]
    out.print(
        "\n[bold]Explore what the demo left[/bold] (the database and the local world keep "
        f"running; `{qtg} world down` and `{qtg} db stop` stop them, and the next run starts "
        "them again):",
        highlight=False,
    )
    for what, how in rows:
        out.print(f"  {what + ':':<24}{how}", highlight=False, soft_wrap=True)


def chains_behind(dsn: str, network: NetworkMode, view: WorldView) -> list[str]:
    """The treasury accounts whose chain restarted from genesis after this
    database used it: the engine's next nonce ahead of the chain's count, so
    every new transaction would wait behind a gap. One line each."""
    ahead = []
    with psycopg.connect(bound_conninfo(dsn, network, "qtg-demo-admin"), autocommit=True) as conn:
        for chain in view.chains.values():
            for address in view.treasury:
                engine = procs.evm_next_nonce(chain.key, address).one(conn)
                count = int(rpc(chain.rpc_url, "eth_getTransactionCount", [address, "pending"]), 16)
                if engine is not None and engine > count:
                    ahead.append(f"{address} on {chain.key}: engine {engine}, chain {count}")
    return ahead


def run_world_movements(
    dsn: str,
    people: DemoLogins,
    network: NetworkMode,
    pick: Callable[[WorldView], list[WorldMovement]],
    scale: float,
    port_base: int,
    timeout: float,
    receiver_data_dir: Path | None = None,
    on_stale: Callable[[], None] | None = None,
) -> int:
    """The local outside world brought up (left running), then the movements
    ``pick`` makes of it run through every worker and checked (run_world_demo):
    the demo's and each drill's; the demo's (``receiver_data_dir`` given) with its
    callbacks and the audit chain checked too. Chains started afresh after the
    database used earlier ones are refused (exit 1), unless ``on_stale`` starts
    the database afresh too; the world is then recorded in it again."""
    with chain_errors():
        up = bring_up_world(port_base, True, network, time_scale=scale)
    view = WorldView(
        {c.key: c for c in up.chains.chains},
        [a.address for a in up.chains.treasury],
        up.state.deposit_address,
    )
    with cli_errors():
        behind = chains_behind(dsn, network, view)
        if behind and on_stale is None:
            raise CommandError(
                "the local chains were started afresh after this database used the old ones ("
                + "; ".join(behind)
                + "): their nonces would never line up. Keep the world running between "
                "runs, or run on a fresh database (`qtg demo --reset` makes the embedded "
                "server's database afresh; for QTG_DATABASE_URL create a new one)",
                ENVIRONMENT,
            )
        if behind and on_stale is not None:
            out.print(
                "[yellow]The local chains were started afresh (`qtg world down`, or a "
                "reboot) after this database used the old ones: the transactions it "
                "recorded are on chains that no longer exist. The embedded server's "
                "database is started afresh with them (the movements of earlier runs go; "
                "the logins stay).[/yellow]"
            )
            on_stale()
            with chain_errors():
                up = bring_up_world(port_base, True, network, time_scale=scale)
    os.environ.update(up.env)
    chains = {c.key: c for c in up.chains.chains}
    out.print(
        f"local outside world: chains {', '.join(chains)}, services {up.state.iris_url} "
        f"(attestations), {up.state.bybit_url} (exchange), time scale "
        f"{up.state.time_scale:g}x; `qtg world down` stops it",
        highlight=False,
    )
    finality_s = max(c.block_time for c in chains.values()) * (LOCAL_FINALITY_DEPTH + 1)
    with cli_errors():
        return asyncio.run(
            run_world_demo(
                dsn,
                people,
                network,
                view,
                pick(view),
                world_entries(),
                scaled_lanes(up.state.time_scale, finality_s),
                timeout,
                up.chains.state_dir,
                receiver_data_dir,
            )
        )
