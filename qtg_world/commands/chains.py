"""`qtg chains up|down|status`: local EVM chains (anvil) on loopback ports, each
with its own chain id and block time, the committed contracts deployed on each."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console

from qtg_runner.chains.errors import ChainError
from qtg_runner.commands.common import (
    ENVIRONMENT,
    CommandError,
    NetworkOption,
    cli_errors,
    resolve_network,
)
from qtg_runner.commands.tables import Grid, WideOption, show
from qtg_runner.config import load_settings
from qtg_runner.db.embedded import database_url
from qtg_world.chains.keys import LocalKey
from qtg_world.chains.local import (
    DEFAULT_CHAINS,
    ChainSpec,
    RunningChain,
    chains_dir,
    head_block,
    is_running,
    read_state,
    runner_env,
    stop_chains,
)
from qtg_world.chains.registry import prepare_treasury, record_chains
from qtg_world.chains.start import start_chains

app = typer.Typer(
    help=(
        "Local EVM chains for development and tests: anvil (from npm, installed by "
        "`make install`) on loopback ports, their state (pids, ports, contract "
        "addresses) in chains/state.json beside the embedded server's data directory, "
        "the treasury's encrypted keystore in chains/keystore/."
    ),
    no_args_is_help=True,
)
out = Console()


@contextmanager
def chain_errors() -> Iterator[None]:
    with cli_errors():
        try:
            yield
        except ChainError as exc:
            # anvil missing, a port taken, a chain that does not answer: the
            # environment's fault, one `qtg: error:` line and exit 1
            raise CommandError(str(exc), ENVIRONMENT) from None


def local_state_dir() -> Path:
    return chains_dir(load_settings().data_dir)


def _table(chains: list[RunningChain], title: str, wide: bool = False) -> Grid:
    table = Grid(
        title,
        ["chain", "chain id", "block time", "rpc url", "pid", "state", "head", "USDC"],
        text=["rpc url"],
        drop=["block time", "pid", "head", "chain id"],
        wide=wide,
    )
    for c in chains:
        running = is_running(c)
        head = head_block(c) if running else None
        table.add_row(
            c.key,
            str(c.chain_id),
            f"{c.block_time}s",
            c.rpc_url,
            str(c.pid),
            "running" if running else "stopped",
            "-" if head is None else str(head),
            c.contracts.get("MockUSDC", "-"),
        )
    return table


@app.command("up")
def up_cmd(
    port_base: int = typer.Option(
        DEFAULT_CHAINS[0].port,
        "--port-base",
        help="The first chain's port; each next chain takes the next port.",
        min=1024,
        max=65000,
    ),
    registry: bool = typer.Option(
        True,
        "--registry/--no-registry",
        help="Record the chains, their USDC and treasury accounts in the network's chain "
        "registry, as the admin (QTG_DATABASE_URL, or the embedded server's superuser).",
    ),
    wide: WideOption = False,
    network: NetworkOption = None,
) -> None:
    """Start the local chains (local-a: chain id 31337, 1s blocks; local-b: chain id
    31338, 2s blocks), deploy MockUSDC and the CCTP v2 double (CCTP domains 100 and
    101, two attester keys in the keystore) on each, make two treasury keys in an
    encrypted keystore beside the state file (reused when there), fund them with ETH
    and mocked USDC on each chain, record them in the network's chain registry as
    keystore:local-treasury-1 and -2, and print the environment a runner needs: the
    RPC URLs under the variables the registry names, the keystore directory and its
    password file (never a key or a password). Chains that already run are left as
    they are (and recorded again)."""
    with chain_errors():
        started = bring_up(port_base, registry, network)
    print_up(started, wide=wide)


@dataclass(frozen=True)
class ChainsUp:
    """What `qtg chains up` did: where the state is, the chains, the treasury
    accounts, and the network whose registry recorded them (None: not recorded)."""

    state_dir: Path
    chains: list[RunningChain]
    treasury: list[LocalKey]
    network: str | None


def bring_up(port_base: int, registry: bool, network: str | None) -> ChainsUp:
    """`qtg chains up`'s work, for it and `qtg world up`: the chains started unless
    they run, the treasury made and funded, the chains recorded in the network's
    registry when ``registry``. Raises ChainError (and the database's errors)."""
    specs = [
        ChainSpec(key=s.key, chain_id=s.chain_id, port=port_base + i, block_time=s.block_time)
        for i, s in enumerate(DEFAULT_CHAINS)
    ]
    state_dir = local_state_dir()
    chains = start_chains(state_dir, specs)
    treasury = prepare_treasury(state_dir, chains)
    net: str | None = None
    if registry:
        net = resolve_network(network)
        record_chains(database_url(load_settings()), net, chains, treasury)
    return ChainsUp(state_dir, chains, treasury, net)


def print_up(started: ChainsUp, env: bool = True, wide: bool = False) -> None:
    """What `qtg chains up` prints: the chains, the treasury accounts, the registry
    and (``env``) the runner's environment as exports (never a key or a password)."""
    show(out, _table(started.chains, f"local chains ({started.state_dir / 'state.json'})", wide))
    for account in started.treasury:
        typer.echo(f"treasury account {account.address} (signer {account.signer_id})")
    if started.network is not None:
        typer.echo(f"recorded in the chain registry of {started.network}")
    if env:
        print_env(runner_env(started.state_dir))


def print_env(env: Mapping[str, str]) -> None:
    for name, value in env.items():
        typer.echo(f"export {name}={shlex.quote(value)}")


@app.command("down")
def down_cmd() -> None:
    """Stop the local chains recorded in the state file (their state goes with them)."""
    with chain_errors():
        chains = stop_chains(local_state_dir())
    if not chains:
        typer.echo("no local chains were recorded")
    for c in chains:
        typer.echo(f"{c.key} stopped (pid {c.pid})")


@app.command("status")
def status_cmd(wide: WideOption = False) -> None:
    """Say which local chains run: pid, RPC URL, head block, contract address."""
    with chain_errors():
        state_dir = local_state_dir()
        chains = read_state(state_dir)
    if not chains:
        typer.echo("no local chains: `qtg chains up` starts them")
        return
    show(out, _table(chains, f"local chains ({state_dir / 'state.json'})", wide))
    if not all(is_running(c) for c in chains):
        raise typer.Exit(1)
