"""`qtg proposals ...`: list, approve and reject configuration proposals.

Lane pacing, templates and an executor's configuration change only through a
proposal (propose_lane_baseline, propose_template, propose_executor_config,
in psql) that a second operator approves. Every sub-command logs in as the
person, like `qtg movement` (their own DSN in QTG_DATABASE_URL, or --as NAME:
the approver must not be the proposer); approve and reject refuse a login
that is not an operator of the network.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from qtg_runner.commands.common import BIGINT_MAX, AsOption, CommandError, NetworkOption
from qtg_runner.commands.movement import as_operator, connect, out
from qtg_runner.commands.tables import Grid, WideOption, cell, show
from qtg_runner.db import procs

app = typer.Typer(
    help="List, approve and reject configuration proposals (lane pacing, templates, executors).",
    no_args_is_help=True,
)


ProposalId = Annotated[int, typer.Argument(min=1, max=BIGINT_MAX, help="Proposal id.")]


def _compact(value: Any) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


@app.command("list")
def list_cmd(
    wide: WideOption = False, network: NetworkOption = None, as_login: AsOption = None
) -> None:
    """The open proposals (the open_proposals view): who proposed what, until
    when, and each setting that changes, from its value now to the proposed one."""
    with connect(network, as_login) as conn:
        rows = conn.execute(
            "SELECT proposal_id, kind, subject, changes, proposed_by, proposed_at, expires_in"
            " FROM open_proposals ORDER BY proposal_id"
        ).fetchall()
    if not rows:
        out.print("no open proposals")
    for proposal_id, kind, subject, changes, by, at, expires_in in rows:
        out.print(
            f"[bold]proposal {proposal_id}[/bold]: {kind} {subject}, proposed by {by}"
            f" at {cell(at)}, expires in {cell(expires_in)}",
            highlight=False,
        )
        table = Grid(None, ["setting", "from", "to"], text=["from", "to"], wide=wide)
        for key, change in sorted((changes or {}).items()):
            table.add_row(key, _compact(change["from"]), _compact(change["to"]))
        show(out, table)


@app.command("approve")
def approve_cmd(
    proposal_id: ProposalId,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Approve a proposal and apply its change (not one you proposed yourself)."""
    with connect(network, as_login, operator=True) as conn:
        try:
            state = procs.approve_proposal(proposal_id).one(conn)
        except procs.Refused as refused:
            hint = f" hint: {refused.hint}" if refused.hint else ""
            raise CommandError(
                f"refused ({refused.sqlstate}): {refused.message}; proposal {proposal_id} is still"
                f" PROPOSED and the refusal is in the audit log.{hint}"
            ) from None
    out.print(f"proposal {proposal_id} {state}")


@app.command("reject")
def reject_cmd(
    proposal_id: ProposalId,
    reason: Annotated[str, typer.Option(help="Why (kept with the proposal and audited).")],
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Reject (or, as its proposer, withdraw) an open proposal."""
    state = as_operator(network, as_login, procs.reject_proposal(proposal_id, reason))
    out.print(f"proposal {proposal_id} {state}")
