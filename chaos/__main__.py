"""`python -m chaos` (what `make chaos` runs): every scenario, one table, one summary line.

Environment:
  QTG_CHAOS_SCALE      full (default: 1,000 movements under kills, 300 to 500 in
                       each other scenario) or small (a CI-sized run, a few minutes)
  QTG_CHAOS_SCENARIOS  a subset, e.g. "kills,poison" (default: all, in the order
                       kills, restarts, backends, poison, freezes, failover)
  QTG_CHAOS_SEED       the random seed (default: a new one, printed)
  QTG_CHAOS_OUT        results folder (default chaos/results): chaos.md, chaos.json,
                       and the runners' and servers' logs
  QTG_CHAOS_KEEP       set to keep the servers' temporary data directories

Exit code 0 when every invariant held after every scenario, 1 otherwise. The
last line is always `movements N, duplicates N, stuck N, lost N`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console

from chaos import report
from chaos.cluster import fresh_primary
from chaos.scenarios import SCALES, SCENARIOS, Run, Scale, ScenarioResult, run_one, say

HERE = Path(__file__).resolve().parent


def _scenarios(raw: str) -> list[str]:
    wanted = [s.strip() for s in raw.split(",") if s.strip()] or list(SCENARIOS)
    unknown = [s for s in wanted if s not in SCENARIOS]
    if unknown:
        raise SystemExit(
            f"chaos: unknown scenario {', '.join(unknown)} (use {', '.join(SCENARIOS)})"
        )
    return [s for s in SCENARIOS if s in wanted]  # the failover, if any, last


def _git_commit() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
        )
        return done.stdout.strip()
    return "unknown"


def _run_all(
    root: Path,
    out_dir: Path,
    scale: Scale,
    seed: int,
    names: list[str],
    results: list[ScenarioResult],
    broken: list[str],
) -> str:
    """Every scenario on a fresh server in ``root``; the server's version."""
    with fresh_primary(root) as primary:
        run = Run(primary, out_dir, scale, random.Random(seed))
        say(f"server up in {root}; migrating the template database")
        run.make_template()
        with psycopg.connect(primary.dsn()) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        for name in names:
            try:
                results.append(run_one(run, name))
            except Exception as exc:
                traceback.print_exc()
                broken.append(f"{name}: the harness failed: {type(exc).__name__}: {exc}")
                say(broken[-1])
        with contextlib.suppress(Exception):
            run.clock.reset()
    return str(row[0]) if row else ""


def main() -> int:
    logging.getLogger("yoyo").setLevel(logging.WARNING)
    scale_name = os.environ.get("QTG_CHAOS_SCALE", "full").strip() or "full"
    if scale_name not in SCALES:
        raise SystemExit(f"chaos: QTG_CHAOS_SCALE={scale_name!r} (use {', '.join(SCALES)})")
    scale = SCALES[scale_name]
    names = _scenarios(os.environ.get("QTG_CHAOS_SCENARIOS", ""))
    seed = int(os.environ.get("QTG_CHAOS_SEED", "") or random.randrange(1 << 32))
    out_root = Path(os.environ.get("QTG_CHAOS_OUT", "") or HERE / "results")
    out_dir = out_root / time.strftime("%Y%m%d-%H%M%S")
    keep = bool(os.environ.get("QTG_CHAOS_KEEP", "").strip())
    say(f"scale {scale.name}, scenarios {', '.join(names)}, seed {seed}; results in {out_dir}")

    root = Path(tempfile.mkdtemp(prefix="qtg-chaos-"))
    root.chmod(0o755)  # the server's system user (as root) must reach its data directory
    results: list[ScenarioResult] = []
    broken: list[str] = []
    started = time.monotonic()
    server_version = ""
    try:
        server_version = _run_all(root, out_dir, scale, seed, names, results, broken)
    except Exception as exc:  # the server or the template could not be made
        traceback.print_exc()
        broken.append(f"the harness failed before a scenario ran: {type(exc).__name__}: {exc}")
    finally:
        logs = out_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for server_log in root.glob("*/log"):
            with contextlib.suppress(OSError):
                shutil.copy(server_log, logs / f"server-{server_log.parent.name}.log")
        if keep:
            say(f"kept the servers' data in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    elapsed = time.monotonic() - started
    facts: dict[str, Any] = {
        "scale": scale.name,
        "seed": seed,
        "commit": _git_commit(),
        "cores": os.cpu_count(),
        "postgres": server_version,
        "python": platform.python_version(),
        "wall": f"{elapsed / 60:.1f} min",
    }
    console = Console(width=max(Console().width, 200))
    report.print_table(results, console)
    path = report.write(results, facts, out_dir)
    for line in broken:
        console.print(f"[red]{line}[/red]", highlight=False)
    ok = not broken and all(r.ok for r in results)
    print(
        f"results: {path}; {'every invariant held' if ok else 'INVARIANTS FAILED'}"
        f" ({elapsed / 60:.1f} min, seed {seed})"
    )
    print(report.summary_line(results), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
