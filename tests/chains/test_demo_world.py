"""`qtg demo` on the local outside world, as `make run` runs it, on a fresh
embedded server and fresh local chains on free ports, then again, then after
`qtg world down` and `qtg db stop`: every time every movement ends as
it should (a lost receipt recovered from chain evidence after its dispatcher
was killed right after the broadcast, a fan-out over both chains, a path
refused before anything is signed), each transaction hash is printed, and the
demo's own check of every treasury balance against what the movements moved
passes; a local receiver got one signed callback per movement state change,
and the audit chain verifies. `qtg world down` stops what it started."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from chain_support import anvil_or_skip, light_keystore
from conftest import server_parent_dir
from readme_session import run_readme_session
from runner_helpers import assert_demo_sidecars, runner_env

from qtg_runner.db.embedded import stop_embedded
from qtg_runner.ports import free_port_base

pytestmark = [pytest.mark.chain, pytest.mark.slow]

QTG = str(Path(sys.executable).with_name("qtg"))


def demo_run(env: dict[str, str], port_base: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QTG, "demo", "--port-base", str(port_base), "--timeout", "240"],
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )


def unexpected_log_lines(shown: str) -> list[str]:
    """The WARNING and ERROR lines of a demo's output but for the refusals of the
    movements it says are meant to fail."""
    meant = re.search(r"movements ([0-9, ]+) are meant to end", shown)
    failing = set(meant.group(1).replace(" ", "").split(",")) if meant else set()
    unexpected = []
    for line in shown.splitlines():
        if not re.match(r"\d{4}-\d\d-\d\d [\d:,.]+ (WARNING|ERROR) ", line):
            continue
        refusal = re.search(r"event=(?:prepare|submit)_failed .*? movement=(\d+) ", line)
        if refusal is None or refusal.group(1) not in failing:
            unexpected.append(line)
    return unexpected


def test_the_demo_moves_real_usdc_again_and_again_and_after_a_stop() -> None:
    """Three runs as a newcomer makes them: the first on a fresh server, then
    README's five-minute session on what it left (tests/readme_session.py), the
    second in a row (no ERROR, no warning to act on: nothing the demo or the
    session did reads as drift or takes a nonce), the third after `qtg world
    down` and `qtg db stop` (the world starts afresh, and the demo's database
    with it)."""
    anvil_or_skip()
    parent = server_parent_dir()
    data_dir = parent / "pg18"
    light_keystore(parent / "chains")
    env = runner_env(None, QTG_DATA_DIR=str(data_dir), COLUMNS="200")
    port_base = free_port_base(4)
    runs = []
    try:
        runs.append(demo_run(env, port_base))
        assert runs[0].returncode == 0, runs[0].stdout + runs[0].stderr
        # README's session as printed, on what this first run left; the gate
        # as a newcomer's shell has it: unset
        run_readme_session(parent, {k: v for k, v in env.items() if k != "MG_WORKERS_ENABLED"})
        runs.append(demo_run(env, port_base))
        for stop in (["world", "down"], ["db", "stop"]):
            done = subprocess.run([QTG, *stop], env=env, capture_output=True, timeout=120)
            assert done.returncode == 0, done.stderr
        runs.append(demo_run(env, port_base))
    finally:
        subprocess.run([QTG, "world", "down"], env=env, capture_output=True, timeout=120)
        stop_embedded(data_dir)
        shutil.rmtree(parent, ignore_errors=True)
    for demo in runs:
        shown = demo.stdout + demo.stderr
        assert demo.returncode == 0, shown
        assert "every balance moved by exactly what they moved" in demo.stdout, shown
        assert_demo_sidecars(demo.stdout, {"completed": 6, "failed": 3})
        # it ends by saying how to look around, as the two operators
        assert "db psql --login alice" in demo.stdout and "operator password alice" in demo.stdout
    first, second, third = (run.stdout + run.stderr for run in runs)
    hashes = re.findall(r"tx local-[ab] (0x[0-9a-f]{64})", first)
    assert len(hashes) == len(set(hashes)) >= 5, first
    # the lost receipt: the node went from SUBMITTING to COMPLETED through recovery
    assert re.search(r"pay \(evm_transfer\): READY -> SUBMITTING -> .*\(recovery\)", first)
    assert "QT032" in first  # the refused path says why
    assert "below the node's minimum" in first  # as does the one the bridge refused
    assert unexpected_log_lines(first) == []
    assert unexpected_log_lines(second) == [], second
    assert "Before the demo started" not in second  # no drift of its own making
    assert "started afresh" not in second
    # after the stop: the database is started afresh with the world, said in words
    assert "The local chains were started afresh" in third, third
    assert unexpected_log_lines(third) == [], third
