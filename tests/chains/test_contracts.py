"""The committed contract artifacts (contracts/build/) are what `make contracts`
makes from the sources with the pinned solc-js: a fresh compile equals them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from chain_support import SKIP_PREFIX, node_or_skip

from qtg_world.chains.local import CONTRACTS_BUILD, REPO_ROOT

pytestmark = pytest.mark.chain


def test_committed_artifacts_equal_a_fresh_compile(tmp_path: Path) -> None:
    node = node_or_skip()
    if not (REPO_ROOT / "node_modules" / "solc").is_dir():
        pytest.skip(f"{SKIP_PREFIX}: solc-js is not installed (`make install` runs npm ci)")
    subprocess.run(
        [node, str(REPO_ROOT / "contracts" / "compile.mjs"), str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    fresh = sorted(p.name for p in tmp_path.glob("*.json"))
    committed = sorted(p.name for p in CONTRACTS_BUILD.glob("*.json"))
    assert fresh == committed and "MockUSDC.json" in fresh
    for name in fresh:
        assert (tmp_path / name).read_text() == (CONTRACTS_BUILD / name).read_text(), (
            f"contracts/build/{name} differs from a fresh compile: run `make contracts`"
        )


def test_the_pinned_compiler_is_the_one_that_compiled() -> None:
    pinned = json.loads((REPO_ROOT / "package.json").read_text())["devDependencies"]["solc"]
    artifact = json.loads((CONTRACTS_BUILD / "MockUSDC.json").read_text())
    assert artifact["compiler"].startswith(f"solc-js {pinned}+")
    # the source pins the same version
    assert f"pragma solidity {pinned};" in (REPO_ROOT / "contracts" / "MockUSDC.sol").read_text()
