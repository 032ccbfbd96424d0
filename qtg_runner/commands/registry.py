"""`qtg registry check`: the network's chain registry held to the chains.

Reads the registry (any login that may read the network: an operator, a
reader, the admin), asks each chain's RPC (the URL in the environment
variable the registry names for it) what it can be asked, and prints one
line a fact, `ok` or `MISMATCH`, with what the registry says and what the
chain answered (qtg_runner.registry_check says which facts). Exits 0 when
every fact holds, 1 when any does not: run it after every registry change
and before the first movement on a network. It signs and writes nothing.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.markup import escape

from qtg_runner.commands.common import AsOption, NetworkOption, bad
from qtg_runner.commands.movement import connect, out
from qtg_runner.registry_check import UnknownChain, check_registry, read_registry

app = typer.Typer(
    help="The chain registry of a network, held to the chains themselves.",
    no_args_is_help=True,
)

ChainOption = Annotated[
    list[str] | None,
    typer.Option("--chain", help="Check only this chain (its registry key); repeat for more."),
]


@app.command("check")
def check_cmd(
    chain: ChainOption = None,
    timeout: Annotated[
        float, typer.Option(min=0.5, max=120, help="Seconds to wait for each RPC answer.")
    ] = 10.0,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Check every registered chain against its RPC: the chain id, code at each
    registered address, each token's decimals and symbol, the CCTP domain, each
    CCIP lane's Router and OnRamp, the Stargate pool's token. One line a fact;
    exit 1 on any mismatch."""
    with connect(network, as_login) as conn:
        try:
            chains = read_registry(conn, chain or ())
        except UnknownChain as exc:
            bad(str(exc), "--chain")
    if not chains:
        out.print("no chains in this network's registry: nothing to check")
        return
    out.print(f"checking {len(chains)} chain(s): " + ", ".join(c.chain_key for c in chains))
    facts = asyncio.run(check_registry(chains, timeout=timeout))
    width = max(len(f.subject) for f in facts)
    for fact in facts:
        mark = "ok      " if fact.ok else "[bold red]MISMATCH[/]"
        said = fact.registered if fact.ok else f"registry: {fact.registered}; chain: {fact.found}"
        out.print(
            f"{mark}  {escape(fact.chain_key)}  {escape(fact.subject):<{width}}  {escape(said)}"
        )
    wrong = sum(not fact.ok for fact in facts)
    held = f"{len(facts) - wrong} of {len(facts)} facts hold"
    out.print(held + (f", {wrong} do not" if wrong else ""))
    if wrong:
        raise typer.Exit(1)
