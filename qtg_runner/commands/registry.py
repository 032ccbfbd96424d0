"""`qtg registry load|check`: the address book put into a network's chain
registry, and the registry held to the chains.

`load CLASS` (the admin: QTG_DATABASE_URL, or the embedded server's
superuser) records networks/CLASS.toml in the network of that name, in one
transaction (qtg_runner.registry_load): a new entry is created, an entry the
registry already has with other values is proposed for a second login's
approval (`qtg proposals approve ID`, as an operator), the rest is
unchanged or skipped with the reason. Loading again changes nothing.

`check` reads the registry (any login that may read the network: an
operator, a reader, the admin), asks each chain's RPC (the URL in the environment
variable the registry names for it) what it can be asked, and prints one
line a fact, `ok` or `MISMATCH`, with what the registry says and what the
chain answered (qtg_runner.registry_check says which facts). Exits 0 when
every fact holds, 1 when any does not: run it after every registry change
and before the first movement on a network. It signs and writes nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import psycopg
import typer
from psycopg.conninfo import make_conninfo
from rich.markup import escape

from qtg_runner.commands.common import AsOption, NetworkOption, bad
from qtg_runner.commands.movement import connect, out
from qtg_runner.config import NETWORK_MODES, load_settings
from qtg_runner.db.embedded import database_url
from qtg_runner.networks import BookError, load_book
from qtg_runner.registry_check import UnknownChain, check_registry, read_registry
from qtg_runner.registry_load import load_registry, registry_entries

app = typer.Typer(
    help="The chain registry of a network, held to the chains themselves.",
    no_args_is_help=True,
)

ChainOption = Annotated[
    list[str] | None,
    typer.Option("--chain", help="Check only this chain (its registry key); repeat for more."),
]


FinalityOption = Annotated[
    list[str] | None,
    typer.Option(
        "--finality-depth",
        metavar="CHAIN=N",
        help="Confirmations before a receipt on CHAIN counts as final, where the book "
        "has none (no public source gave it); repeat for more chains.",
    ),
]
BlockTimeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--block-time",
        metavar="CHAIN=MS",
        help="CHAIN's block time in milliseconds, where the book has none; repeat.",
    ),
]


def chain_numbers(values: list[str] | None, option: str) -> dict[str, int]:
    """``CHAIN=N`` pairs as a mapping; a malformed one is refused (exit 2)."""
    stated: dict[str, int] = {}
    for pair in values or ():
        key, sep, number = pair.partition("=")
        if not sep or not key or not number.isdigit() or len(number) > 9:
            bad(f"{pair!r} is not CHAIN=N (a chain key and a whole number)", option)
        stated[key] = int(number)
    return stated


@app.command("load")
def load_cmd(
    network_class: Annotated[
        str,
        typer.Argument(
            metavar="CLASS", help="testnet or mainnet: the book and the network it goes into."
        ),
    ],
    finality_depth: FinalityOption = None,
    block_time: BlockTimeOption = None,
    book_file: Annotated[
        Path | None,
        typer.Option(
            "--book",
            metavar="FILE",
            help="A book of your own in the same format (a chain or a network the "
            "repository's books do not list), instead of networks/CLASS.toml; its "
            "network_class must be CLASS.",
        ),
    ] = None,
) -> None:
    """Put the address book networks/CLASS.toml (or --book FILE) into the
    network CLASS's chain registry, as the admin, in one transaction: new
    entries are created, an entry the registry has with other values is
    proposed for a second login's approval (qtg proposals approve ID), the
    rest is unchanged or skipped with why. Loading again changes nothing.
    Then run `qtg registry check`."""
    if network_class not in NETWORK_MODES:
        bad(f"{network_class!r} is not a network class: testnet or mainnet", "CLASS")
    try:
        book = load_book(network_class, book_file)
    except BookError as exc:  # the file and the entry that is wrong: the admin's to fix
        bad(str(exc), "--book" if book_file is not None else None)
    try:
        entries, skipped = registry_entries(
            book,
            chain_numbers(finality_depth, "--finality-depth"),
            chain_numbers(block_time, "--block-time"),
        )
    except ValueError as exc:
        bad(str(exc))
    admin = database_url(load_settings())
    conninfo = make_conninfo(admin, options=f"-c search_path={network_class},qtg")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        outcomes = load_registry(conn, entries)
    for outcome in [*outcomes, *skipped]:
        how = outcome.detail
        if outcome.proposal_id is not None:
            how = f"#{outcome.proposal_id}: {how}; another login approves it"
        out.print(
            f"{outcome.action:<9}  {escape(outcome.subject)}" + (f"  {escape(how)}" if how else "")
        )
    counts = {
        a: sum(o.action == a for o in [*outcomes, *skipped])
        for a in ("created", "unchanged", "proposed", "skipped")
    }
    out.print(", ".join(f"{n} {a}" for a, n in counts.items()))


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
    CCIP lane's destination on its Router and its OnRamp, the Stargate pool's
    token, and Multicall3
    (a note when missing: reads then go one call at a time). One line a fact;
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
        mark = (
            "ok      "
            if fact.ok
            else "[bold red]MISMATCH[/]"
            if fact.fails
            else "[yellow]NOTE[/]    "
        )
        said = fact.registered if fact.ok else f"registry: {fact.registered}; chain: {fact.found}"
        if not fact.ok and not fact.fails:
            said = f"chain: {fact.found}; reads go one call at a time"
        out.print(
            f"{mark}  {escape(fact.chain_key)}  {escape(fact.subject):<{width}}  {escape(said)}"
        )
    wrong = sum(fact.fails for fact in facts)
    notes = sum(not fact.ok and not fact.fails for fact in facts)
    held = f"{len(facts) - wrong - notes} of {len(facts)} facts hold"
    out.print(held + (f", {wrong} do not" if wrong else "") + (f", {notes} noted" if notes else ""))
    if wrong:
        raise typer.Exit(1)
