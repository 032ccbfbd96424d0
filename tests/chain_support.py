"""What the chain tests share (tests/chains): the test chains' specs, the skips
where anvil or node is missing (one prefix, which the summary line counts), and
the session fixture `local_chains`, started once by the same code as
`qtg chains up` (qtg_runner.chains.local) on free loopback ports in a temporary
state directory and stopped at the end. tests/conftest.py imports the fixture
and the summary hook (a conftest of tests/chains/ would shadow the bare
`conftest` module the other folders import)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from qtg_runner.chains.local import (
    AnvilNotFound,
    ChainSpec,
    RunningChain,
    find_anvil,
    free_port,
    start_chains,
    stop_chains,
)

TEST_CHAINS = (("test-a", 31401, 1), ("test-b", 31402, 2))
"""(key, chain id, block time in seconds): two chains, each its own id and pace."""

SKIP_PREFIX = "chain tests need anvil"


def anvil_or_skip() -> Path:
    try:
        return find_anvil()
    except AnvilNotFound as exc:
        pytest.skip(f"{SKIP_PREFIX}: {exc}")


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip(f"{SKIP_PREFIX}: node is not on PATH (solc-js runs on node)")
    return node


@pytest.fixture(scope="session")
def local_chains() -> Iterator[list[RunningChain]]:
    anvil = anvil_or_skip()
    state_dir = Path(tempfile.mkdtemp(prefix="qtg-chains-"))
    specs = [ChainSpec(key, chain_id, free_port(), bt) for key, chain_id, bt in TEST_CHAINS]
    try:
        yield start_chains(state_dir, specs, anvil=anvil)
    finally:
        stop_chains(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line saying how many chain tests were skipped for want of anvil/node."""
    skipped = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if isinstance(r.longrepr, tuple) and SKIP_PREFIX in str(r.longrepr[2])
    ]
    if skipped:
        terminalreporter.write_line(
            f"chain tests skipped: {len(skipped)} (anvil/node not installed: "
            "`make install` installs them from npm when node and npm are on the machine)",
            yellow=True,
        )
