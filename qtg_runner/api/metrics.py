"""/metrics: the dashboard views in the Prometheus text format (0.0.4).

Every figure is read from a view of the network (pipeline_counts,
in_flight_nodes, stuck_nodes, stalled_workers, callback_backlog,
lane_latency), never recomputed here, by the scraper's own login: a
reader login (`qtg reader add prometheus`) is enough and is what a scraper
should be given (Prometheus's basic_auth or authorization in its scrape
config). The API holds no login of its own to read them with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

QUERIES: list[tuple[str, str, str, Sequence[str], str]] = [
    # name, help, query (label columns first, then the value), label names
    (
        "qtg_movements",
        "Movements by state (pipeline_counts).",
        "SELECT state, total FROM pipeline_counts WHERE entity = 'movement'",
        ("state",),
        "gauge",
    ),
    (
        "qtg_nodes",
        "Nodes by state (pipeline_counts).",
        "SELECT state, total FROM pipeline_counts WHERE entity = 'node'",
        ("state",),
        "gauge",
    ),
    (
        "qtg_nodes_in_flight",
        "Nodes with a side effect in flight, by lane and state (in_flight_nodes).",
        "SELECT lane, node_state::text, count(*) FROM in_flight_nodes GROUP BY 1, 2",
        ("lane", "state"),
        "gauge",
    ),
    (
        "qtg_nodes_stuck",
        "Nodes stuck, by lane and state (stuck_nodes).",
        "SELECT lane, node_state::text, count(*) FROM stuck_nodes GROUP BY 1, 2",
        ("lane", "state"),
        "gauge",
    ),
    (
        "qtg_workers_stalled",
        "Live workers that missed two expected ticks (stalled_workers).",
        "SELECT worker_name, count(*) FROM stalled_workers GROUP BY 1",
        ("worker",),
        "gauge",
    ),
    (
        "qtg_callbacks_pending",
        "Callbacks waiting for delivery, per target (callback_backlog).",
        "SELECT target_name, pending FROM callback_backlog",
        ("target",),
        "gauge",
    ),
    (
        "qtg_callbacks_due",
        "Callbacks due now, per target (callback_backlog).",
        "SELECT target_name, due_now FROM callback_backlog",
        ("target",),
        "gauge",
    ),
    (
        "qtg_callbacks_dead",
        "Dead-lettered callbacks, per target (callback_backlog, dead_callbacks).",
        "SELECT target_name, dead FROM callback_backlog",
        ("target",),
        "gauge",
    ),
    (
        "qtg_callbacks_refused",
        "Callbacks refused (no registered target), per target (callback_backlog).",
        "SELECT target_name, refused FROM callback_backlog",
        ("target",),
        "gauge",
    ),
    (
        "qtg_callbacks_oldest_pending_seconds",
        "Age of the oldest pending callback, per target (callback_backlog).",
        "SELECT target_name, extract(epoch FROM oldest_pending_for) FROM callback_backlog"
        " WHERE oldest_pending_for IS NOT NULL",
        ("target",),
        "gauge",
    ),
    (
        "qtg_lane_completed",
        "Nodes completed per lane over the last day (lane_latency).",
        "SELECT lane, completed FROM lane_latency",
        ("lane",),
        "gauge",
    ),
    (
        "qtg_lane_latency_seconds",
        "Seconds from submit to completion per lane over the last day, by quantile"
        " (lane_latency: p50, p95, p99, max as quantile 1).",
        "SELECT lane, q, v FROM lane_latency CROSS JOIN LATERAL (VALUES ('0.5', p50_seconds),"
        " ('0.95', p95_seconds), ('0.99', p99_seconds), ('1', max_seconds)) AS x(q, v)",
        ("lane", "quantile"),
        "gauge",
    ),
    (
        "qtg_lane_baseline_seconds",
        "The lane's baseline, beside its latency (lane_latency).",
        "SELECT lane, baseline_seconds FROM lane_latency",
        ("lane",),
        "gauge",
    ),
]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: Any) -> str:
    if value is None:
        return "NaN"
    return repr(float(value))


def _family(
    name: str,
    help_text: str,
    kind: str,
    labels: Sequence[str],
    rows: Iterable[tuple[Any, ...]],
    network: str,
) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for row in rows:
        values = [("network", network), *zip(labels, (str(v) for v in row[:-1]), strict=True)]
        rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in values)
        lines.append(f"{name}{{{rendered}}} {_number(row[-1])}")
    return lines


async def render(conn: psycopg.AsyncConnection[Any], network: str) -> str:
    """Every family, read in one REPEATABLE READ transaction (one snapshot)."""
    lines: list[str] = []
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        for name, help_text, query, labels, kind in QUERIES:
            cur = await conn.execute(query)
            lines += _family(name, help_text, kind, labels, await cur.fetchall(), network)
    lines += _family(
        "qtg_up",
        "The API reached the database as the scraper's login.",
        "gauge",
        (),
        [(1,)],
        network,
    )
    return "\n".join(lines) + "\n"
