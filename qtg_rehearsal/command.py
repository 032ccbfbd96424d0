"""`qtg rehearse MOVEMENT`: run a movement on forks of its chains before it
is approved, print what it did and record the summary on the movement.

As any operator of the network (your login, or --as NAME): the movement,
its plan and the registry are read with rehearsal_input; the rehearsal runs
(qtg_rehearsal.rehearse) with the RPC URLs of this shell's environment under
the names the registry gives (QTG_RPC_...), and nothing else of it: no
key, no exchange credential, no Iris URL is read. The summary is recorded
with record_rehearsal (audited) unless --no-record; `qtg movement show`
and the approval then say it. Exit 0 when the rehearsal passed, 1 when it
failed or could not run.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from psycopg.types.json import Jsonb

from qtg_rehearsal.rehearse import RehearsalError, run
from qtg_runner.commands.common import (
    ENVIRONMENT,
    AsOption,
    CommandError,
    NetworkOption,
    cli_errors,
    resolve_network,
)
from qtg_runner.commands.movement import MovementId, connect, out
from qtg_runner.commands.registry import chain_numbers
from qtg_runner.db import procs

BlockOption = Annotated[
    list[str] | None,
    typer.Option(
        "--block",
        metavar="CHAIN=N",
        help="Fork CHAIN at block N instead of its head; repeat for more chains.",
    ),
]


def rehearse_cmd(
    movement_id: MovementId,
    network: NetworkOption = None,
    as_login: AsOption = None,
    block: BlockOption = None,
    timeout: Annotated[
        float,
        typer.Option(min=10, max=3600, help="Seconds the movement may run on the forks."),
    ] = 600.0,
    record: Annotated[
        bool,
        typer.Option(help="Record the summary on the movement (audited), for its approver."),
    ] = True,
) -> None:
    """Rehearse a movement awaiting approval on anvil forks of its chains.

    Forks each chain the plan names from the RPC URL in this shell's
    environment (the registry names the variable), pinned at its head or
    --block; impersonates the treasury's accounts (no key is used); runs the
    plan with the real executors in a throwaway engine, the Iris double
    attesting; prints each step's outcome, gas and fees and the balances
    before and after, and records the summary on the movement. CCIP and
    Stargate deliveries and exchange steps do not run on a fork: the summary
    says so. Needs anvil (`make install`)."""
    net = resolve_network(network)
    blocks = chain_numbers(block, "--block")
    with cli_errors():
        with connect(net, as_login, operator=True) as conn:
            data = procs.rehearsal_input(movement_id).one(conn)
        try:
            summary = run(
                data,
                dict(os.environ),
                net,
                blocks=blocks,
                timeout_s=timeout,
                say=lambda line: out.print(line, highlight=False, soft_wrap=True),
            )
        except RehearsalError as exc:
            raise CommandError(f"the rehearsal could not run: {exc}", ENVIRONMENT) from None
        colour = "green" if summary.outcome == "passed" else "red"
        for line in summary.lines:
            out.print(line, highlight=False, soft_wrap=True)
        if record:
            with connect(net, as_login, operator=True) as conn:
                rehearsal_id = procs.record_rehearsal(
                    movement_id, summary.outcome, Jsonb(summary.record)
                ).one(conn)
            out.print(f"recorded on movement {movement_id} as rehearsal {rehearsal_id}")
        out.print(f"[{colour}]rehearsal {summary.outcome}[/{colour}]")
    raise typer.Exit(0 if summary.outcome == "passed" else 1)
