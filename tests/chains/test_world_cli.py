"""`qtg world up|status|env|down` as real processes: `up` starts the local chains and
one serve process hosting the fake Iris and the fake Bybit on free loopback ports;
both answer over HTTP (a signed Bybit call with the key file's credentials pays a
local treasury account with real USDC from the exchange's hot wallet); no secret
is printed; `env` prints the runner's environment `up` printed, with a note when
the serve process is gone, and refuses once nothing is recorded; `up` again starts
only what is missing; `down` stops every pid and `status` then says nothing runs."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import httpx
import psycopg
import pytest
from chain_support import anvil_or_skip, exports_of, light_keystore
from conftest import TestDatabase
from evm_support import usdc_balance

from qtg_runner.exchanges.bybit import BybitClient
from qtg_runner.ports import free_port_base
from qtg_runner.venue_keys import load_api_key
from qtg_world.chains.keys import ensure_treasury_keys
from qtg_world.chains.local import pid_alive, read_state
from qtg_world.local import DEFAULT_FUND_BALANCE, api_key_file, read_world, runner_env, world_dir

pytestmark = [pytest.mark.chain, pytest.mark.slow]

QTG = str(Path(sys.executable).with_name("qtg"))
DEADLINE_S = 60.0


def _qtg(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QTG, "world", *args], env=env, capture_output=True, text=True, timeout=240
    )


def _no_secret(state_dir: Path, *runs: subprocess.CompletedProcess[str]) -> None:
    _, secret = load_api_key(api_key_file(state_dir))
    password = (state_dir / "keystore" / "password").read_text().strip()
    for run in runs:
        for text in (run.stdout, run.stderr):
            assert secret not in text
            assert password not in text


def _pay_treasury(url: str, key_file: Path, state_dir: Path) -> None:
    """A withdrawal to local-treasury-1 on local-a through the client, signed with
    the key file's credentials, followed to success; its USDC arrives on chain."""
    key, secret = load_api_key(key_file)
    chain = read_state(state_dir)[0]
    treasury = ensure_treasury_keys(state_dir)[0].address
    before = usdc_balance(chain, treasury)

    async def go() -> str:
        async with BybitClient(url, key, secret) as client:
            assert await client.fund_balance("USDC") == DEFAULT_FUND_BALANCE
            addresses = await client.deposit_addresses("USDC", chain.key)
            assert [a.address.lower() for a in addresses] == [read_world_deposit(state_dir)]
            wid = await client.withdraw(
                coin="USDC",
                chain=chain.key,
                address=treasury,
                amount=Decimal("5.25"),
                request_id="worldtest1",
            )
            deadline = time.monotonic() + DEADLINE_S
            while True:
                record = await client.withdrawal(wid)
                assert record is not None
                if record.terminal:
                    assert record.status == "success", record
                    return record.tx_id
                assert time.monotonic() < deadline, f"withdrawal stuck in {record.status}"
                await asyncio.sleep(0.1)

    tx_id = asyncio.run(go())
    assert tx_id.startswith("0x") and len(tx_id) == 66
    assert usdc_balance(chain, treasury) == before + 5_250_000


def read_world_deposit(state_dir: Path) -> str:
    state = read_world(state_dir)
    assert state is not None
    return state.deposit_address.lower()


def test_world_up_status_down(tmp_path: Path, db: TestDatabase) -> None:
    anvil_or_skip()
    env = {
        **os.environ,
        "QTG_DATA_DIR": str(tmp_path / "pg18"),
        "QTG_DATABASE_URL": db.dsn,
        "QTG_NETWORK_MODE": "testnet",
        "COLUMNS": "200",
    }
    state_dir = tmp_path / "chains"
    light_keystore(state_dir)
    base = free_port_base(4)
    up_args = ("up", "--port-base", str(base), "--iris-port", "0", "--bybit-port", "0")
    pids: list[int] = []
    up = _qtg(env, *up_args)
    try:
        assert up.returncode == 0, up.stderr
        chains = read_state(state_dir)
        world = read_world(state_dir)
        assert world is not None
        pids = [c.pid for c in chains] + [world.pid]
        assert [c.port for c in chains] == [base, base + 1]
        assert all(pid_alive(p) for p in pids)
        assert "world serve started" in up.stdout
        # the environment: the chains' lines as `qtg chains up` prints them, and the world's
        exports = exports_of(up.stdout)
        assert exports == runner_env(state_dir)
        assert exports["QTG_RPC_LOCAL_A"] == f"http://127.0.0.1:{base}"
        assert exports["QTG_IRIS_URL"] == world.iris_url
        assert exports["QTG_BYBIT_URL"] == world.bybit_url
        assert exports["QTG_CCIP_URL"] == world.ccip_url
        key_file = Path(exports["QTG_BYBIT_KEY_FILE"])
        assert key_file == api_key_file(state_dir).resolve()
        assert f"bybit API key file {key_file}" in up.stdout
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(world_dir(state_dir).stat().st_mode) == 0o700
        # `env` prints the same lines again, starting nothing
        printed = _qtg(env, "env")
        assert printed.returncode == 0 and printed.stderr == "", printed.stderr
        assert [line.split("=")[0] for line in printed.stdout.splitlines()] == [
            f"export {name}" for name in runner_env(state_dir)
        ]
        assert exports_of(printed.stdout) == exports
        _no_secret(state_dir, up, printed)
        # the local exchange recorded as the venue bybit, its deposit address allow-listed
        assert "recorded as venue bybit in the registry of testnet" in up.stdout
        with psycopg.connect(db.dsn) as admin:
            venue = admin.execute(
                "SELECT v.base_url_env, v.key_file_env, d.chain_key, d.address, a.label"
                " FROM testnet.exchange_venues v"
                " JOIN testnet.venue_deposit_addresses d USING (venue_key)"
                " JOIN testnet.allowed_destinations a USING (chain_key, address)"
                " WHERE v.venue_key = 'bybit' ORDER BY d.chain_key"
            ).fetchall()
        deposit = world.deposit_address.lower()
        assert venue == [
            ("QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE", key, deposit, "deposit bybit USDC")
            for key in ("local-a", "local-b")
        ]

        status = _qtg(env, "status")
        assert status.returncode == 0, status.stdout + status.stderr
        lines = status.stdout.splitlines()
        assert [line.split()[:2] for line in lines] == [
            ["local-a", "running"],
            ["local-b", "running"],
            ["serve", "running"],
            ["iris", "answering"],
            ["bybit", "answering"],
            ["ccip", "answering"],
        ]

        # the fake Iris over HTTP: an unknown burn is 404, the fee table answers
        domain = next(iter(world.iris_domains.values()))
        unknown = httpx.get(
            f"{world.iris_url}/v2/messages/{domain}", params={"transactionHash": "0x" + "ab" * 32}
        )
        assert unknown.status_code == 404
        fees = httpx.get(f"{world.iris_url}/v2/burn/USDC/fees/{domain}/{domain + 1}")
        assert fees.status_code == 200 and len(fees.json()) == 2
        # the fake Bybit: a signed withdrawal pays a treasury account on chain
        _pay_treasury(world.bybit_url, key_file, state_dir)

        # up again: everything runs, nothing starts, the key file stays
        saved_key = key_file.read_bytes()
        again = _qtg(env, *up_args)
        assert again.returncode == 0, again.stderr
        assert "world serve already running" in again.stdout
        assert [c.pid for c in read_state(state_dir)] == pids[:2]
        assert read_world(state_dir) == world
        assert exports_of(again.stdout) == exports
        assert key_file.read_bytes() == saved_key
        _no_secret(state_dir, again, status)

        # the serve process gone: status says so (exit 1); up starts only it
        os.kill(world.pid, signal.SIGKILL)
        deadline = time.monotonic() + DEADLINE_S
        while pid_alive(world.pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        broken = _qtg(env, "status")
        assert broken.returncode == 1
        assert "serve    stopped" in broken.stdout and "iris     down" in broken.stdout
        assert broken.stdout.count("running") == 2  # the chains still run
        stale = _qtg(env, "env")  # what is recorded, and a note that it does not all run
        assert stale.returncode == 0 and exports_of(stale.stdout) == exports
        assert stale.stderr.strip().splitlines() == [
            "qtg: note: the serve process recorded but not running "
            "(`qtg world up` starts what is missing)"
        ]
        restarted = _qtg(env, *up_args)
        assert restarted.returncode == 0, restarted.stderr
        assert "world serve started" in restarted.stdout
        assert [c.pid for c in read_state(state_dir)] == pids[:2]
        world = read_world(state_dir)
        assert world is not None and world.pid != pids[2]
        pids.append(world.pid)
        assert _qtg(env, "status").returncode == 0
    finally:
        down = _qtg(env, "down")
    assert down.returncode == 0, down.stderr
    assert f"serve stopped (pid {pids[-1]})" in down.stdout
    assert "local-a stopped" in down.stdout and "local-b stopped" in down.stdout
    assert not any(pid_alive(p) for p in pids)
    assert read_world(state_dir) is None and not read_state(state_dir)
    assert api_key_file(state_dir).exists()  # kept, like the keystore
    after = _qtg(env, "status")
    assert after.returncode == 0 and "nothing runs" in after.stdout
    gone = _qtg(env, "env")
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr.strip().splitlines() == [
        f"qtg: error: no local outside world recorded in {state_dir}: `qtg world up`"
    ]
