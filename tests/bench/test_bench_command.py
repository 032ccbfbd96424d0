"""`python -m benchmarks`'s command line: --help explains and runs nothing, and a
setting it cannot use is refused in one line before any server starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QTG_BENCH_")}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_says_what_runs_and_starts_nothing() -> None:
    done = bench("--help")
    assert done.returncode == 0, done.stderr
    assert "QTG_BENCH_CASES" in done.stdout
    assert "8 calls at the wire" in done.stdout
    assert "[bench" not in done.stdout + done.stderr  # no cluster, no case


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (("--cases", "1"), {}, "no arguments are taken (--cases 1)"),
        ((), {"QTG_BENCH_CASES": "1,9"}, "QTG_BENCH_CASES is '1,9'"),
        ((), {"QTG_BENCH_CASES": " , "}, "QTG_BENCH_CASES is ','"),
        ((), {"QTG_BENCH_JOBS": "20k"}, "QTG_BENCH_JOBS is '20k': give a whole number above 0"),
        ((), {"QTG_BENCH_EG_JOBS": "0"}, "QTG_BENCH_EG_JOBS is 0: give a whole number above 0"),
    ],
)
def test_a_setting_it_cannot_use_is_refused_before_anything_runs(
    args: tuple[str, ...], env: dict[str, str], said: str
) -> None:
    done = bench(*args, **env)
    assert done.returncode == 2
    assert said in done.stderr
    assert done.stderr.count("\n") == 1
    assert "[bench" not in done.stdout + done.stderr
