"""`qtg chains up|status|down` as real processes: the chains outlive `up`, the
state file records them, `status` says what runs, `down` stops them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chain_support import anvil_or_skip

from qtg_runner.chains.local import free_port, pid_alive, read_state, rpc

pytestmark = [pytest.mark.chain, pytest.mark.slow]

QTG = str(Path(sys.executable).with_name("qtg"))


def _qtg(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QTG, "chains", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_up_status_down(tmp_path: Path) -> None:
    anvil_or_skip()
    env = {**os.environ, "QTG_DATA_DIR": str(tmp_path / "pg18"), "COLUMNS": "200"}
    state_dir = tmp_path / "chains"
    base = free_port()
    up = _qtg(env, "up", "--port-base", str(base))
    try:
        assert up.returncode == 0, up.stderr
        chains = read_state(state_dir)
        assert [(c.key, c.chain_id, c.port) for c in chains] == [
            ("local-a", 31337, base),
            ("local-b", 31338, base + 1),
        ]
        assert chains[0].block_time != chains[1].block_time
        for c in chains:
            assert f"{c.key} http://127.0.0.1:{c.port}" in up.stdout
            assert int(rpc(c.rpc_url, "eth_chainId"), 16) == c.chain_id
            code = rpc(c.rpc_url, "eth_getCode", [c.contracts["MockUSDC"], "latest"])
            assert len(code) > 2
        raw = json.loads((state_dir / "state.json").read_text())
        assert {"pid", "port", "rpc_url", "contracts"} <= set(raw["chains"][0])

        # up again leaves the running chains as they are
        again = _qtg(env, "up", "--port-base", str(base))
        assert again.returncode == 0, again.stderr
        assert [c.pid for c in read_state(state_dir)] == [c.pid for c in chains]

        status = _qtg(env, "status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.count("running") == 2
    finally:
        down = _qtg(env, "down")
    assert down.returncode == 0, down.stderr
    assert "local-a stopped" in down.stdout and "local-b stopped" in down.stdout
    assert not any(pid_alive(c.pid) for c in chains)
    assert not (state_dir / "state.json").exists()
    after = _qtg(env, "status")
    assert after.returncode == 0 and "no local chains" in after.stdout
