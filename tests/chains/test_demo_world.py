"""`qtg demo` on the local outside world, as `make run` runs it, on a fresh
embedded server and fresh local chains on free ports: every movement ends as
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
from runner_helpers import assert_demo_sidecars, runner_env

from qtg_runner.chains.local import free_port_base
from qtg_runner.db.embedded import stop_embedded

pytestmark = [pytest.mark.chain, pytest.mark.slow]

QTG = str(Path(sys.executable).with_name("qtg"))


def test_the_demo_moves_real_usdc_and_checks_every_balance() -> None:
    anvil_or_skip()
    parent = server_parent_dir()
    data_dir = parent / "pg18"
    light_keystore(parent / "chains")
    env = runner_env(None, QTG_DATA_DIR=str(data_dir), COLUMNS="200")
    try:
        demo = subprocess.run(
            [QTG, "demo", "--port-base", str(free_port_base(4)), "--timeout", "240"],
            env=env,
            capture_output=True,
            text=True,
            timeout=420,
        )
    finally:
        subprocess.run([QTG, "world", "down"], env=env, capture_output=True, timeout=120)
        stop_embedded(data_dir)
        shutil.rmtree(parent, ignore_errors=True)
    shown = demo.stdout + demo.stderr
    assert demo.returncode == 0, shown
    assert "every balance moved by exactly what they moved" in demo.stdout, shown
    hashes = re.findall(r"tx local-[ab] (0x[0-9a-f]{64})", demo.stdout)
    assert len(hashes) == len(set(hashes)) >= 5, shown
    # the lost receipt: the node went from SUBMITTING to COMPLETED through recovery
    assert re.search(r"pay \(evm_transfer\): READY -> SUBMITTING -> .*\(recovery\)", demo.stdout)
    assert "QT032" in demo.stdout  # the refused path says why
    assert "below the node's minimum" in demo.stdout  # as does the one the bridge refused
    # every state change of the 9 movements reported to the demo's receiver, signed;
    # the audit chain promoted and verified
    assert_demo_sidecars(demo.stdout, {"completed": 6, "failed": 3})
