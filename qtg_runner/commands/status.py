"""`qtg status`: the dashboard views as live terminal tables."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
import typer
from psycopg import sql
from rich.console import Group
from rich.live import Live

from qtg_runner.commands.balances import EXPECTED
from qtg_runner.commands.common import AsOption, NetworkOption, finite
from qtg_runner.commands.movement import connect, out, rows_table
from qtg_runner.commands.tables import Grid, WideOption, show


def pipeline_table(conn: psycopg.Connection[Any], wide: bool = False) -> Grid:
    rows = conn.execute(
        "SELECT entity, state, total FROM pipeline_counts ORDER BY entity DESC, state"
    ).fetchall()
    table = Grid("pipeline", ["entity", "state", "count"], right=["count"], wide=wide)
    for entity, state, total in rows:
        table.add_row(entity, state, str(total))
    return table


@dataclass(frozen=True)
class _View:
    """One dashboard view shown as a table: its query, its title, its free-text
    columns and the ones left out first when the terminal is too narrow."""

    query: str | sql.Composed
    title: str
    text: Sequence[str] = ()
    drop: Sequence[str] = ()


_VIEWS: dict[str, _View] = {
    "in_flight": _View(
        "SELECT node_id, movement_id, node_key, lane, node_state, observe_phase, observe_count,"
        " next_observe_at, in_flight_for FROM in_flight_nodes ORDER BY node_id LIMIT %s",
        "in-flight nodes",
        text=["node_key"],
        drop=["observe_count", "observe_phase", "lane", "next_observe_at"],
    ),
    "workers": _View(
        "SELECT worker_name, instance_id, tier, status, last_tick_at,"
        " expected_interval_seconds,"
        " ticks, last_processed, consecutive_errors, last_error"
        " FROM worker_status"
        # instances that stopped cleanly drop out after ten minutes
        " WHERE status <> 'stopped' OR last_tick_at > qtg.clock() - interval '10 minutes'"
        " ORDER BY worker_name, instance_id",
        "workers",
        text=["instance_id", "last_error"],
        drop=["expected_interval_seconds", "tier", "ticks", "last_processed", "instance_id"],
    ),
    "stuck": _View(
        "SELECT node_id, movement_id, node_key, node_state, reason, stuck_for"
        " FROM stuck_nodes ORDER BY node_id LIMIT 10",
        "stuck nodes",
        text=["node_key", "reason"],
        drop=["movement_id"],
    ),
    "executors": _View(
        "SELECT executor_key, status, holding_claims, ready_nodes, checked_at,"
        " left(detail::text, 120) AS detail FROM executor_status ORDER BY executor_key",
        "executors (a DOWN one's nodes stay READY)",
        text=["detail"],
        drop=["checked_at"],
    ),
    "limits": _View(
        "SELECT scope, name, in_flight, max_in_flight, started_today, max_per_day,"
        " max_per_movement, breaker, tripped_because, reset_requested_by"
        " FROM value_limit_status ORDER BY scope, name",
        "value limits and breakers (limit_held_nodes() lists the nodes they hold)",
        text=["tripped_because"],
        drop=["reset_requested_by", "max_per_movement", "started_today", "max_per_day"],
    ),
    "latency": _View(
        "SELECT lane, completed, p50_seconds, p95_seconds, p99_seconds, max_seconds,"
        " baseline_seconds FROM lane_latency ORDER BY lane",
        "lane latency, last day (seconds from submit to completion)",
        drop=["p99_seconds", "max_seconds"],
    ),
    "callbacks": _View(
        "SELECT target_name, pending, due_now, attempted, oldest_pending_for, dead, refused"
        " FROM callback_backlog ORDER BY target_name",
        "callbacks not delivered (dead_callbacks lists the dead; qtg callbacks replay ID)",
    ),
    "drift": _View(
        sql.SQL(
            "SELECT alert_id, account_kind, account_key, address, actual, {}, unexplained,"
            " raised_at, breakers, ack_requested_by"
            " FROM drift_alerts WHERE alert_state = 'OPEN'"
        ).format(EXPECTED),
        "open drift alerts (qtg balances list; two operators: qtg balances acknowledge ID)",
        text=["breakers"],
        drop=[
            "ack_requested_by",
            "account_kind",
            "breakers",
            "raised_at",
            "expected",
            "account_key",
        ],
    ),
}
"""The views of `qtg status` after the pipeline's, in the order they are read."""

_SHOWN = ("in_flight", "workers", "executors", "limits", "drift", "stuck", "latency", "callbacks")
"""The order they are shown in, below the pipeline's."""


def render(conn: psycopg.Connection[Any], in_flight_limit: int = 15, wide: bool = False) -> Group:
    """Every table of `qtg status`, each fitted to the width it is printed in
    (commands/tables.py), or in full with ``wide``."""
    tables = {
        name: rows_table(
            conn.execute(view.query, (in_flight_limit,) if name == "in_flight" else None),
            view.title,
            text=view.text,
            drop=view.drop,
            wide=wide,
        )
        for name, view in _VIEWS.items()
    }
    return Group(pipeline_table(conn, wide), *(tables[name] for name in _SHOWN))


def status_cmd(
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    interval: Annotated[
        float, typer.Option(min=0.2, max=3600, help="Seconds between refreshes with --watch.")
    ] = 1.0,
    wide: WideOption = False,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Pipeline counts, in-flight nodes (phase, next observation), workers and stuck nodes."""
    finite(interval, "--interval", 0.2, 3600)
    with connect(network, as_login) as conn:
        if not watch:
            show(out, render(conn, wide=wide))
            return
        try:
            with Live(render(conn, wide=wide), console=out, refresh_per_second=4) as live:
                while True:
                    time.sleep(interval)
                    live.update(render(conn, wide=wide))
        except KeyboardInterrupt:
            pass
