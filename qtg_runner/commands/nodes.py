"""`qtg node`: what an operator does to one node, as their own login
(requeue_node and release_quarantine, as in psql).

  requeue NODE --reason R   a fresh side effect for an UNKNOWN node whose
                            prepared one operators judge can never land, or
                            a retry of a FAILED node of which nothing was
                            prepared (nothing signed or sent): the first
                            operator asks, another applies it (four eyes;
                            the asker's second call is refused, QT022)
  release NODE --reason R   a quarantined node back into circulation, in the
                            state it was quarantined in (one operator: it
                            gives the node no new side effect)
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from qtg_runner.commands.common import AsOption, NetworkOption
from qtg_runner.commands.movement import as_operator
from qtg_runner.db import procs

out = Console()

app = typer.Typer(
    name="node",
    help="Requeue an UNKNOWN node, retry a FAILED one (two operators), release a quarantined one.",
    no_args_is_help=True,
)

NodeId = Annotated[
    int, typer.Argument(min=1, help="The node's id (in_flight_nodes, movement show).")
]
Reason = Annotated[str, typer.Option(help="Why (recorded in the audit log).")]


@app.command("requeue")
def requeue_cmd(
    node_id: NodeId, reason: Reason, network: NetworkOption = None, as_login: AsOption = None
) -> None:
    """Ask for, or apply, a fresh side effect for an UNKNOWN node whose prepared
    one (a signed transaction, an exchange request) can never land, or a
    retry of a FAILED node of which nothing was prepared (its movement runs
    again; at most 3 retries). The first operator's call asks (REQUESTED: the
    node is untouched); another operator's call applies it (the node READY,
    its old intent ABANDONED, the next claim prepares anew). The asker's
    second call is refused (QT022); a FAILED node whose side effect was
    prepared is never retried (QT021)."""
    row = as_operator(network, as_login, procs.requeue_node(node_id, reason))
    if row.requeue_state == "APPLIED":
        out.print(f"node {node_id} requeued: {row.node_state} (request {row.requeue_id})")
    else:
        out.print(
            f"node {node_id}: requeue {row.requeue_id} {row.requeue_state}; "
            "another operator applies it with the same command"
        )


@app.command("release")
def release_cmd(
    node_id: NodeId, reason: Reason, network: NetworkOption = None, as_login: AsOption = None
) -> None:
    """Release a quarantined node, as your login: it goes back in the state it
    was quarantined in, due at once (READY for a dispatcher, SUBMITTING or
    UNKNOWN for recovery, SUBMITTED or OBSERVING for the observer)."""
    state = as_operator(network, as_login, procs.release_quarantine(node_id, reason))
    out.print(f"node {node_id} released: {state}")
