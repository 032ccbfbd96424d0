"""`qtg callbacks list|replay`: the signed callbacks of a network, as an operator.

The callback_dispatcher sidecar delivers the callback_outbox to the targets
the admin registered (upsert_callback_target); a callback that spent its
attempts or its age is DEAD, one whose url is not a registered target
REFUSED (never sent): both are in the dead_callbacks view. `list` shows the
deliveries (the callback_deliveries view), `replay ID` sends a DEAD or
REFUSED one again (replay_callback: the same webhook-id, audited with the
reason). Both log in as the person (their own DSN in QTG_DATABASE_URL, or
--as NAME). The dispatcher deletes the SENT and NO_TARGET rows keep_days
after they were done (prune_callbacks), so `list` shows the last 90 days'.
"""

from __future__ import annotations

from typing import Annotated

import typer

from qtg_runner.commands.common import BIGINT_MAX, USAGE, AsOption, CommandError, NetworkOption
from qtg_runner.commands.movement import as_operator, connect, out
from qtg_runner.commands.tables import Grid, WideOption, cell, show
from qtg_runner.db import procs

app = typer.Typer(no_args_is_help=True)  # its help: its line in cli.Qtg.lazy

STATES = ("PENDING", "SENT", "DEAD", "REFUSED", "NO_TARGET")
CallbackId = Annotated[int, typer.Argument(min=1, max=BIGINT_MAX, help="Callback id.")]


@app.command("list")
def list_cmd(
    state: Annotated[
        str | None,
        typer.Option("--state", help="Only this state: " + ", ".join(STATES) + "."),
    ] = None,
    dead: Annotated[
        bool, typer.Option("--dead", help="Only the dead letters (DEAD and REFUSED).")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10000)] = 50,
    wide: WideOption = False,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """The newest callbacks: state, target, attempts, next attempt, last error.

    SENT and NO_TARGET callbacks are deleted callback_settings.keep_days (90)
    after they were done; DEAD, REFUSED and PENDING ones stay."""
    if state is not None and state.upper() not in STATES:
        raise CommandError(f"--state is one of {', '.join(STATES)}, got {state!r}", USAGE)
    states = list(STATES)
    if dead:
        states = ["DEAD", "REFUSED"]
    if state is not None:
        states = [s for s in states if s == state.upper()]
    with connect(network, as_login) as conn:
        rows = conn.execute(
            """SELECT callback_id, movement_id, event_type, delivery_state, target_name, attempts,
                      next_attempt_at, last_status, last_error
                 FROM callback_deliveries WHERE delivery_state = ANY(%s)
                ORDER BY callback_id DESC LIMIT %s""",
            (states, limit),
        ).fetchall()
    if not rows:
        out.print("no callbacks")
        return
    table = Grid(
        None,
        ["id", "movement", "event", "state", "target", "attempts", "next", "last"],
        text=["target", "last"],
        drop=["attempts", "next", "event"],
        wide=wide,
    )
    for cid, mid, event_type, st, target, attempts, due, status, error in rows:
        last = " ".join(x for x in (str(status) if status else "", error or "") if x)
        table.add_row(
            str(cid), str(mid), event_type, st, target or "", str(attempts), cell(due), last
        )
    show(out, table)


@app.command("replay")
def replay_cmd(
    callback_id: CallbackId,
    reason: Annotated[str, typer.Option("--reason", help="Why it may be sent now.")],
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Send a DEAD or REFUSED callback again, under the same webhook-id (audited)."""
    state = as_operator(network, as_login, procs.replay_callback(callback_id, reason))
    out.print(f"callback {callback_id} {state}: due now, the same webhook-id")
