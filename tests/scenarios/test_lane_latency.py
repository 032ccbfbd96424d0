"""lane_latency: per lane, how long the nodes that completed in the last day
took from their side effect to completion (p50 / p95 / p99 / max, in
seconds), beside the lane's baseline. Nodes still in flight, failed ones and
those that finished more than a day ago are not counted."""

from __future__ import annotations

from decimal import Decimal

from engine import add_lanes, claim, create_started, node, observe, plan, submit
from rows import Conn, set_clock

from qtg_runner.db import procs


def run_node(conn: Conn, lane: str, name: str, start: float, took: float, outcome: str) -> None:
    set_clock(conn, start)
    create_started(conn, plan(node("a", lane=lane)), name)
    [claimed] = claim(conn)
    submit(conn, claimed)
    set_clock(conn, start + took)
    assert observe(conn, claimed["node_id"], outcome) is not None


def test_percentiles_per_lane_from_the_last_days_completions(conn: Conn) -> None:
    add_lanes(conn, "fast", "slow", baseline=1)
    procs.upsert_lane_baseline("slow", 600).one(conn)
    run_node(conn, "fast", "old", 0, 50, "COMPLETED")  # more than a day before the reading
    day = 86_400
    for i, took in enumerate([1, 2, 3, 4, 10]):
        run_node(conn, "fast", f"f{i}", day + 100 * i, took, "COMPLETED")
    run_node(conn, "fast", "failed", day + 900, 99, "FAILED")
    run_node(conn, "slow", "s0", day + 1000, 700, "COMPLETED")
    set_clock(conn, day + 2000)
    rows = conn.execute(
        "SELECT lane, completed, p50_seconds, p95_seconds, p99_seconds, max_seconds,"
        " baseline_seconds FROM lane_latency ORDER BY lane"
    ).fetchall()
    assert rows == [
        ("fast", 5, Decimal("3.000"), Decimal("8.800"), Decimal("9.760"), Decimal("10.000"), 1),
        ("slow", 1, Decimal("700.000"), Decimal("700.000"), Decimal("700.000"),
         Decimal("700.000"), 600),
    ]  # fmt: skip


def test_qtg_status_shows_the_lanes(conn: Conn) -> None:
    from rich.console import Console

    from qtg_runner.commands.status import render

    add_lanes(conn, "fast", baseline=1)
    run_node(conn, "fast", "f", 0, 2, "COMPLETED")
    console = Console(record=True, width=200)
    console.print(render(conn))
    shown = console.export_text()
    assert "lane latency, last day" in shown
    rows = [line.split("│")[1:4] for line in shown.splitlines() if "│ fast " in line]
    assert [[cell.strip() for cell in row] for row in rows] == [["fast", "1", "2"]]
