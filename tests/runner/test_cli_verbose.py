"""What `qtg` writes to stderr on the embedded server, with and without -v.

Pins: a command says nothing about the embedded server it starts or reuses
(its event=embedded_postgres line is a detail: `qtg -v` shows it), while a
warning still shows without -v (a data directory made with trust, upgraded
to scram-sha-256 on start).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import server_parent_dir
from runner_helpers import QTG, runner_env

from qtg_runner.db.embedded import SUPERUSER, SYSTEM_USER_AS_ROOT, bin_dir, stop_embedded


@pytest.fixture
def trusting_data_dir() -> Iterator[Path]:
    """A data directory as the embedded-postgres library makes it (trust), stopped
    and removed afterwards."""
    parent = server_parent_dir()
    data_dir = parent / "pg18"
    data_dir.mkdir(mode=0o700)
    user = SYSTEM_USER_AS_ROOT if os.geteuid() == 0 else None
    if user is not None:
        shutil.chown(data_dir, user, user)
    subprocess.run(
        [str(bin_dir() / "initdb"), "-D", str(data_dir), "-U", SUPERUSER, "--auth=trust"],
        check=True,
        capture_output=True,
        user=user,
        cwd="/",
    )
    try:
        yield data_dir
    finally:
        stop_embedded(data_dir)
        shutil.rmtree(parent, ignore_errors=True)


def qtg_db_url(data_dir: Path, *verbose: str) -> str:
    """`qtg [-v] db url` on the embedded server of ``data_dir``: its stderr."""
    env = runner_env(None, workers=False, QTG_DATA_DIR=str(data_dir))
    done = subprocess.run(
        [QTG, *verbose, "db", "url"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("postgresql://"), done.stdout
    return done.stderr


@pytest.mark.embedded
def test_the_embedded_servers_line_only_with_verbose(trusting_data_dir: Path) -> None:
    started = qtg_db_url(trusting_data_dir)
    assert "event=embedded_postgres action=upgraded_from_trust" in started  # a warning stays
    assert [line for line in started.splitlines() if "WARNING" not in line] == [], started

    assert qtg_db_url(trusting_data_dir) == ""

    verbose = qtg_db_url(trusting_data_dir, "-v")
    assert "DEBUG qtg.db event=embedded_postgres action=reused" in verbose
    assert f"data_dir={trusting_data_dir}" in verbose
