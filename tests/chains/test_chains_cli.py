"""`qtg chains up|status|down` as real processes: the chains outlive `up`, the
state file records them and the network's chain registry too (chains, USDC,
funded treasury accounts whose keys are in the encrypted keystore beside the
state file), `up` prints the environment a runner loads the signers from,
`status` says what runs, `down` stops them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from chain_support import anvil_or_skip, exports_of
from conftest import TestDatabase
from rows import Conn
from web3 import HTTPProvider, Web3

from qtg_runner.ports import free_port_base
from qtg_runner.signers import SignerSet
from qtg_world.chains.local import load_artifact, pid_alive, read_state, rpc, runner_env
from qtg_world.chains.registry import TREASURY_FUNDING, TREASURY_GAS

pytestmark = [pytest.mark.chain, pytest.mark.slow]

QTG = str(Path(sys.executable).with_name("qtg"))


def _qtg(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QTG, "chains", *args], env=env, capture_output=True, text=True, timeout=120
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_up_status_down(tmp_path: Path, db: TestDatabase, conn: Conn) -> None:
    anvil_or_skip()
    env = {
        **os.environ,
        "QTG_DATA_DIR": str(tmp_path / "pg18"),
        "QTG_DATABASE_URL": db.dsn,
        "QTG_NETWORK_MODE": "testnet",
        "COLUMNS": "200",
    }
    state_dir = tmp_path / "chains"
    base = free_port_base(4)
    up = _qtg(env, "up", "--port-base", str(base))
    try:
        assert up.returncode == 0, up.stderr
        chains = read_state(state_dir)
        assert [(c.key, c.chain_id, c.port) for c in chains] == [
            ("local-a", 31337, base),
            ("local-b", 31338, base + 1),
        ]
        assert chains[0].block_time != chains[1].block_time
        assert "export QTG_RPC_LOCAL_A=http://127.0.0.1:" in up.stdout
        # the keystore: a directory of its own (0700), a password, two treasury keys,
        # the CCTP double's two attester keys and the CCIP double's DON and keeper (0600)
        keystore = state_dir / "keystore"
        files = sorted(p.name for p in keystore.iterdir())
        assert files == [
            "ccip-don.json",
            "ccip-keeper.json",
            "cctp-attester-1.json",
            "cctp-attester-2.json",
            "local-treasury-1.json",
            "local-treasury-2.json",
            "password",
        ]
        assert all(
            {"MockUSDC", "MessageTransmitterV2", "TokenMessengerV2"} <= set(c.contracts)
            for c in chains
        )
        assert _mode(keystore) == 0o700
        assert all(_mode(keystore / f) == 0o600 for f in files)
        addresses = [
            "0x" + json.loads((keystore / f).read_text())["address"].lower().removeprefix("0x")
            for f in ("local-treasury-1.json", "local-treasury-2.json")
        ]
        # the runner's environment, printed as exports and given by runner_env alike
        exports = exports_of(up.stdout)
        assert exports == runner_env(state_dir)
        assert exports["QTG_KEYSTORE_DIR"] == str(keystore.resolve())
        assert exports["QTG_KEYSTORE_PASSWORD_FILE"] == str((keystore / "password").resolve())
        assert "QTG_KEYSTORE_PASSWORD" not in exports
        # ... from which a runner loads both signers (eth-account's default scrypt)
        signers = SignerSet.load(
            ["keystore:local-treasury-1", "keystore:local-treasury-2"], env=exports
        )
        assert [s.address for s in signers] == addresses
        for c in chains:
            env_name = "QTG_RPC_" + c.key.upper().replace("-", "_")
            assert f"export {env_name}=http://127.0.0.1:{c.port}" in up.stdout
            assert int(rpc(c.rpc_url, "eth_chainId"), 16) == c.chain_id
            code = rpc(c.rpc_url, "eth_getCode", [c.contracts["MockUSDC"], "latest"])
            assert len(code) > 2
        # the registry of testnet holds the chains, their USDC, the funded treasury
        assert conn.execute(
            "SELECT chain_key, chain_id, rpc_url_env, block_time_ms FROM chains ORDER BY 1"
        ).fetchall() == [
            ("local-a", 31337, "QTG_RPC_LOCAL_A", 1000),
            ("local-b", 31338, "QTG_RPC_LOCAL_B", 2000),
        ]
        for c in chains:
            assert conn.execute(
                "SELECT symbol, address, decimals FROM chain_tokens WHERE chain_key = %s",
                (c.key,),
            ).fetchall() == [("USDC", c.contracts["MockUSDC"].lower(), 6)]
            treasury = conn.execute(
                "SELECT address, signer_id FROM treasury_accounts WHERE chain_key = %s ORDER BY 2",
                (c.key,),
            ).fetchall()
            assert [signer for _, signer in treasury] == [
                "keystore:local-treasury-1",
                "keystore:local-treasury-2",
            ]
            # the same accounts on every chain: the keystore's
            assert [address for address, _ in treasury] == addresses
            w3 = Web3(HTTPProvider(c.rpc_url))
            usdc = w3.eth.contract(
                address=Web3.to_checksum_address(c.contracts["MockUSDC"]),
                abi=load_artifact("MockUSDC")["abi"],
            )
            for address, _ in treasury:
                balance = usdc.functions.balanceOf(Web3.to_checksum_address(address)).call()
                assert balance == TREASURY_FUNDING
                assert w3.eth.get_balance(Web3.to_checksum_address(address)) >= TREASURY_GAS
        audited = conn.execute(
            "SELECT count(*) FROM audit_outbox WHERE entity = 'chain'"
        ).fetchone()
        assert audited is not None and audited[0] >= 2 * 4  # chain, token, two accounts each
        raw = json.loads((state_dir / "state.json").read_text())
        assert {"pid", "port", "rpc_url", "contracts"} <= set(raw["chains"][0])

        # up again leaves the running chains as they are, and the keystore too;
        # with every allowance set it signs nothing, so it opens no keystore:
        # it runs with the password file away
        saved = {f: (keystore / f).read_bytes() for f in files}
        (keystore / "password").rename(tmp_path / "password")
        again = _qtg(env, "up", "--port-base", str(base))
        (tmp_path / "password").rename(keystore / "password")
        assert again.returncode == 0, again.stderr
        assert [c.pid for c in read_state(state_dir)] == [c.pid for c in chains]
        assert {f: (keystore / f).read_bytes() for f in files} == saved
        assert exports_of(again.stdout) == exports
        # ... and recording them again changes nothing (no mint, no audit row)
        assert (
            conn.execute("SELECT count(*) FROM audit_outbox WHERE entity = 'chain'").fetchone()
            == audited
        )

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
