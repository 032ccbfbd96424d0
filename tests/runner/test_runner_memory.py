"""What a runner process holds in memory (issue 14: peak RSS <= 100 MB with the
real executors loaded; the bench's case 5 measures the whole process).

What is cheap to pin here, each of which would cost a runner much:

- A keystore signer at eth-account's default work factor (scrypt n = 2^18,
  r = 8) needs 256 MiB for its key derivation: decrypted in the runner it
  would stay the process's peak (VmHWM) for good. It is decrypted in a child
  process (qtg_runner.signers.local): loading one raises the loader's VmHWM by
  a few MB, and a wrong password is refused as before.
- What `qtg run` / `qtg worker` import at start: every shipped executor, but
  never web3's full package (about 17 MB; the runner speaks JSON-RPC through
  its own client over httpx, eth-abi and eth-account), nor the HTTP API's
  server (fastapi, uvicorn), which only `qtg api` and the demo run.
- The HTTP clients (an RPC client per chain per executor, the venues', Iris's)
  share one TLS context (qtg_runner.tls), still verifying against the CA
  bundle, instead of loading the bundle into one of their own each (about
  0.8 MB a client; the bench's loaded runner went from 98 to 81 MB).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from eth_account import Account

from qtg_runner.chains.cctp_client import IrisClient
from qtg_runner.chains.evm_rpc import EvmRpc
from qtg_runner.exchanges.bybit import BybitClient
from qtg_runner.signers import SignerError, load
from qtg_runner.signers.local import KDF_IN_PROCESS_BYTES, kdf_bytes
from qtg_runner.tls import client_ssl_context

KEY = bytes.fromhex("4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318")
ADDRESS = Account.from_key(KEY).address.lower()


def _run(program: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


HWM = """
def hwm():
    text = open("/proc/self/status").read()
    return int(text.split("VmHWM:")[1].split()[0]) * 1024
"""


@pytest.fixture(scope="module")
def default_keystore(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A keystore at eth-account's default work factor (made in a child, so that
    its 256 MiB stay out of the test process too)."""
    directory = tmp_path_factory.mktemp("keystore")
    program = (
        "import json, sys\nfrom eth_account import Account\n"
        f"ks = Account.encrypt(bytes.fromhex({KEY.hex()!r}), 'pw')\n"
        f"open({str(directory / 'treasury.json')!r}, 'w').write(json.dumps(ks))\n"
        "print(json.dumps({}))\n"
    )
    _run(program)
    return directory


def test_default_scrypt_needs_more_than_a_runner_keeps(default_keystore: Path) -> None:
    keystore = json.loads((default_keystore / "treasury.json").read_text())
    assert kdf_bytes(keystore) == 128 * 2**18 * 8
    assert kdf_bytes(keystore) > KDF_IN_PROCESS_BYTES
    assert kdf_bytes(Account.encrypt(KEY, "pw", kdf="pbkdf2", iterations=2)) == 0
    assert kdf_bytes(Account.encrypt(KEY, "pw", iterations=2**10)) < KDF_IN_PROCESS_BYTES


def test_loading_a_default_keystore_leaves_the_peak_alone(default_keystore: Path) -> None:
    program = (
        HWM
        + "import json\nfrom qtg_runner.signers import load\n"
        # eth-account before the baseline: the first signer imports it (its own peak,
        # eth-keyfile's tables, is the import's, not the key's)
        + "import eth_account, qtg_runner.signers.local\n"
        + "before = hwm()\n"
        + "signer = load('keystore:treasury')\n"
        + "print(json.dumps({'address': signer.address, 'rise': hwm() - before}))\n"
    )
    answer = _run(
        program, {"QTG_KEYSTORE_DIR": str(default_keystore), "QTG_KEYSTORE_PASSWORD": "pw"}
    )
    assert answer["address"] == ADDRESS
    rise = answer["rise"]
    assert isinstance(rise, int)
    assert rise < 16 * 2**20, f"loading the signer raised the peak RSS by {rise / 2**20:.0f} MB"


def test_a_wrong_password_is_refused_from_the_child_too(default_keystore: Path) -> None:
    env = {"QTG_KEYSTORE_DIR": str(default_keystore), "QTG_KEYSTORE_PASSWORD": "not it"}
    with pytest.raises(SignerError, match="the password does not open") as refused:
        load("keystore:treasury", env)
    assert "not it" not in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__context__ is None


def test_a_child_that_cannot_run_is_said_so(
    default_keystore: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(default_keystore / "no-python"))
    env = {"QTG_KEYSTORE_DIR": str(default_keystore), "QTG_KEYSTORE_PASSWORD": "pw"}
    with pytest.raises(SignerError, match="the child process that derives the key") as refused:
        load("keystore:treasury", env)
    assert "could not be started" in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__context__ is None


def test_the_runner_imports_no_web3_nor_the_api_server() -> None:
    program = (
        "import json, sys\n"
        "import qtg_runner.cli, qtg_runner.commands.run, qtg_runner.runtime, qtg_runner.workers\n"
        "from qtg_runner.executors import registry\n"
        "heavy = ('web3', 'fastapi', 'uvicorn', 'starlette')\n"
        "print(json.dumps({'loaded': [m for m in heavy if m in sys.modules],"
        " 'shipped': [e.key for e in registry.SHIPPED]}))\n"
    )
    answer = _run(program)
    assert answer["loaded"] == []
    assert len(answer["shipped"]) == 8  # type: ignore[arg-type]


def _ssl_context(client: object) -> ssl.SSLContext:
    """The TLS context an httpx client's connection pool connects with."""
    context = client._transport._pool._ssl_context  # type: ignore[attr-defined]
    assert isinstance(context, ssl.SSLContext)
    return context


def test_every_client_shares_one_verifying_tls_context() -> None:
    async def scenario() -> None:
        rpc_a, rpc_b = EvmRpc("https://rpc-a.example"), EvmRpc("https://rpc-b.example")
        venue = BybitClient("https://venue.example", "key", "secret")
        iris = IrisClient("https://iris.example")
        try:
            clients = (rpc_a._client, rpc_b._client, venue._client, iris._client)
            assert {id(_ssl_context(c)) for c in clients} == {id(client_ssl_context())}
        finally:
            for closing in (rpc_a, rpc_b, venue, iris):
                await closing.aclose()

    asyncio.run(scenario())
    context = client_ssl_context()
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded
