"""`qtg world up|down|status|env`: the local outside world in one command: the local
chains (as `qtg chains up` makes them) and one background process serving the
fake Iris and the fake Bybit over them (qtg_world/local.py)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import typer

from qtg_runner.commands.common import USAGE, CommandError, NetworkOption
from qtg_runner.config import load_settings
from qtg_runner.db.embedded import database_url
from qtg_world.bybit import ExchangeKeys, ensure_exchange_keys
from qtg_world.chains.local import (
    DEFAULT_CHAINS,
    head_block,
    is_running,
    mined_at_once,
    read_state,
    stop_chains,
)
from qtg_world.chains.registry import fund_treasury, record_venue
from qtg_world.commands.chains import (
    ChainsUp,
    bring_up,
    chain_errors,
    local_state_dir,
    print_env,
    print_up,
)
from qtg_world.local import (
    DEFAULT_FUND_BALANCE,
    DEFAULT_TIME_SCALE,
    WorldState,
    probe_bybit,
    probe_ccip,
    probe_iris,
    read_world,
    runner_env,
    serve_running,
    start_world,
    stop_world,
)

app = typer.Typer(
    help=(
        "The local outside world: the local chains (as `qtg chains up`) and one "
        "background process serving the fake Iris (CCTP attestations) and the fake "
        "Bybit (v5 asset API) on loopback, its state in chains/world/state.json, the "
        "engine's Bybit API key in chains/world/bybit-api-key.json (0600)."
    ),
    no_args_is_help=True,
)

SERVICE_PORTS = len(DEFAULT_CHAINS)
"""Iris and Bybit take the ports after the chains': base + 2 and base + 3."""


def _fund(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise CommandError(f"--fund is a USDC amount: {text!r}", USAGE) from None
    if not value.is_finite() or value < 0:
        raise CommandError(f"--fund is a finite amount, zero or more: {text!r}", USAGE)
    return value


@app.command("up")
def up_cmd(
    port_base: int = typer.Option(
        DEFAULT_CHAINS[0].port,
        "--port-base",
        help="The first chain's port; the next chain, the fake Iris and the fake Bybit "
        "take the next ports (default 8545: 8546, 8547, 8548).",
        min=1024,
        max=65000,
    ),
    iris_port: int | None = typer.Option(
        None, "--iris-port", help="The fake Iris's port instead (0: a free one).", min=0, max=65535
    ),
    bybit_port: int | None = typer.Option(
        None,
        "--bybit-port",
        help="The fake Bybit's port instead (0: a free one).",
        min=0,
        max=65535,
    ),
    ccip_port: int = typer.Option(
        0,
        "--ccip-port",
        help="The CCIP executing network's status and control port (0: a free one).",
        min=0,
        max=65535,
    ),
    time_scale: float = typer.Option(
        DEFAULT_TIME_SCALE,
        "--time-scale",
        help="Protocol seconds per real second for the doubles (60: a 15-minute standard "
        "CCTP attestation takes 15 s; 1: real time).",
        min=0.001,
        max=100_000,
    ),
    fund: str = typer.Option(
        str(DEFAULT_FUND_BALANCE),
        "--fund",
        help="USDC credited to the exchange's FUND account when the serve process starts.",
    ),
    registry: bool = typer.Option(
        True,
        "--registry/--no-registry",
        help="Record the chains in the network's chain registry, as `qtg chains up` does.",
    ),
    network: NetworkOption = None,
) -> None:
    """Start the local outside world: the local chains as `qtg chains up` makes them
    (and records them), the exchange's hot wallet (keystore:local-bybit-hot) funded
    with ETH and USDC on each chain, an API key pair for the engine in a 0600 file,
    and one background process serving the fake Iris, the fake Bybit and the CCIP
    executing network (the local
    treasury accounts on the exchange's address book, its deposit address on every
    chain, its FUND account credited). Prints the environment a runner needs, never a
    key, secret or password. What already runs is left as it is and reported; only
    what is missing starts."""
    with chain_errors():
        up = bring_up_world(
            port_base,
            registry,
            network,
            iris_port=iris_port,
            bybit_port=bybit_port,
            ccip_port=ccip_port,
            time_scale=time_scale,
            fund=_fund(fund),
        )
    started, keys, state, new, env = up.chains, up.keys, up.state, up.started, up.env
    print_up(started, env=False)
    chain_keys = ", ".join(c.key for c in started.chains)
    typer.echo(f"exchange hot wallet {keys.hot.address} (signer {keys.hot.signer_id}) "
               f"funded on {chain_keys}")  # fmt: skip
    typer.echo(f"exchange deposit address {keys.deposit.address} on {chain_keys}")
    if started.network is not None:
        typer.echo(f"recorded as venue bybit in the registry of {started.network}")
    verb = "started" if new else "already running"
    typer.echo(
        f"world serve {verb} (pid {state.pid}, time scale {state.time_scale:g}x, "
        f"log {state.log_file})"
    )
    typer.echo(f"fake iris {state.iris_url}")
    typer.echo(f"fake bybit {state.bybit_url}")
    typer.echo(f"ccip executing network {state.ccip_url}")
    typer.echo(f"bybit API key file {state.key_file} (the engine's key and secret, mode 0600)")
    print_env(env)


@dataclass(frozen=True)
class WorldUp:
    """What `qtg world up` did: the chains (as `qtg chains up`), the exchange's
    keys, the serve process's state, whether it started now, and the runner's
    environment (names of files and URLs, never a key)."""

    chains: ChainsUp
    keys: ExchangeKeys
    state: WorldState
    started: bool
    env: dict[str, str]


def bring_up_world(
    port_base: int,
    registry: bool,
    network: str | None,
    *,
    iris_port: int | None = None,
    bybit_port: int | None = None,
    ccip_port: int = 0,
    time_scale: float = DEFAULT_TIME_SCALE,
    fund: Decimal = DEFAULT_FUND_BALANCE,
) -> WorldUp:
    """`qtg world up`'s work, for it, the demo and the drills: the chains as
    `qtg chains up` brings them up, the exchange's hot wallet funded on each,
    and the serve process over them (left as it is when it runs over these
    chains), recorded as the venue bybit in the network's registry when the
    chains are. Raises ChainError (and the database's errors)."""
    started = bring_up(port_base, registry, network)
    state_dir = started.state_dir
    keys = ensure_exchange_keys(state_dir)
    with mined_at_once(started.chains):
        for chain in started.chains:
            fund_treasury(chain, [keys.hot])
    if started.network is not None:
        # the local exchange, its chain names and deposit address (allow-listed)
        record_venue(
            database_url(load_settings()), started.network, started.chains, keys.deposit.address
        )
    state, new = start_world(
        state_dir,
        iris_port=port_base + SERVICE_PORTS if iris_port is None else iris_port,
        bybit_port=port_base + SERVICE_PORTS + 1 if bybit_port is None else bybit_port,
        ccip_port=ccip_port,
        time_scale=time_scale,
        fund=fund,
    )
    return WorldUp(started, keys, state, new, runner_env(state_dir))


def _status_lines(state_dir: Path) -> tuple[list[str], bool]:
    """One line per thing recorded, and whether all of it runs."""
    lines: list[str] = []
    ok = True
    for c in read_state(state_dir):
        running = is_running(c)
        head = head_block(c) if running else None
        up = running and head is not None
        ok = ok and up
        state = "running" if up else ("not answering" if running else "stopped")
        lines.append(
            f"{c.key:<8} {state:<10} pid {c.pid}  {c.rpc_url}  head {'-' if head is None else head}"
        )
    world = read_world(state_dir)
    if world is None:
        lines.append("serve    not started (`qtg world up` starts it)")
        return lines, ok
    alive = serve_running(world)
    ok = ok and alive
    lines.append(
        f"serve    {'running' if alive else 'stopped':<10} pid {world.pid}  "
        f"time scale {world.time_scale:g}x  log {world.log_file}"
    )
    for name, url, probe in (
        ("iris", world.iris_url, probe_iris),
        ("bybit", world.bybit_url, probe_bybit),
        ("ccip", world.ccip_url, probe_ccip),
    ):
        answer = probe(world) if alive else None
        answering = answer is not None and answer.ok
        ok = ok and answering
        detail = "" if answer is None else f"  ({answer.detail})"
        lines.append(f"{name:<8} {'answering' if answering else 'down':<10} {url}{detail}")
    return lines, ok


@app.command("status")
def status_cmd() -> None:
    """Say what runs, one line each: the chains (pid, RPC URL, head block), the serve
    process (pid), the fake Iris (an unknown burn answers 404 or an empty list) and
    the fake Bybit (/v5/market/time). Exit 1 when something recorded does not run."""
    with chain_errors():
        state_dir = local_state_dir()
        if not read_state(state_dir) and read_world(state_dir) is None:
            typer.echo("nothing runs: `qtg world up` starts the local outside world")
            return
        lines, ok = _status_lines(state_dir)
    for line in lines:
        typer.echo(line)
    if not ok:
        raise typer.Exit(1)


@app.command("env")
def env_cmd() -> None:
    """Print the environment a runner needs for the local outside world that was
    brought up (the lines `qtg world up` ends with), one `export NAME=value` a
    line, for a shell: eval "$(qtg world env)". URLs and file names, never a key,
    secret or password. Exit 1 when no world is recorded; a note on stderr when
    what is recorded does not run."""
    with chain_errors():
        state_dir = local_state_dir()
        env = runner_env(state_dir)
        world = read_world(state_dir)
        stopped = [c.key for c in read_state(state_dir) if not is_running(c)]
    if world is not None and not serve_running(world):
        stopped.append("the serve process")
    if stopped:
        typer.echo(
            f"qtg: note: {', '.join(stopped)} recorded but not running "
            "(`qtg world up` starts what is missing)",
            err=True,
        )
    print_env(env)


@app.command("down")
def down_cmd() -> None:
    """Stop the serve process (SIGTERM, then SIGKILL after 10 s) and the local chains
    (their state goes with them; the keystore and the API key file stay)."""
    with chain_errors():
        state_dir = local_state_dir()
        world = stop_world(state_dir)
        chains = stop_chains(state_dir)
    if world is None:
        typer.echo("no world serve process was recorded")
    else:
        typer.echo(f"serve stopped (pid {world.pid})")
    if not chains:
        typer.echo("no local chains were recorded")
    for c in chains:
        typer.echo(f"{c.key} stopped (pid {c.pid})")
