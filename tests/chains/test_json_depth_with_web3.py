"""web3's py_ecc raises the process's recursion limit to 100000 when it is
imported: JSON nested deeply must still be refused as one line by qtg's JSON
reader (a RecursionError), not crash the process in the C decoder."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.chain

SCRIPT = """
import sys
import web3  # noqa: F401  (raises the recursion limit)
assert sys.getrecursionlimit() >= 100000, sys.getrecursionlimit()
import typer
from qtg_runner.commands.common import loads
try:
    loads("[" * 200000 + "]" * 200000, "plan")
except typer.BadParameter as exc:
    print("refused:", exc.format_message())
assert sys.getrecursionlimit() >= 100000
"""


def test_deep_json_is_refused_after_web3_is_imported() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "plan is nested too deeply" in result.stdout
