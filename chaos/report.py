"""The run's table (terminal and markdown), its JSON, and the summary line."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from chaos.scenarios import ScenarioResult

COLUMNS = (
    "scenario",
    "faults",
    "tried",
    "created",
    "terminal",
    "in flight",
    "duplicates",
    "submits per key",
    "stuck",
    "lost",
    "violations",
    "time to settle",
    "claims recovered",
    "runner exits",
    "invariants",
)


def _settle(r: ScenarioResult) -> str:
    s = r.settle
    text = f"{s.engine_seconds:.0f} s"
    if s.advanced_seconds:
        text += f" ({s.advanced_seconds:.0f} s by clock)"
    return text if s.settled else f"not settled: {s.open_left} open after {text}"


def _exits(r: ScenarioResult) -> str:
    parts = [f"{r.kills} killed"] if r.kills else []
    parts += [f"{n} {how}" for how, n in sorted(r.exits.items())]
    if r.crashes:
        parts.append("crashes: " + ", ".join(f"{n} {err}" for err, n in sorted(r.crashes.items())))
    return "; ".join(parts) or "0"


def row(r: ScenarioResult) -> list[str]:
    c = r.check
    violations = sum(c.violations.values()) - c.stuck - c.lost - c.duplicates
    return [
        r.name,
        r.faults,
        str(c.tried),
        str(c.created),
        str(c.terminal),
        str(c.in_flight),
        str(c.duplicates),
        f"{c.resubmits} keys > 1, max {c.most_submits}" if c.resubmits else "1",
        str(c.stuck),
        str(c.lost),
        str(violations),
        _settle(r),
        r.claims.recovered_text(),
        _exits(r),
        "ok" if c.ok else "FAILED: " + ", ".join(c.failed()),
    ]


def summary_line(results: list[ScenarioResult]) -> str:
    return (
        f"movements {sum(r.check.created for r in results)}, "
        f"duplicates {sum(r.check.duplicates for r in results)}, "
        f"stuck {sum(r.check.stuck for r in results)}, "
        f"lost {sum(r.check.lost for r in results)}"
    )


def print_table(results: list[ScenarioResult], console: Console) -> None:
    table = Table(title="chaos: invariants after each scenario", title_justify="left")
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for r in results:
        table.add_row(*row(r), style=None if r.ok else "red")
    console.print(table)
    for r in results:
        for line in r.check.describe():
            console.print(f"[red]{r.name}: {line}[/red]", highlight=False)
        for note in r.notes:
            console.print(f"{r.name}: {note}", highlight=False)
        for error in r.feed_errors[:5]:
            console.print(f"{r.name}: feed: {error}", highlight=False)


def markdown(results: list[ScenarioResult], facts: dict[str, Any]) -> str:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "| " + " | ".join("---" for _ in COLUMNS) + " |",
    ]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row(r)) + " |" for r in results]
    lines.append("")
    for r in results:
        for line in r.check.describe():
            lines.append(f"- {r.name}: {line}")
        for note in r.notes:
            lines.append(f"- {r.name}: {note}")
    lines += ["", summary_line(results), ""]
    lines.append(", ".join(f"{k}: {v}" for k, v in facts.items()))
    return "\n".join(lines) + "\n"


def write(results: list[ScenarioResult], facts: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "facts": facts,
        "summary": summary_line(results),
        "scenarios": [
            {
                "name": r.name,
                "faults": r.faults,
                "ok": r.ok,
                "check": asdict(r.check),
                "settle": asdict(r.settle) | {"engine_seconds": r.settle.engine_seconds},
                "chaos_seconds": round(r.chaos_seconds, 1),
                "kills": r.kills,
                "exits": dict(r.exits),
                "crashes": dict(r.crashes),
                "notes": r.notes,
                "feed_errors": r.feed_errors,
                "claims": asdict(r.claims),
            }
            for r in results
        ],
    }
    (out_dir / "chaos.json").write_text(json.dumps(data, indent=2, default=str))
    path = out_dir / "chaos.md"
    path.write_text(markdown(results, facts))
    return path
