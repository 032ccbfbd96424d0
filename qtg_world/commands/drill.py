"""`qtg drill ...`: drills that move real money-like tokens on real chains through
the whole engine, over the logins a deployment uses.

`qtg drill evm-transfer` moves USDC between two treasury accounts with one
evm_transfer node. As the admin (QTG_DATABASE_URL, else the embedded server's
superuser) it migrates, registers the executors this build ships, makes sure a
chain is there (the local chains of `qtg chains up`, started when none run, or
any chain of the registry named by --chain whose RPC URL is in the environment)
and makes the logins alice, bob (operators) and runner1 (a runner) when missing.
Then alice creates the movement, bob approves it, and the workers run in this
process as runner1 until the node finishes. It prints the transaction hash, its
block and confirmations, the node's path through its states (from its audit
rows) and both accounts' balances before and after. Exit 0 when the node is
COMPLETED, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Annotated, Any

import psycopg
import typer
from psycopg import AsyncConnection
from psycopg.conninfo import make_conninfo
from rich.console import Console

from qtg_runner.chains.errors import ChainError
from qtg_runner.chains.evm_rpc import redact_url
from qtg_runner.commands.common import (
    ENVIRONMENT,
    CommandError,
    NetworkOption,
    cli_errors,
    finite,
    resolve_network,
)
from qtg_runner.config import NetworkMode, load_settings
from qtg_runner.db import procs
from qtg_runner.db.embedded import database_url
from qtg_runner.db.migrate import migrate
from qtg_runner.db.pool import bound_conninfo
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.executors.registry import register_shipped
from qtg_runner.log import configure
from qtg_runner.loop import WorkerEntry
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.wakeup import Wakeup
from qtg_runner.workers import BY_NAME
from qtg_world.chains.local import (
    DEFAULT_CHAINS,
    ChainSpec,
    RunningChain,
    chains_dir,
    is_running,
    load_artifact,
    read_state,
    rpc,
    runner_env,
)
from qtg_world.chains.registry import prepare_treasury, record_chains
from qtg_world.chains.start import start_chains
from qtg_world.commands.demo import require_workers, run_world_movements
from qtg_world.commands.demo_logins import DemoLogins, demo_logins
from qtg_world.commands.demo_world import drill_movements

app = typer.Typer(
    help=(
        "Drills: real movements through the whole engine, over the logins a deployment "
        "uses (alice creates, bob approves, the workers run as runner1). They run "
        "workers, so they need QTG_WORKERS_ENABLED=true."
    ),
    no_args_is_help=True,
)
out = Console(highlight=False)

LANE = "evm"
"""The lane of the drill's node; given a pacing row (its chain's block time
times the finality depth) when the network has none."""

FINISHED = ("COMPLETED", "FAILED", "UNKNOWN", "SKIPPED")


@dataclass(frozen=True)
class DrillChain:
    key: str
    rpc_url: str
    token: str
    decimals: int
    finality_depth: int
    block_time_s: float
    treasury: list[str]


def drill_entries() -> list[WorkerEntry]:
    """The core workers, ticking fast: one node, watched closely."""
    return [
        replace(BY_NAME["node_dispatcher"], interval=0.5, jitter=0.1),
        replace(BY_NAME["node_observer"], interval=0.25, jitter=0.05),
        replace(BY_NAME["node_recovery"], interval=1.0, jitter=0.2),
    ]


def _local_chains(port_base: int, network: NetworkMode) -> list[RunningChain]:
    """The local chains of this data directory: those that run, else started
    like `qtg chains up` (treasury keys made and funded); the runner's
    environment for them (RPC URLs, keystore) set in this process."""
    state_dir = chains_dir(load_settings().data_dir)
    running = [c for c in read_state(state_dir) if is_running(c)]
    if running:
        chains = running
        out.print(f"local chains running: {', '.join(c.key for c in chains)}")
    else:
        specs = [
            ChainSpec(key=s.key, chain_id=s.chain_id, port=port_base + i, block_time=s.block_time)
            for i, s in enumerate(DEFAULT_CHAINS)
        ]
        chains = start_chains(state_dir, specs)
        out.print(
            "local chains started: "
            + ", ".join(f"{c.key} ({c.rpc_url}, {c.block_time}s blocks)" for c in chains)
            + "; `qtg chains down` stops them"
        )
    treasury = prepare_treasury(state_dir, chains)
    record_chains(database_url(load_settings()), network, chains, treasury)
    os.environ.update(runner_env(state_dir))
    return chains


def _registry_chain(admin_dsn: str, network: NetworkMode, key: str) -> DrillChain:
    """The chain ``key`` as the network's registry describes it, reached at the
    RPC URL the variable it names holds in this environment."""
    conninfo = make_conninfo(admin_dsn, options=f"-c search_path={network},qtg")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        chain = next((c for c in procs.evm_chains().all(conn) if c.chain_key == key), None)
        if chain is None:
            raise CommandError(
                f"chain {key} is not in the chain registry of {network}: register it "
                "(upsert_chain, as the admin) or leave --chain out to use the local chains"
            )
        token = conn.execute(
            "SELECT address, decimals FROM chain_tokens WHERE chain_key = %s AND symbol = 'USDC'",
            (key,),
        ).fetchone()
        accounts = [
            str(r[0])
            for r in conn.execute(
                "SELECT address FROM treasury_accounts WHERE chain_key = %s ORDER BY address",
                (key,),
            ).fetchall()
        ]
    if token is None:
        raise CommandError(
            f"chain {key} has no USDC token in the chain registry of {network}: "
            "register it (upsert_chain_token, as the admin)"
        )
    rpc_url = os.environ.get(chain.rpc_url_env, "").strip()
    if not rpc_url:
        raise CommandError(
            f"{chain.rpc_url_env} is not set: the registry reads chain {key}'s RPC URL "
            "from it; export it and run the drill again",
            ENVIRONMENT,
        )
    return DrillChain(
        key,
        rpc_url,
        str(token[0]),
        int(token[1]),
        int(chain.finality_depth),
        chain.block_time_ms / 1000,
        accounts,
    )


def usdc_balance(chain: DrillChain, address: str) -> int:
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(chain.token), abi=load_artifact("MockUSDC")["abi"]
    )
    return int(usdc.functions.balanceOf(Web3.to_checksum_address(address)).call())


def _units(value: int, decimals: int) -> str:
    return f"{Decimal(value).scaleb(-decimals):,.{decimals}f}"


async def _node_row(conn: AsyncConnection[Any], node_id: int) -> tuple[str, Any, str | None]:
    row = await (
        await conn.execute(
            "SELECT node_state::text, evidence, last_error FROM movement_request_nodes"
            " WHERE id = %s",
            (node_id,),
        )
    ).fetchone()
    assert row is not None
    return str(row[0]), row[1], row[2]


async def run_drill(
    admin_dsn: str,
    people: DemoLogins,
    network: NetworkMode,
    chain: DrillChain,
    sender: str,
    recipient: str,
    amount: Decimal,
    timeout: float,
) -> int:
    admin = bound_conninfo(admin_dsn, network, "qtg-drill-admin")
    async with await AsyncConnection.connect(admin, autocommit=True) as conn:
        lanes = await (
            await conn.execute("SELECT 1 FROM lane_baselines WHERE lane = %s", (LANE,))
        ).fetchall()
        if not lanes:
            # a deploy step, as the demo's lanes: the time a transfer takes to be final
            baseline = max(2.0, chain.block_time_s * (chain.finality_depth + 1))
            await procs.upsert_lane_baseline(LANE, baseline, min_poll_seconds=0.5).aone(conn)

    before = usdc_balance(chain, sender), usdc_balance(chain, recipient)
    plan = {
        "nodes": [
            {
                "key": "transfer",
                "executor": EvmTransferExecutor.key,
                "config": {"lane": LANE, "chain": chain.key, "from": sender, "to": recipient},
                "depends_on": [],
            }
        ]
    }
    creator = bound_conninfo(people.creator.dsn, network, "qtg-drill-creator")
    approver = bound_conninfo(people.approver.dsn, network, "qtg-drill-approver")
    async with (
        await AsyncConnection.connect(creator, autocommit=True) as alice,
        await AsyncConnection.connect(approver, autocommit=True) as bob,
    ):
        created = await procs.create_movement(
            f"drill-evm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}", amount, plan=plan
        ).aone(alice)
        await procs.approve_movement(created.movement_id).aone(bob)
    movement_id = created.movement_id
    out.print(
        f"movement {movement_id}: {amount} USDC on {chain.key} from {sender} to {recipient}, "
        f"created by {people.creator.name}, approved by {people.approver.name}; the workers "
        f"run as {people.runner.name}"
    )

    runtime = await Runtime.open(people.runner.dsn, network, name="qtg-drill", max_concurrency=4)
    ctx = runtime.context(4)
    supervisor = asyncio.create_task(
        supervise(ctx, drill_entries(), Wakeup(runtime.conninfo, network))
    )
    started = time.monotonic()
    async with await AsyncConnection.connect(admin, autocommit=True) as view:
        node_id: int | None = None
        state = "PENDING"
        while not supervisor.done() and time.monotonic() - started < timeout:
            if node_id is None:
                row = await (
                    await view.execute(
                        "SELECT id FROM movement_request_nodes WHERE request_id = %s",
                        (movement_id,),
                    )
                ).fetchone()
                node_id = None if row is None else int(row[0])
            if node_id is not None:
                state, _, _ = await _node_row(view, node_id)
                if state in FINISHED:
                    break
            await asyncio.sleep(0.25)
        ctx.stopping.set()
        code = await supervisor
        await runtime.close()
        if node_id is None:
            out.print(f"[red]movement {movement_id} never started its node[/red]")
            return 1
        state, evidence, last_error = await _node_row(view, node_id)
        path = await (
            await view.execute(
                "SELECT occurred_at, from_state, to_state, action FROM audit_outbox"
                " WHERE entity = 'node' AND entity_id = %s AND to_state IS NOT NULL"
                " ORDER BY id",
                (str(node_id),),
            )
        ).fetchall()
    after = usdc_balance(chain, sender), usdc_balance(chain, recipient)

    evidence = evidence or {}
    out.print(f"node {node_id}: {state} after {time.monotonic() - started:.1f}s")
    if evidence.get("tx_hash"):
        out.print(f"transaction {evidence['tx_hash']}")
    if evidence.get("block_number") is not None:
        out.print(
            f"block {evidence['block_number']}, {evidence.get('confirmations')} confirmations "
            f"(final at {chain.finality_depth})"
        )
    if last_error:
        out.print(f"last error: {last_error}")
    out.print("path:")
    first = path[0][0] if path else None
    for occurred_at, from_state, to_state, action in path:
        offset = (occurred_at - first).total_seconds() if first is not None else 0.0
        out.print(
            f"  {occurred_at.isoformat(timespec='milliseconds')} (+{offset:6.2f}s) "
            f"{from_state or '-'} -> {to_state} ({action})"
        )
    d = chain.decimals
    for label, address, b, a in (
        ("from", sender, before[0], after[0]),
        ("to", recipient, before[1], after[1]),
    ):
        out.print(f"{label} {address}: {_units(b, d)} -> {_units(a, d)} USDC ({_units(a - b, d)})")
    if code != 0:
        out.print(f"[red]a core worker crashed (exit {code})[/red]")
        return 1
    if state != "COMPLETED":
        out.print(f"[red]the transfer did not complete: {state}[/red]")
        return 1
    out.print("[green]COMPLETED[/green]")
    return 0


@app.command("evm-transfer")
def evm_transfer_cmd(
    chain: Annotated[
        str | None,
        typer.Option(
            help="A chain of the registry, its RPC URL in the variable the registry names. "
            "Left out: the local chains (`qtg chains up`'s, started when none run), local-a."
        ),
    ] = None,
    amount: Annotated[str, typer.Option(help="USDC to move.")] = "1.25",
    sender: Annotated[
        str | None,
        typer.Option("--from", help="A treasury account of the chain (default: the first)."),
    ] = None,
    recipient: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="A treasury account or an allow-listed address (default: the second "
            "treasury account).",
        ),
    ] = None,
    port_base: Annotated[
        int,
        typer.Option(
            help="Where local chains are started (when none run): the first chain's port.",
            min=1024,
            max=65000,
        ),
    ] = DEFAULT_CHAINS[0].port,
    timeout: Annotated[
        float, typer.Option(min=5, max=3600, help="Give up after this many seconds.")
    ] = 120.0,
    network: NetworkOption = None,
) -> None:
    """Move USDC between two treasury accounts with one evm_transfer node, through
    the whole engine, and show what happened on chain.

    As the admin (QTG_DATABASE_URL, else the embedded server's superuser): migrates,
    registers the executors, starts the local chains when none run (as `qtg chains
    up`: deployed, funded, recorded in the registry) unless --chain names another
    chain of the registry, and makes the logins alice, bob (operators) and runner1
    (a runner) when missing. alice creates the movement, bob approves it, the
    workers run in this process as runner1 until the node finishes. Prints the
    transaction hash, its block and confirmations, the node's path through its
    states with times, and the balances before and after. Exit 0 when the node is
    COMPLETED, 1 otherwise. Needs QTG_WORKERS_ENABLED=true, like every drill.
    """
    finite(timeout, "--timeout", 5, 3600)
    with cli_errors():
        try:
            value = Decimal(amount)
        except ArithmeticError:
            raise CommandError(f"--amount {amount!r} is not a number") from None
        if not value.is_finite() or value <= 0:
            raise CommandError(f"--amount must be a positive number, not {amount!r}")
    settings = require_workers("the drill", "qtg drill evm-transfer")
    configure(logging.WARNING)
    net = resolve_network(network)
    with cli_errors():
        dsn = database_url(settings)
        migrate(dsn)
        register_shipped(dsn, net)
        try:
            if chain is None or chain in {s.key for s in DEFAULT_CHAINS}:
                _local_chains(port_base, net)
                key = chain or DEFAULT_CHAINS[0].key
            else:
                key = chain
        except ChainError as exc:
            raise CommandError(str(exc), ENVIRONMENT) from None
        target = _registry_chain(dsn, net, key)
        try:
            rpc(target.rpc_url, "eth_chainId")
        except ChainError:
            # the URL may carry a provider's key: never printed
            raise CommandError(
                f"chain {key} does not answer at the RPC URL {redact_url(target.rpc_url)}",
                ENVIRONMENT,
            ) from None
        if len(target.treasury) < 2 and (sender is None or recipient is None):
            raise CommandError(
                f"chain {key} has {len(target.treasury)} treasury accounts in the registry: "
                "name --from and --to"
            )
        src = (sender or target.treasury[0]).lower()
        dst = (recipient or target.treasury[1]).lower()
        passfile = settings.credentials_file
        people = demo_logins(dsn, net, passfile)
    out.print(
        f"database migrated, executors registered; network {net}; chain {key}; logins "
        f"{people.creator.name}, {people.approver.name} (operators) and {people.runner.name} "
        f"(runner), their passwords in {passfile}"
    )
    with cli_errors():
        code = asyncio.run(run_drill(dsn, people, net, target, src, dst, value, timeout))
    raise typer.Exit(code)


def _world_drill(path: str, about: str) -> None:
    """`qtg drill <path>`: one movement of that path on the local outside world."""

    def command(
        scale: Annotated[
            float,
            typer.Option(
                min=1,
                max=10000,
                help="The time scale a world started here runs at (a running world keeps its own).",
            ),
        ] = 60.0,
        port_base: Annotated[
            int,
            typer.Option(
                help="Where a world started here listens: the first chain's port, then the "
                "next chain, the attestation service and the exchange.",
                min=1024,
                max=65000,
            ),
        ] = DEFAULT_CHAINS[0].port,
        timeout: Annotated[
            float, typer.Option(min=5, max=3600, help="Give up after this many seconds.")
        ] = 180.0,
        network: NetworkOption = None,
    ) -> None:
        finite(scale, "--scale", 1, 10000)
        finite(timeout, "--timeout", 5, 3600)
        settings = require_workers("the drill", f"qtg drill {path}")
        configure(logging.WARNING)
        net = resolve_network(network)
        with cli_errors():
            dsn = database_url(settings)
            migrate(dsn)
            register_shipped(dsn, net)
            people = demo_logins(dsn, net, settings.credentials_file)
        out.print(
            f"database migrated, executors registered; network {net}; logins "
            f"{people.creator.name}, {people.approver.name} (operators) and "
            f"{people.runner.name} (runner)"
        )
        code = run_world_movements(
            dsn, people, net, lambda view: drill_movements(view)[path], scale, port_base, timeout
        )
        raise typer.Exit(code)

    command.__doc__ = (
        f"{about}\n\nOn the local outside world (`qtg world up`'s, started when it does "
        "not run), over the logins a deployment uses: alice creates, bob approves, the "
        "workers run in this process as runner1. Prints each node's path and "
        "transaction hashes and checks the balances on every chain. Exit 0 when it ends "
        "as it should. Needs QTG_WORKERS_ENABLED=true, like every drill."
    )
    app.command(path)(command)


_world_drill(
    "cctp",
    "A CCTP v2 fast transfer between the local chains: burn, Iris's attestation, mint.",
)
_world_drill(
    "stargate",
    "A Stargate v2 taxi between the local chains: send, relayed, OFTReceived on the other.",
)
_world_drill(
    "ccip",
    "A CCIP token transfer between the local chains: ccipSend, executed on the OffRamp.",
)
_world_drill(
    "bybit",
    "A withdrawal from the local exchange (a Bybit v5 double) to a treasury account.",
)
