"""`qtg demo`: the whole system on the embedded default, in about a minute.

Migrates the database, registers the sim executor with lane presets scaled
down 60x, creates a batch of realistic movements (created by one operator,
approved by another), runs every worker in this process with a live progress
view, and ends with a summary checked against each movement's expected end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Annotated, Any

import typer
from psycopg import AsyncConnection
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from qtg_runner.commands.common import CommandError, finite
from qtg_runner.commands.run import NetworkOption, resolve_network
from qtg_runner.config import NetworkMode, load_settings
from qtg_runner.db import procs
from qtg_runner.db.embedded import database_url
from qtg_runner.db.migrate import migrate
from qtg_runner.db.pool import operator_conninfo
from qtg_runner.executors.sim import lane_baselines
from qtg_runner.log import configure
from qtg_runner.loop import WorkerEntry
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.wakeup import Wakeup
from qtg_runner.workers import BY_NAME

out = Console()


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


async def run_demo(dsn: str, network: NetworkMode, scale: float, timeout: float) -> int:
    runtime = await Runtime.open(dsn, network, name="qtg-demo", max_concurrency=16)
    ctx = runtime.context(16)
    run_tag = time.strftime("%Y%m%d-%H%M%S")
    ids: dict[int, DemoMovement] = {}
    # the lanes' pacing is a deploy step on the owner's (admin) connection; an
    # operator changes a lane only by a proposal that a second operator approves
    async with await AsyncConnection.connect(
        dsn, autocommit=True, options=f"-c search_path={network},qtg"
    ) as owner:
        for lane, params in lane_baselines(scale).items():
            await procs.upsert_lane_baseline(
                lane, params["baseline_seconds"], params["min_poll_seconds"]
            ).aone(owner)
    operator = operator_conninfo(dsn, network, "qtg-demo-operator")
    async with await AsyncConnection.connect(operator, autocommit=True) as conn:
        for i, movement in enumerate(demo_movements(scale)):
            created = await procs.create_movement(
                f"demo-{run_tag}-{i}",
                Decimal(movement.amount),
                plan={"nodes": movement.nodes},
            ).aone(conn)
            ids[created.movement_id] = movement
    # a second login approves: the creator cannot
    async with await AsyncConnection.connect(
        dsn, autocommit=True, options=f"-c search_path={network},qtg"
    ) as approver:
        for movement_id in ids:
            await procs.approve_movement(movement_id).aone(approver)
    out.print(
        f"created and approved {len(ids)} movements on [bold]{network}[/bold] "
        "(created by the operator login, approved by the admin login); "
        f"lanes run {scale:g}x faster than real"
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
        ctx.stopping.set()
        code = await supervisor
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
    if code != 0:
        out.print(f"[red]a core worker crashed (exit {code})[/red]")
        return code
    if not finished or mismatched:
        out.print(
            f"[red]demo did not end as expected after {elapsed:.0f}s: "
            f"{mismatched or 'movements still running'}[/red]"
        )
        return 1
    out.print(f"[green]all {len(ids)} movements ended as expected in {elapsed:.0f}s[/green]")
    out.print(
        "inspect the rows with:\n"
        f"  psql \"$(qtg db url)\" -c 'SET search_path = {network}, qtg' "
        "-c 'SELECT * FROM movement_progress ORDER BY movement_id DESC' "
        "-c 'SELECT * FROM movement_nodes ORDER BY node_id DESC LIMIT 20'"
    )
    return 0


def demo_cmd(
    network: NetworkOption = None,
    scale: Annotated[
        float, typer.Option(min=1, max=10000, help="How many times faster than real lanes.")
    ] = 60.0,
    timeout: Annotated[
        float, typer.Option(min=10, max=86400, help="Give up after this many seconds.")
    ] = 240.0,
) -> None:
    """Run a batch of realistic movements end to end with the sim executor.

    Needs MG_WORKERS_ENABLED=true (`make run` sets it), like every drill.
    """
    finite(scale, "--scale", 1, 10000)
    finite(timeout, "--timeout", 10, 86400)
    settings = load_settings()
    if not settings.workers_enabled:
        raise CommandError(
            "MG_WORKERS_ENABLED is false: the demo runs workers and refuses to start. "
            "Run it with MG_WORKERS_ENABLED=true qtg demo (or make run)."
        )
    configure(logging.WARNING)
    net = resolve_network(network)
    dsn = database_url(settings)
    migrate(dsn)
    out.print(f"database migrated; network {net}")
    raise typer.Exit(asyncio.run(run_demo(dsn, net, scale, timeout)))
