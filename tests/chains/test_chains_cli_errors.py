"""`qtg chains` (and `qtg world env`) where a chain cannot be had: one `qtg:
error:` line, exit 1, nothing started and no state file (no anvil is needed for
these)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.chain

QTG = str(Path(sys.executable).with_name("qtg"))


def _qtg(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QTG, "chains", *args],
        env={**os.environ, "QTG_DATA_DIR": str(tmp_path / "pg18"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_up_without_anvil_is_one_error_line_and_starts_nothing(tmp_path: Path) -> None:
    result = _qtg(tmp_path, "up", "--no-registry", QTG_ANVIL=str(tmp_path / "no-anvil"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"qtg: error: QTG_ANVIL={tmp_path / 'no-anvil'} is not an executable file"
    ]
    assert not (tmp_path / "chains" / "state.json").exists()


def test_status_and_down_with_nothing_started(tmp_path: Path) -> None:
    status = _qtg(tmp_path, "status")
    assert status.returncode == 0 and "no local chains" in status.stdout
    down = _qtg(tmp_path, "down")
    assert down.returncode == 0 and "no local chains were recorded" in down.stdout


def test_an_unreadable_state_file_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "chains").mkdir()
    (tmp_path / "chains" / "state.json").write_text("{not json")
    result = _qtg(tmp_path, "status")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("qtg: error: the chains' state file") and "unreadable" in line


def test_world_env_with_no_world_is_one_error_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [QTG, "world", "env"],
        env={**os.environ, "QTG_DATA_DIR": str(tmp_path / "pg18")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"qtg: error: no local outside world recorded in {tmp_path / 'chains'}: `qtg world up`"
    ]
