"""`qtg drill evm-transfer` as a real process: on a fresh embedded server of its
own and no chain running, it starts the local chains, makes the logins, and
moves 1.25 USDC between the two treasury accounts through the whole engine;
what it prints (the hash, the block, the path through the states, the
balances) is what the chain says. With the gate off it refuses before touching
anything: one `qtg: error:` line, exit 2, no server and no chain started."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chain_support import anvil_or_skip, light_keystore
from conftest import server_parent_dir
from runner_helpers import Runners, runner_env, runners

from qtg_runner.chains.evm import TRANSFER_TOPIC
from qtg_runner.db.embedded import stop_embedded
from qtg_runner.ports import free_port_base
from qtg_world.chains.local import RunningChain, chains_dir, read_state, rpc, stop_chains


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Runners]:
    with runners(tmp_path) as r:
        yield r


def sender_logs(chain: RunningChain, sender: str) -> list[dict[str, Any]]:
    """Every USDC Transfer log from ``sender`` on ``chain`` (a fresh chain)."""
    logs = rpc(
        chain.rpc_url,
        "eth_getLogs",
        [
            {
                "address": chain.contracts["MockUSDC"],
                "fromBlock": "0x0",
                "toBlock": "latest",
                "topics": [TRANSFER_TOPIC, "0x" + "00" * 12 + sender[2:]],
            }
        ],
    )
    return list(logs)


@pytest.mark.chain
@pytest.mark.slow
def test_the_drill_moves_usdc_once_and_prints_the_hash_the_path_and_the_balances(
    processes: Runners,
) -> None:
    anvil_or_skip()
    data_dir = server_parent_dir() / "pg18"
    env = runner_env(None, QTG_DATA_DIR=str(data_dir), COLUMNS="200")
    light_keystore(chains_dir(data_dir))
    try:
        base = str(free_port_base(4))
        drill = processes.start(
            "drill", "evm-transfer", "--port-base", base, "--timeout", "90", env=env
        )
        code = drill.wait(timeout=180)
        stdout = drill.stdout()
        assert code == 0, drill.describe() + "\nstdout:\n" + stdout
        chains = read_state(chains_dir(data_dir))
        balances = re.findall(
            r"^(from|to) (0x[0-9a-f]{40}): \S+ -> \S+ USDC \((\S+)\)$", stdout, re.M
        )
        assert len(balances) == 2, stdout
        sender, recipient = (address for _, address, _ in balances)
        logs = {c.key: sender_logs(c, sender) for c in chains}
        tx_hash = re.search(r"^transaction (0x[0-9a-f]{64})$", stdout, re.M)
        assert tx_hash, stdout
        receipt = rpc(chains[0].rpc_url, "eth_getTransactionReceipt", [tx_hash[1]])
    finally:
        stop_chains(chains_dir(data_dir))
        stop_embedded(data_dir)
        shutil.rmtree(data_dir.parent, ignore_errors=True)

    # started by the drill, as `qtg chains up` starts them; the transfer on local-a
    assert [c.key for c in chains] == ["local-a", "local-b"]
    assert "chain local-a" in stdout
    block = re.search(r"^block (\d+), (\d+) confirmations \(final at 2\)$", stdout, re.M)
    assert block, stdout
    assert int(block[2]) >= 3
    assert receipt is not None and receipt["status"] == "0x1"
    assert int(receipt["blockNumber"], 16) == int(block[1])
    # exactly once on chain: the fresh chains' only Transfer from the sender
    assert [(log["transactionHash"], int(log["data"], 16)) for log in logs["local-a"]] == [
        (tx_hash[1], 1_250_000)
    ]
    assert logs["local-a"][0]["topics"][2] == "0x" + "00" * 12 + recipient[2:]
    assert logs["local-b"] == []
    # the node's path through its states, in order, with times
    path = re.findall(r"^  \S+ \(\+ *[\d.]+s\) (\S+) -> (\S+) \((\w+)\)$", stdout, re.M)
    transitions = [(a, b) for a, b, action in path if action == "state_changed"]
    # the first observation may already see the transfer final (a slow machine):
    # then the node goes from SUBMITTED straight to COMPLETED
    observed = [("SUBMITTED", "OBSERVING"), ("OBSERVING", "COMPLETED")]
    assert transitions[:3] == [
        ("PENDING", "READY"),
        ("READY", "SUBMITTING"),
        ("SUBMITTING", "SUBMITTED"),
    ], stdout
    assert transitions[3:] in (observed, [("SUBMITTED", "COMPLETED")]), stdout
    assert ("SUBMITTING", "SUBMITTING", "intent_prepared") in path
    assert [(side, delta) for side, _, delta in balances] == [
        ("from", "-1.250000"),
        ("to", "1.250000"),
    ], stdout
    assert "created by alice, approved by bob" in stdout
    assert stdout.rstrip().endswith("COMPLETED")


def test_the_drill_refuses_with_the_gate_off_and_starts_nothing(processes: Runners) -> None:
    parent = server_parent_dir()
    data_dir = parent / "pg18"
    try:
        drill = processes.start(
            "drill",
            "evm-transfer",
            env=runner_env(None, workers=False, QTG_DATA_DIR=str(data_dir)),
        )
        assert drill.wait(timeout=30) == 2
        leftovers = sorted(p.name for p in parent.iterdir())
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    lines = drill.stderr().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qtg: error: "), lines
    assert "the workers' gate is off" in lines[0]
    assert "QTG_WORKERS_ENABLED=true" in lines[0]
    assert drill.stdout() == ""
    assert leftovers == [], "the drill started a server or chains although it refused to run"
