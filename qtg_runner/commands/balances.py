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
from psycopg import sql

from qtg_runner.commands.common import BIGINT_MAX, AsOption, NetworkOption
from qtg_runner.commands.movement import as_operator, connect, out, rows_table
from qtg_runner.commands.tables import WideOption, show
from qtg_runner.db import procs

app = typer.Typer(
    help="The treasury's balances against the engine's records; drift alerts.",
    no_args_is_help=True,
)

EXPECTED = sql.SQL(
    "CASE WHEN expected_low = expected_high THEN trim_scale(expected_low)::text"
    " ELSE trim_scale(expected_low) || ' to ' || trim_scale(expected_high) END AS expected"
)
"""The range the engine's records expect a balance in, as one column: one
amount when the range is one, else 'LOW to HIGH'."""

AlertId = Annotated[int, typer.Argument(min=1, max=BIGINT_MAX, help="Drift alert id.")]


@app.command("list")
def list_cmd(
    wide: WideOption = False, network: NetworkOption = None, as_login: AsOption = None
) -> None:
    """Each account's latest balance, the range the engine expects, and the drift alerts."""
    with connect(network, as_login) as conn:
        show(
            out,
            rows_table(
                conn.execute(
                    sql.SQL(
                        "SELECT account_kind, account_key, address, asset, balance, {},"
                        " block_number, read_started_at, latest_read_error, open_alert_id"
                        " FROM balance_status"
                    ).format(EXPECTED)
                ),
                "balances (latest successful read; expected from the engine's records)",
                text=["latest_read_error"],
                drop=[
                    "block_number",
                    "read_started_at",
                    "account_kind",
                    "asset",
                    "latest_read_error",
                    "open_alert_id",
                    "account_key",
                ],
                wide=wide,
            ),
            rows_table(
                conn.execute(
                    sql.SQL(
                        "SELECT alert_id, alert_state, account_key, address, actual, {},"
                        " unexplained, raised_at, breakers, ack_requested_by, acknowledged_by"
                        " FROM drift_alerts LIMIT 50"
                    ).format(EXPECTED)
                ),
                "drift alerts",
                text=["breakers"],
                drop=[
                    "acknowledged_by",
                    "ack_requested_by",
                    "breakers",
                    "raised_at",
                    "expected",
                    "account_key",
                ],
                wide=wide,
            ),
        )


@app.command("acknowledge")
def acknowledge_cmd(
    alert_id: AlertId,
    reason: Annotated[str, typer.Option("--reason", help="What explains the drift.")],
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Accept a drifted balance: the first operator asks, a second re-baselines it."""
    state = as_operator(network, as_login, procs.acknowledge_drift_alert(alert_id, reason))
    out.print(
        f"drift alert {alert_id} {state}"
        + (": a second operator confirms it" if state == "ACK_REQUESTED" else ": re-baselined")
    )
