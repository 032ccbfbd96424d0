"""What the chain tests share (tests/chains): the test chains' specs, the skips
where anvil or node is missing (one prefix, which the summary line counts), and
the session fixtures: `local_chain_set`, the chains started once by the same code
as `qtg chains up` (qtg_runner.chains) on free loopback ports in a temporary
state directory, with its treasury keys in an encrypted keystore there (scrypt
n=2^10 instead of 2^18, so loading a signer takes milliseconds) and funded on
each chain, stopped at the end; `local_chains`, its chains alone.
tests/conftest.py imports the fixtures and the summary hook (a conftest of
tests/chains/ would shadow the bare `conftest` module the other folders
import)."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from qtg_runner.ports import free_port
from qtg_world.chains.keys import LocalKey, ensure_treasury_keys
from qtg_world.chains.local import (
    AnvilNotFound,
    ChainSpec,
    RunningChain,
    find_anvil,
    rpc,
    runner_env,
    stop_chains,
)
from qtg_world.chains.registry import prepare_treasury
from qtg_world.chains.start import start_chains

TEST_CHAINS = (("test-a", 31401, 1), ("test-b", 31402, 2))
"""(key, chain id, block time in seconds): two chains, each its own id and pace."""

SKIP_PREFIX = "chain tests need anvil"

TEST_KDF_ITERATIONS = 2**10
"""scrypt's n for the test keystore (eth-account's default, 2^18, takes 0.7 s a key)."""


@dataclass(frozen=True)
class LocalChainSet:
    """The session's chains, their state directory and funded treasury accounts."""

    state_dir: Path
    chains: list[RunningChain]
    treasury: list[LocalKey]

    def runner_env(self) -> dict[str, str]:
        """RPC URLs and the keystore's directory and password file, as a runner reads them."""
        return runner_env(self.state_dir)


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
def local_chain_set() -> Iterator[LocalChainSet]:
    anvil = anvil_or_skip()
    state_dir = Path(tempfile.mkdtemp(prefix="qtg-chains-"))
    specs = [ChainSpec(key, chain_id, free_port(), bt) for key, chain_id, bt in TEST_CHAINS]
    try:
        chains = start_chains(state_dir, specs, anvil=anvil, kdf_iterations=TEST_KDF_ITERATIONS)
        treasury = prepare_treasury(state_dir, chains, kdf_iterations=TEST_KDF_ITERATIONS)
        yield LocalChainSet(state_dir, chains, treasury)
    finally:
        stop_chains(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def treasury_pools_left_empty(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on the session's chains (its runners stopped: this fixture
    is torn down last), the treasury accounts' transactions still in a pool
    are given a few blocks to be mined; those left (queued behind a nonce
    never sent, or never minable) are dropped, so that the next test counts
    on the account's nonces from the chain's, and named in the session's
    summary (LEFT_IN_POOLS) as the test that left them."""
    yield
    if "local_chain_set" not in request.fixturenames:
        return
    chain_set: LocalChainSet = request.getfixturevalue("local_chain_set")
    for chain in chain_set.chains:
        left: list[str] = []
        for _ in range(POOL_BLOCKS):
            left = [h for key in chain_set.treasury for h in in_pool(chain, key.address)]
            if not left:
                break
            rpc(chain.rpc_url, "anvil_mine", ["0x1"])
        if left:
            rpc(chain.rpc_url, "anvil_dropAllTransactions")
            LEFT_IN_POOLS.append(f"{request.node.nodeid}: {len(left)} on {chain.key}")


POOL_BLOCKS = 5
LEFT_IN_POOLS: list[str] = []
"""The tests that left treasury transactions in a pool, and how many."""


def in_pool(chain: RunningChain, sender: str) -> list[str]:
    """The hashes of ``sender``'s transactions in the chain's pool, pending or
    queued behind a nonce never sent."""
    content: dict[str, Any] = rpc(chain.rpc_url, "txpool_content")
    return [
        str(tx["hash"])
        for part in ("pending", "queued")
        for address, by_nonce in (content.get(part) or {}).items()
        if address.lower() == sender.lower()
        for tx in by_nonce.values()
    ]


@pytest.fixture(scope="session")
def local_chains(local_chain_set: LocalChainSet) -> list[RunningChain]:
    return local_chain_set.chains


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line saying how many chain tests were skipped for want of anvil/node,
    and one per test that left treasury transactions in a pool."""
    skipped = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if isinstance(r.longrepr, tuple) and SKIP_PREFIX in str(r.longrepr[2])
    ]
    for line in LEFT_IN_POOLS:
        terminalreporter.write_line(f"left treasury transactions in a pool (dropped): {line}")
    if skipped:
        terminalreporter.write_line(
            f"chain tests skipped: {len(skipped)} (anvil/node not installed: "
            "`make install` installs them from npm when node and npm are on the machine)",
            yellow=True,
        )


def light_keystore(state_dir: Path) -> None:
    """Every local keystore (treasury, CCTP attesters, CCIP DON and keeper, the
    exchange's) made in ``state_dir`` with the test's light scrypt before a CLI
    command runs: the
    command reuses existing files, so a test that is not about the KDF does not
    pay the default strength (most of a second a key, to make and to read)."""
    from qtg_runner.chains.ccip import KEEPER_KEY
    from qtg_world.bybit import ensure_exchange_keys
    from qtg_world.chains.ccip import DON_KEY
    from qtg_world.chains.cctp import ensure_attester_keys

    ensure_treasury_keys(state_dir, kdf_iterations=TEST_KDF_ITERATIONS)
    ensure_attester_keys(state_dir, kdf_iterations=TEST_KDF_ITERATIONS)
    ensure_treasury_keys(state_dir, (DON_KEY, KEEPER_KEY), kdf_iterations=TEST_KDF_ITERATIONS)
    ensure_exchange_keys(state_dir, kdf_iterations=TEST_KDF_ITERATIONS)


def exports_of(stdout: str) -> dict[str, str]:
    """The QTG_ variables a command printed as `export NAME=value` lines."""
    pairs = (line.removeprefix("export ").split("=", 1) for line in stdout.splitlines())
    return {
        name: shlex.split(value)[0]
        for name, value in (p for p in pairs if len(p) == 2)
        if name.startswith("QTG_")
    }
