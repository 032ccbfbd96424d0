"""Local EVM chains: anvil processes on loopback ports, each with its own chain id
and block time, with the committed contracts deployed on each
(qtg_world.chains.start). While they are set up, a chain mines each
transaction as it arrives (`mined_at_once`), then one block per its block
time.

`qtg chains up|down|status` and the test fixtures use this module alike. The
state of the chains that run (pids, ports, RPC URLs, contract addresses) is a
small JSON file in a directory of its own beside the embedded server's data
directory (``chains/state.json``), with each anvil's log beside it.

anvil comes from the npm package ``@foundry-rs/anvil`` that `make install`
installs into the repository's node_modules (``npm ci``); ``QTG_ANVIL`` names
another binary. Nothing here holds a private key: anvil's own accounts are
unlocked, so the deployer is anvil's first account and the RPC signs for it.
The treasury accounts are keys of our own in an encrypted keystore beside the
state file (qtg_world.chains.keys); ``runner_env`` gives a runner what it needs
to reach the chains and load those signers.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

from qtg_runner.chains.errors import ChainError
from qtg_runner.chains.evm_rpc import MULTICALL3
from qtg_runner.ports import LOOPBACK

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
"""The repository (the supported install is editable): node_modules and contracts/."""

CONTRACTS_BUILD = REPO_ROOT / "contracts" / "build"
STATE_FILE_NAME = "state.json"

START_TIMEOUT_S = 20.0
"""How long a fresh anvil may take to answer eth_chainId."""


class AnvilNotFound(ChainError):
    """anvil is not installed (no node/npm, or `make install` has not run)."""


@dataclass(frozen=True)
class ChainSpec:
    """One local chain to start: its key, chain id, port and block time (seconds)."""

    key: str
    chain_id: int
    port: int
    block_time: int


DEFAULT_CHAINS: tuple[ChainSpec, ...] = (
    ChainSpec(key="local-a", chain_id=31337, port=8545, block_time=1),
    ChainSpec(key="local-b", chain_id=31338, port=8546, block_time=2),
)
"""`qtg chains up`'s chains: two, each with its own chain id, port and block time."""


@dataclass
class RunningChain:
    """A started chain as the state file records it."""

    key: str
    chain_id: int
    port: int
    block_time: int
    pid: int
    rpc_url: str
    log_file: str
    deployer: str = ""
    contracts: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunningChain:
        return cls(
            key=str(raw["key"]),
            chain_id=int(raw["chain_id"]),
            port=int(raw["port"]),
            block_time=int(raw["block_time"]),
            pid=int(raw["pid"]),
            rpc_url=str(raw["rpc_url"]),
            log_file=str(raw["log_file"]),
            deployer=str(raw.get("deployer", "")),
            contracts={str(k): str(v) for k, v in dict(raw.get("contracts", {})).items()},
        )


def chains_dir(data_dir: Path) -> Path:
    """Where the chains' state and logs live: ``chains/`` beside the server's data directory."""
    return data_dir.with_name("chains")


def keystore_dir(state_dir: Path) -> Path:
    """The local treasury's encrypted keystore files (qtg_world.chains.keys)."""
    return state_dir / "keystore"


def password_file(state_dir: Path) -> Path:
    """The local keystore's password (mode 0600)."""
    return keystore_dir(state_dir) / "password"


def rpc_url_env(chain_key: str) -> str:
    """The environment variable that holds a chain's RPC URL: QTG_RPC_<KEY>."""
    return "QTG_RPC_" + re.sub(r"[^A-Z0-9]", "_", chain_key.upper())


def runner_env(state_dir: Path) -> dict[str, str]:
    """The environment a runner needs for the local chains of ``state_dir``: each
    chain's RPC URL under the variable the registry names, and where the treasury's
    keystore and its password file are (QTG_KEYSTORE_DIR,
    QTG_KEYSTORE_PASSWORD_FILE). Names of files, never a key or a password."""
    # the signers' own names for these variables
    from qtg_runner.signers.local import KEYSTORE_DIR_ENV, KEYSTORE_PASSWORD_FILE_ENV

    env = {rpc_url_env(c.key): c.rpc_url for c in read_state(state_dir)}
    env[KEYSTORE_DIR_ENV] = str(keystore_dir(state_dir).resolve())
    env[KEYSTORE_PASSWORD_FILE_ENV] = str(password_file(state_dir).resolve())
    return env


def find_anvil(env: Mapping[str, str] | None = None) -> Path:
    """The anvil binary: ``QTG_ANVIL``, else the one the npm package installed into
    the repository's node_modules, else one on PATH. Raises AnvilNotFound."""
    e = os.environ if env is None else env
    explicit = e.get("QTG_ANVIL", "").strip()
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise AnvilNotFound(f"QTG_ANVIL={explicit} is not an executable file")
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    system = platform.system().lower()
    node_modules = REPO_ROOT / "node_modules"
    # the platform package's binary itself (the .bin wrapper is a node script that
    # forwards signals to a child: the recorded pid is then anvil's own)
    for candidate in (
        node_modules / "@foundry-rs" / f"anvil-{system}-{arch}" / "bin" / "anvil",
        node_modules / ".bin" / "anvil",
    ):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which("anvil")
    if on_path:
        return Path(on_path)
    raise AnvilNotFound(
        "anvil not found: `make install` installs it from npm (@foundry-rs/anvil) when "
        "node and npm are on the machine; QTG_ANVIL names another binary"
    )


def rpc(url: str, method: str, params: Sequence[Any] = (), timeout: float = 5.0) -> Any:
    """One JSON-RPC call; raises ChainError on a transport error or an RPC error."""
    try:
        response = httpx.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)},
            timeout=timeout,
        )
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ChainError(f"{method} on {url} failed: {exc}") from exc
    if "error" in body:
        raise ChainError(f"{method} on {url} answered an error: {body['error']}")
    return body.get("result")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (our own child not yet reaped) is not running
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _is_anvil(pid: int) -> bool:
    """Whether ``pid`` still is an anvil (a recycled pid is never signalled)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return pid_alive(pid)
    return bool(cmdline) and Path(cmdline[0].decode(errors="replace")).name == "anvil"


def is_running(chain: RunningChain) -> bool:
    return pid_alive(chain.pid) and _is_anvil(chain.pid)


def head_block(chain: RunningChain) -> int | None:
    """The chain's head block number, or None when its RPC does not answer."""
    try:
        return int(str(rpc(chain.rpc_url, "eth_blockNumber", timeout=2.0)), 16)
    except ChainError:
        return None


def load_artifact(name: str) -> dict[str, Any]:
    """A committed contract artifact (contracts/build/<name>.json): abi, bytecode."""
    path = CONTRACTS_BUILD / f"{name}.json"
    try:
        return cast(dict[str, Any], json.loads(path.read_text()))
    except OSError as exc:
        raise ChainError(f"contract artifact {path} is missing: run `make contracts`") from exc


def start_anvil(anvil: Path, spec: ChainSpec, log_dir: Path) -> RunningChain:
    log_file = log_dir / f"{spec.key}.log"
    args = [
        str(anvil),
        "--host", LOOPBACK,
        "--port", str(spec.port),
        "--chain-id", str(spec.chain_id),
        "--block-time", str(spec.block_time),
    ]  # fmt: skip
    with log_file.open("ab") as log:
        # its own session: `qtg chains up` returns and the chain stays up
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    chain = RunningChain(
        key=spec.key,
        chain_id=spec.chain_id,
        port=spec.port,
        block_time=spec.block_time,
        pid=proc.pid,
        rpc_url=f"http://{LOOPBACK}:{spec.port}",
        log_file=str(log_file),
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            tail = log_file.read_text(errors="replace").strip().splitlines()[-3:]
            raise ChainError(
                f"anvil for {spec.key} exited with {proc.returncode} before answering on "
                f"port {spec.port}: {' / '.join(tail)}"
            )
        try:
            answered = int(str(rpc(chain.rpc_url, "eth_chainId", timeout=1.0)), 16)
        except ChainError:
            answered = None
        if answered is not None:
            if answered != spec.chain_id:
                terminate(proc.pid)
                raise ChainError(
                    f"port {spec.port} answers chain id {answered}, not {spec.chain_id}: "
                    "another node holds it"
                )
            return chain
        if time.monotonic() > deadline:
            terminate(proc.pid)
            raise ChainError(f"anvil for {spec.key} did not answer within {START_TIMEOUT_S}s")
        time.sleep(0.1)


@contextlib.contextmanager
def mined_at_once(chains: Sequence[RunningChain]) -> Iterator[None]:
    """Within the block: each of ``chains`` mines a transaction as it arrives
    (anvil's automine), so setting the chains up (deploying, funding, approving:
    a few dozen transactions sent one after another) waits for no block time.
    After it, each mines one block per its block time again, as it was started,
    whatever the block raised."""
    for chain in chains:
        rpc(chain.rpc_url, "evm_setAutomine", [True])
    try:
        yield
    finally:
        for chain in chains:
            with contextlib.suppress(ChainError):  # a chain gone: nothing to restore
                rpc(chain.rpc_url, "evm_setIntervalMining", [chain.block_time])


def place_multicall3(chain: RunningChain) -> None:
    """Multicall3's runtime code (compiled from the source @chainlink/contracts
    publishes: contracts/compile.mjs) at the address it has on every public
    network (MULTICALL3), as the runtime reads it there: anvil_setCode, no
    transaction (it has no constructor and keeps no state)."""
    code = load_artifact("Multicall3")["deployedBytecode"]
    rpc(chain.rpc_url, "anvil_setCode", [MULTICALL3, code])
    chain.contracts["Multicall3"] = MULTICALL3


def deploy_contracts(chain: RunningChain, names: Iterable[str] = ("MockUSDC",)) -> None:
    """Deploy the committed artifacts on ``chain`` from anvil's first (unlocked)
    account; the addresses go into ``chain.contracts``."""
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    deployer = w3.eth.accounts[0]
    chain.deployer = str(deployer)
    for name in names:
        artifact = load_artifact(name)
        factory = w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
        tx_hash = factory.constructor().transact({"from": deployer})
        timeout = max(10.0, chain.block_time * 5.0)
        receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=timeout, poll_latency=0.1)
        if receipt["status"] != 1 or not receipt["contractAddress"]:
            raise ChainError(f"deploying {name} on {chain.key} failed: {receipt}")
        chain.contracts[name] = str(receipt["contractAddress"])


def wait_all(
    w3s: Sequence[Any], chains: Sequence[RunningChain], sent: Sequence[Any], what: str
) -> list[Any]:
    """The receipts of one round of transactions (``sent[i]`` on ``chains[i]``
    through ``w3s[i]``), each awaited for five block times (at least 10 s);
    ChainError names ``what`` and the chain of one that reverted."""
    receipts = []
    for w3, chain, tx_hash in zip(w3s, chains, sent, strict=True):
        receipt = w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=max(10.0, chain.block_time * 5.0), poll_latency=0.1
        )
        if receipt["status"] != 1:
            raise ChainError(f"{what} on {chain.key} failed: {receipt}")
        receipts.append(receipt)
    return receipts


def read_state(state_dir: Path) -> list[RunningChain]:
    """The chains recorded in ``state_dir`` (empty when none was started)."""
    path = state_dir / STATE_FILE_NAME
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise ChainError(f"the chains' state file {path} is unreadable: {exc}") from exc
    return [RunningChain.from_json(c) for c in raw.get("chains", [])]


def write_state(state_dir: Path, chains: Sequence[RunningChain]) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / STATE_FILE_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"chains": [asdict(c) for c in chains]}, indent=2) + "\n")
    tmp.replace(path)
    return path


def terminate(pid: int, timeout: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            # reaps it when it is our child (the fixtures); otherwise ChildProcessError
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            if not pid_alive(pid):
                return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def stop_chains(state_dir: Path) -> list[RunningChain]:
    """Stop every chain recorded in ``state_dir`` and remove the state file; the
    chains that were recorded are returned (those already gone are left alone)."""
    chains = read_state(state_dir)
    for chain in chains:
        if is_running(chain):
            terminate(chain.pid)
    (state_dir / STATE_FILE_NAME).unlink(missing_ok=True)
    return chains
