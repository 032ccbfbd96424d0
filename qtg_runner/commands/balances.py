"""`qtg balances list|acknowledge`: the treasury's balances against the engine's
records, as an operator.

The balance_snapshot sidecar reads every treasury account and every venue's
FUND account; verify_drift_worker compares each read with the range the
engine's records expect (the balance_status view) and raises a drift alert
when the balance leaves it (the drift_alerts view). `list` shows both;
`acknowledge ID --reason R` is one operator's half of accepting a drifted
balance (acknowledge_drift_alert: a second operator's call re-baselines the
account). Both log in as the person (their own DSN in QTG_DATABASE_URL, or
--as NAME).
"""

from __future__ import annotations

from typing import Annotated

import typer

from qtg_runner.commands.common import BIGINT_MAX, AsOption, NetworkOption
from qtg_runner.commands.movement import connect, out, rows_table
from qtg_runner.db import procs

app = typer.Typer(
    help="The treasury's balances against the engine's records; drift alerts.",
    no_args_is_help=True,
)

AlertId = Annotated[int, typer.Argument(min=1, max=BIGINT_MAX, help="Drift alert id.")]


@app.command("list")
def list_cmd(network: NetworkOption = None, as_login: AsOption = None) -> None:
    """Each account's latest balance, the range the engine expects, and the drift alerts."""
    with connect(network, as_login) as conn:
        out.print(
            rows_table(
                conn.execute(
                    "SELECT account_kind, account_key, address, asset, balance, expected_low,"
                    " expected_high, block_number, read_started_at, latest_read_error,"
                    " open_alert_id FROM balance_status"
                ),
                "balances (latest successful read; expected from the engine's records)",
            )
        )
        out.print(
            rows_table(
                conn.execute(
                    "SELECT alert_id, alert_state, account_key, address, actual, expected_low,"
                    " expected_high, unexplained, raised_at, breakers, ack_requested_by,"
                    " acknowledged_by FROM drift_alerts LIMIT 50"
                ),
                "drift alerts",
            )
        )


@app.command("acknowledge")
def acknowledge_cmd(
    alert_id: AlertId,
    reason: Annotated[str, typer.Option("--reason", help="What explains the drift.")],
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Accept a drifted balance: the first operator asks, a second re-baselines it."""
    with connect(network, as_login, operator=True) as conn:
        state = procs.acknowledge_drift_alert(alert_id, reason).one(conn)
    out.print(
        f"drift alert {alert_id} {state}"
        + (": a second operator confirms it" if state == "ACK_REQUESTED" else ": re-baselined")
    )
