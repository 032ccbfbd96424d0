"""`qtg pause` and `qtg resume`: stop a scope's new claims, and let them go
again, as the operator's own login (trip_breaker and reset_breaker, as in
psql). A pause holds the READY nodes of a movement, a lane, a venue (an
executor), a chain or the whole network; what is in flight goes on. Anyone
may pause; another operator resumes (the pauser is refused, QT022).
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer
from rich.console import Console

from qtg_runner.commands.common import AsOption, NetworkOption, parse_duration
from qtg_runner.commands.movement import as_operator
from qtg_runner.db import procs

out = Console()

MAX_PAUSE_S = 30 * 86400
"""trip_breaker's bound: a pause lasts at most 30 days (else until resumed)."""


class Scope(enum.StrEnum):
    movement = "movement"
    lane = "lane"
    venue = "venue"
    chain = "chain"
    network = "network"


ScopeArgument = Annotated[
    Scope,
    typer.Argument(
        help="What to pause: a movement (NAME its id), a lane, a venue (an executor's key), "
        "a chain (its key) or the network (NAME '*')."
    ),
]
NameArgument = Annotated[
    str,
    typer.Argument(help="The movement id, lane, executor key or chain key; '*' for the network."),
]


def pause_cmd(
    scope: ScopeArgument,
    name: NameArgument,
    reason: Annotated[str, typer.Option(help="Why (recorded in the audit log).")],
    for_: Annotated[
        str | None,
        typer.Option(
            "--for", help="End the pause by itself after this long (90s, 30m, 2h, 1d; at most 30d)."
        ),
    ] = None,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Pause a scope now, as your login: its READY nodes get no new claims until
    another operator resumes it (or --for passes); nodes in flight are still
    observed and recovered. Pausing a scope paused already keeps that pause
    (your reason is audited)."""
    seconds = None
    if for_ is not None:
        seconds = parse_duration(for_, "--for").total_seconds()
        if seconds > MAX_PAUSE_S:
            raise typer.BadParameter(f"{for_!r} is longer than 30 days", param_hint="--for")
    row = as_operator(network, as_login, procs.trip_breaker(scope.value, name, reason, seconds))
    said = "paused" if row.tripped else "was paused already (your reason is in the audit log)"
    until = f" for {for_}" if for_ is not None and row.tripped else ""
    out.print(f"{scope.value} {name} {said}{until}")


def resume_cmd(
    scope: ScopeArgument,
    name: NameArgument,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Resume a paused scope, as your login: another operator than the one who
    paused it (a breaker the engine tripped takes two operators: the first
    asks, the second resumes)."""
    state = as_operator(network, as_login, procs.reset_breaker(scope.value, name))
    if state == "CLOSED":
        out.print(f"{scope.value} {name} resumed")
    elif state == "RESET_REQUESTED":
        out.print(f"{scope.value} {name}: resume asked; a second operator resumes it")
    else:
        out.print(f"{scope.value} {name} is still {state}")
