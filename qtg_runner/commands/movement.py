"""`qtg movement ...`: create, approve, cancel, reprioritise and inspect movements.

Every sub-command calls the network's procedures or reads its views as the
person: their own login (QTG_DATABASE_URL is their DSN, or --as NAME picks a
login from the credentials file), exactly as they would in psql. The
procedures take the actor from the login; nothing here names one. create,
approve, cancel and priority refuse a login that is not an operator of the network
(a superuser included: the admin is not a person). Inputs are parsed
strictly (commands/common.py), and every error, a procedure's refusal
included, is one `qtg: error:` line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import psycopg
import typer
from rich.console import Console
from rich.text import Text

from qtg_runner.commands.common import (
    BIGINT_MAX,
    AsOption,
    CommandError,
    NetworkOption,
    parse_amount,
    parse_duration,
    parse_params,
    read_json_file,
    resolve_network,
)
from qtg_runner.commands.tables import Grid, WideOption, cell, printable, show
from qtg_runner.config import load_settings
from qtg_runner.db import procs
from qtg_runner.db.embedded import database_url
from qtg_runner.db.logins import check_member
from qtg_runner.db.pool import bound_conninfo, login_dsn

app = typer.Typer(no_args_is_help=True)  # its help: its line in cli.Qtg.lazy
out = Console()
err = Console(stderr=True)
R = TypeVar("R")

MovementId = Annotated[int, typer.Argument(min=1, max=BIGINT_MAX, help="Movement id.")]


class ProcedureError(Exception):
    pass


@contextmanager
def connect(
    network: str | None, as_login: str | None = None, *, operator: bool = False
) -> Iterator[psycopg.Connection[Any]]:
    """A connection bound to the network, as the person (``as_login``, or whoever
    QTG_DATABASE_URL names); with ``operator`` only an operator login of the network.
    An error in the block, a procedure's refusal included, reaches QtgGroup,
    which prints it as the one error line (exit 2 for a QT SQLSTATE)."""
    net = resolve_network(network)
    settings = load_settings()
    conninfo = bound_conninfo(login_dsn(database_url(settings), as_login, settings), net, "qtg-cli")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if operator:
            check_member(conn, "operator", net)
        yield conn


def as_operator(network: str | None, as_login: str | None, call: procs.Call[R]) -> R:
    """The one row of ``call``, made as an operator login of the network (connect)."""
    with connect(network, as_login, operator=True) as conn:
        return call.one(conn)


@app.command("create")
def create_cmd(
    external_id: Annotated[
        str,
        typer.Option(
            "--external-id", "-e", help="Your id for this movement; makes creation idempotent."
        ),
    ],
    amount: Annotated[str, typer.Option("--amount", "-a", help="Amount, up to 6 decimals.")],
    plan: Annotated[
        Path | None,
        typer.Option("--plan", help="Plan JSON file ('-' for stdin): {\"nodes\": [...]}."),
    ] = None,
    template: Annotated[
        str | None, typer.Option("--template", "-t", help="Name of a registered template.")
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="Template parameter key=value (value may be JSON)."),
    ] = None,
    asset: Annotated[str, typer.Option(help="Asset symbol.")] = "USDC",
    expires_in: Annotated[
        str | None, typer.Option("--expires-in", help="Expire if not started within e.g. 30m, 2h.")
    ] = None,
    callback_url: Annotated[
        str | None, typer.Option("--callback-url", help="Where to deliver state changes.")
    ] = None,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Create a movement from a plan file or a template, as your login (the creator,
    who may not approve it). Prints its id."""
    if (plan is None) == (template is None):
        raise typer.BadParameter("give exactly one of --plan or --template")
    if param and template is None:
        raise typer.BadParameter("--param goes with --template", param_hint="--param")
    value = parse_amount(amount)
    plan_doc: Any = None
    if plan is not None:
        plan_doc = read_json_file(plan, "plan", "--plan")
        if not isinstance(plan_doc, dict):
            raise typer.BadParameter(
                f'{plan} is not a plan: a JSON object {{"nodes": [...]}}', param_hint="--plan"
            )
    params = parse_params(param or []) if template else None
    expires_at = None if expires_in is None else datetime.now(UTC) + parse_duration(expires_in)
    created = as_operator(
        network,
        as_login,
        procs.create_movement(
            external_id,
            value,
            plan=plan_doc,
            template=template,
            params=params,
            asset=asset,
            expires_at=expires_at,
            callback_url=callback_url,
        ),
    )
    state = "created" if created.created else "already exists (same external id and plan)"
    out.print(f"movement [bold]{created.movement_id}[/bold] {state}")


@app.command("approve")
def approve_cmd(
    movement_id: MovementId,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Approve a movement (PENDING_APPROVAL -> APPROVED) as your login, which must
    not be the one that created it (QT022). A movement whose rehearsal failed
    is approved with a warning (QT025)."""
    with connect(network, as_login, operator=True) as conn, procs.advice(conn) as advised:
        state = procs.approve_movement(movement_id).one(conn)
    for said in advised:
        out.print(
            Text(f"warning ({said.sqlstate}): {said.message}", style="yellow"), soft_wrap=True
        )
    out.print(f"movement {movement_id} {state}")


@app.command("cancel")
def cancel_cmd(
    movement_id: MovementId,
    reason: Annotated[str | None, typer.Option(help="Why (recorded in the audit log).")] = None,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Cancel a movement as your login. Side effects already out run until they settle."""
    state = as_operator(network, as_login, procs.cancel_movement(movement_id, reason=reason))
    if state == procs.RequestState.CANCELLED:
        out.print(f"movement {movement_id} CANCELLED")
    else:
        out.print(
            f"movement {movement_id} is {state}: cancel requested,"
            " waiting for in-flight nodes to settle"
        )


@app.command("priority", context_settings={"ignore_unknown_options": True})
def priority_cmd(
    movement_id: MovementId,
    priority: Annotated[
        int,
        typer.Argument(
            min=-(2**31),
            max=2**31 - 1,
            help="The new priority, a whole number: higher is claimed sooner (a new movement: 0).",
        ),
    ],
    reason: Annotated[str, typer.Option(help="Why (recorded in the audit log).")],
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Set the priority of a movement that has not finished, and of its nodes not
    yet finished, as your login: its READY nodes are claimed before those of a
    lower priority. The same priority again changes nothing."""
    set_to = as_operator(network, as_login, procs.set_priority(movement_id, priority, reason))
    out.print(f"movement {movement_id} priority {set_to}")


def rows_table(
    cur: psycopg.Cursor[Any],
    title: str,
    *,
    text: Sequence[str] = (),
    drop: Sequence[str] = (),
    wide: bool = False,
) -> Grid:
    """The rows of ``cur`` as a grid (commands/tables.py): its columns named as
    the query names them; ``text`` the free-text ones, ``drop`` the ones left out
    first when the terminal is too narrow, the least important first."""
    names = [c.name for c in cur.description or ()]
    rows = [[cell(value) for value in row] for row in cur.fetchall()]
    return Grid(title, names, rows, text=text, drop=drop, wide=wide)


@app.command("show")
def show_cmd(
    movement_id: MovementId,
    wide: WideOption = False,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Show one movement and its nodes, and the rehearsal that counts if it was rehearsed."""
    with connect(network, as_login) as conn:
        cur = conn.execute("SELECT * FROM movement_progress WHERE movement_id = %s", (movement_id,))
        row = cur.fetchone()
        if row is None:
            raise CommandError(f"movement {movement_id} does not exist on this network")
        names = [c.name for c in cur.description or ()]
        summary = Grid(
            f"movement {movement_id}",
            ["field", "value"],
            [[name, cell(value)] for name, value in zip(names, row, strict=True)],
            text=["value"],
            wide=wide,
            show_header=False,
        )
        cur = conn.execute(
            "SELECT node_id, node_key, depends_on, executor_key, lane, node_state, observe_phase,"
            " observe_count, next_observe_at, external_ref, last_error, route"
            " FROM movement_nodes WHERE movement_id = %s ORDER BY node_id",
            (movement_id,),
        )
        names = [c.name for c in cur.description or ()][:-1]  # the route: lines of its own
        rows = cur.fetchall()
        nodes = Grid(
            "nodes",
            names,
            [[cell(value) for value in row[:-1]] for row in rows],
            text=["node_key", "depends_on", "external_ref", "last_error"],
            drop=[
                "observe_count",
                "next_observe_at",
                "observe_phase",
                "depends_on",
                "lane",
                "external_ref",
                "executor_key",
            ],
            wide=wide,
        )
        show(out, summary, nodes)
        # where each step's money goes, whole, a line each: what the approver approves
        for row in rows:
            if row[-1] is not None:
                step = f"step {row[1]} ({row[3]}): {row[-1]}"
                out.print(Text(printable(step)), soft_wrap=True)
        rehearsal = conn.execute(
            "SELECT rehearsal_id, outcome, recorded_by, recorded_at,"
            " jsonb_build_object('lines', lines), registry_changed FROM rehearsal_status"
            " WHERE movement_id = %s AND rehearsal_id IS NOT NULL",
            (movement_id,),
        ).fetchone()
        if rehearsal is not None:
            print_rehearsal(*rehearsal)


REGISTRY_CHANGED = "; the registry has changed since it ran: rehearse again"


def print_rehearsal(
    rehearsal_id: int,
    outcome: str,
    recorded_by: str,
    recorded_at: datetime,
    summary: Any,
    registry_changed: bool | None,
) -> None:
    """The rehearsal that counts for a movement's approval (rehearsal_status,
    counted_rehearsals): its outcome, who recorded it and when, whether the
    registry has changed since, and its summary's "lines" (the rehearsing
    tool's report: an object with "outcome" and "lines", a list of strings)."""
    style = "green" if outcome == "passed" else "bold red"
    out.print(
        Text.assemble(
            "rehearsal ",
            (outcome, style),
            f" (id {rehearsal_id}, recorded by {recorded_by} at {cell(recorded_at)} UTC)",
            (REGISTRY_CHANGED, "bold yellow") if registry_changed else "",
        ),
        soft_wrap=True,
    )
    lines = summary.get("lines") if isinstance(summary, dict) else None
    if isinstance(lines, list):
        for line in lines:
            text = line if isinstance(line, str) else json.dumps(line)
            out.print(Text(f"  {text}"), soft_wrap=True)


@app.command("list")
def list_cmd(
    state: Annotated[
        str | None, typer.Option(help="Only movements in this state, e.g. EXECUTING.")
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=10000, help="At most this many, newest first.")
    ] = 20,
    wide: WideOption = False,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """List movements, newest first."""
    states = tuple(procs.RequestState)
    if state is not None and state.upper() not in states:
        raise typer.BadParameter(
            f"{state!r} is not a state (one of: {', '.join(states)})", param_hint="--state"
        )
    with connect(network, as_login) as conn:
        cur = conn.execute(
            "SELECT movement_id AS id, external_id,"
            " request_state || CASE WHEN request_state = 'EXECUTING' AND stop_reason IS NOT NULL"
            " THEN ' (' || stop_reason || ' requested)' ELSE '' END AS state,"
            " trim_scale(amount) || ' ' || asset AS amount,"
            " (nodes_completed + nodes_failed + nodes_skipped) || '/' || nodes_total AS settled,"
            " nodes_in_flight AS in_flight, created_at"
            " FROM movement_progress WHERE %s::text IS NULL OR request_state::text = upper(%s)"
            " ORDER BY movement_id DESC LIMIT %s",
            (state, state, limit),
        )
        show(
            out,
            rows_table(
                cur,
                "movements",
                text=["external_id"],
                drop=["in_flight", "settled", "created_at"],
                wide=wide,
            ),
        )
