"""The local outside world as one background process: the fake Iris, the fake
Bybit and the CCIP executing network served side by side on loopback, and the
Stargate relayer (qtg_world.stargate), over the local chains of a state
directory (qtg_world.chains.local).

`qtg world up|down|status` (qtg_world/commands/world.py) and the tests use
this module alike. Beside the chains' state (``chains/state.json``) it keeps:

    chains/world/                   mode 0700
    chains/world/state.json         the serve process: pid, URLs, time scale
    chains/world/bybit-api-key.json 0600, the engine's API key and secret
    chains/world/serve.log          the serve process's log (never a secret)

``start_world`` spawns ``python -m qtg_world`` in a session of its own;
that process (``serve_main``) decrypts the attester keys and the exchange's hot
wallet from the chains' keystore, starts both doubles, whitelists the local
treasury accounts at the exchange, credits its FUND account, and only then
writes ``state.json``: the parent waits for that file. SIGTERM stops it cleanly.
``runner_env`` is the environment a runner, a test or a drill needs for all of it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from qtg_runner.chains.errors import ChainError
from qtg_runner.venue_keys import load_api_key
from qtg_world.chains.local import RunningChain, is_running, pid_alive, read_state
from qtg_world.chains.local import runner_env as chains_runner_env

__all__ = [
    "BYBIT_KEY_FILE_ENV",
    "BYBIT_URL_ENV",
    "CCIP_URL_ENV",
    "DEFAULT_FUND_BALANCE",
    "DEFAULT_TIME_SCALE",
    "IRIS_URL_ENV",
    "Probe",
    "WorldState",
    "api_key_file",
    "ensure_api_key",
    "load_api_key",
    "probe_bybit",
    "probe_ccip",
    "probe_iris",
    "read_world",
    "runner_env",
    "serve_running",
    "start_world",
    "stop_world",
    "world_dir",
]

IRIS_URL_ENV = "QTG_IRIS_URL"
CCIP_URL_ENV = "QTG_CCIP_URL"
BYBIT_URL_ENV = "QTG_BYBIT_URL"
BYBIT_KEY_FILE_ENV = "QTG_BYBIT_KEY_FILE"

DEFAULT_TIME_SCALE = 60.0
"""Protocol seconds per real second: a 15-minute standard attestation takes 15 s."""

STARGATE_BUS_WAIT_S = 480.0
"""Protocol seconds a Stargate bus waits for passengers before the relayer drives it."""

DEFAULT_FUND_BALANCE = Decimal(1_000_000)
"""USDC in the exchange's FUND account at start (the hot wallet holds as much)."""

START_TIMEOUT_S = 90.0
"""How long the serve process may take to decrypt its keys and listen."""

STOP_TIMEOUT_S = 10.0
"""SIGTERM's grace before SIGKILL."""

STATE_FILE_NAME = "state.json"
KEY_FILE_NAME = "bybit-api-key.json"
LOG_FILE_NAME = "serve.log"
MODULE = "qtg_world"

log = logging.getLogger("qtg.world")


@dataclass
class WorldState:
    """The serve process as its state file records it."""

    pid: int
    iris_url: str
    bybit_url: str
    key_file: str
    log_file: str
    time_scale: float
    iris_domains: dict[str, int] = field(default_factory=dict)
    """Each chain's CCTP domain, as the fake Iris serves it."""
    chain_pids: dict[str, int] = field(default_factory=dict)
    """The anvil pids it was started over: other pids mean other chains."""
    deposit_address: str = ""
    hot_wallet: str = ""
    stargate_eids: dict[str, int] = field(default_factory=dict)
    """Each chain's LayerZero endpoint id, as the Stargate relayer serves it."""
    ccip_url: str = ""
    """The CCIP executing network's status and control endpoint (qtg_world.ccip)."""

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> WorldState:
        return cls(
            pid=int(raw["pid"]),
            iris_url=str(raw["iris_url"]),
            bybit_url=str(raw["bybit_url"]),
            key_file=str(raw["key_file"]),
            log_file=str(raw["log_file"]),
            time_scale=float(raw["time_scale"]),
            iris_domains={str(k): int(v) for k, v in dict(raw.get("iris_domains", {})).items()},
            chain_pids={str(k): int(v) for k, v in dict(raw.get("chain_pids", {})).items()},
            deposit_address=str(raw.get("deposit_address", "")),
            hot_wallet=str(raw.get("hot_wallet", "")),
            stargate_eids={str(k): int(v) for k, v in dict(raw.get("stargate_eids", {})).items()},
            ccip_url=str(raw.get("ccip_url", "")),
        )


def world_dir(state_dir: Path) -> Path:
    """The serve process's state, key file and log: ``world/`` in the chains' directory."""
    return state_dir / "world"


def api_key_file(state_dir: Path) -> Path:
    """The engine's Bybit API key and secret (JSON, mode 0600)."""
    return world_dir(state_dir) / KEY_FILE_NAME


def _private_dir(state_dir: Path) -> Path:
    directory = world_dir(state_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    return directory


def ensure_api_key(state_dir: Path) -> Path:
    """The key file, made first when missing (a fresh key and secret), kept
    across restarts like the keystore; its path (never its content)."""
    _private_dir(state_dir)
    path = api_key_file(state_dir)
    if not path.exists():
        content = json.dumps(
            {"api_key": "qtglocal" + secrets.token_hex(8), "api_secret": secrets.token_hex(24)}
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(content + "\n")
    load_api_key(path)  # refuses a file open to others or malformed
    return path


def read_world(state_dir: Path) -> WorldState | None:
    """The serve process recorded in ``state_dir`` (None when none was started)."""
    path = world_dir(state_dir) / STATE_FILE_NAME
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ChainError(f"the world's state file {path} is unreadable: {exc}") from exc
    try:
        return WorldState.from_json(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ChainError(f"the world's state file {path} is malformed: {exc!r}") from None


def _write_world(state_dir: Path, state: WorldState) -> Path:
    directory = _private_dir(state_dir)
    path = directory / STATE_FILE_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    tmp.replace(path)
    return path


def _is_serve(pid: int) -> bool:
    """Whether ``pid`` still is a serve process (a recycled pid is never signalled)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return pid_alive(pid)
    return MODULE.encode() in cmdline


def serve_running(state: WorldState) -> bool:
    return pid_alive(state.pid) and _is_serve(state.pid)


def runner_env(state_dir: Path) -> dict[str, str]:
    """Everything a runner, a test or a drill needs for the local outside world:
    the chains' environment (qtg_world.chains.local.runner_env) and the doubles'
    URLs and the key file's path (QTG_IRIS_URL, QTG_BYBIT_URL,
    QTG_BYBIT_KEY_FILE). Names of files, never a key, secret or password."""
    state = read_world(state_dir)
    if state is None:
        raise ChainError(f"no local outside world recorded in {state_dir}: `qtg world up`")
    env = chains_runner_env(state_dir)
    env[IRIS_URL_ENV] = state.iris_url
    env[BYBIT_URL_ENV] = state.bybit_url
    env[BYBIT_KEY_FILE_ENV] = state.key_file
    if state.ccip_url:
        env[CCIP_URL_ENV] = state.ccip_url
    return env


# -- probes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str


UNKNOWN_TX = "0x" + "00" * 32


def probe_iris(state: WorldState, timeout: float = 3.0) -> Probe:
    """The fake Iris answers a transaction it has never seen with 404 or an empty list."""
    if not state.iris_domains:
        return Probe(False, "no CCTP domain recorded")
    domain = next(iter(state.iris_domains.values()))
    url = f"{state.iris_url}/v2/messages/{domain}?transactionHash={UNKNOWN_TX}"
    try:
        response = httpx.get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        return Probe(False, f"no answer ({type(exc).__name__})")
    if response.status_code == 404:
        return Probe(True, "unknown burn: 404")
    if response.status_code == 200:
        try:
            if response.json().get("messages") == []:
                return Probe(True, "unknown burn: empty list")
        except ValueError:
            pass
    return Probe(False, f"unexpected answer {response.status_code}")


def probe_bybit(state: WorldState, timeout: float = 3.0) -> Probe:
    """The fake Bybit answers /v5/market/time with retCode 0."""
    try:
        response = httpx.get(f"{state.bybit_url}/v5/market/time", timeout=timeout)
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return Probe(False, f"no answer ({type(exc).__name__})")
    if response.status_code == 200 and body.get("retCode") == 0:
        return Probe(True, f"server time {body.get('result', {}).get('timeSecond', '?')}")
    return Probe(False, f"unexpected answer {response.status_code} {body.get('retCode')}")


def probe_ccip(state: WorldState, timeout: float = 3.0) -> Probe:
    """The CCIP executing network answers its control endpoint with the failures set."""
    if not state.ccip_url:
        return Probe(False, "not recorded (a world started before the CCIP network)")
    try:
        response = httpx.get(f"{state.ccip_url}/control/failures", timeout=timeout)
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return Probe(False, f"no answer ({type(exc).__name__})")
    if response.status_code == 200 and isinstance(body, dict):
        return Probe(True, f"failures injected: next {body.get('next')}")
    return Probe(False, f"unexpected answer {response.status_code}")


# -- start and stop --------------------------------------------------------------


def _chain_pids(chains: Sequence[RunningChain]) -> dict[str, int]:
    return {c.key: c.pid for c in chains}


def start_world(
    state_dir: Path,
    *,
    iris_port: int = 0,
    bybit_port: int = 0,
    ccip_port: int = 0,
    time_scale: float = DEFAULT_TIME_SCALE,
    fund: Decimal = DEFAULT_FUND_BALANCE,
    timeout: float = START_TIMEOUT_S,
    stargate_bus_wait: float | None = STARGATE_BUS_WAIT_S,
) -> tuple[WorldState, bool]:
    """The serve process over the chains of ``state_dir`` (which must run, the
    exchange's keys made and its hot wallet funded: `qtg world up` does both):
    the one recorded when it runs over these same chains, else a new one (a
    stale one over other chains stopped first). ``stargate_bus_wait``: protocol
    seconds a bus waits before the relayer drives it (None: never, whoever sends
    drives it). Returns (state, started now)."""
    chains = read_state(state_dir)
    if not chains or not all(is_running(c) for c in chains):
        raise ChainError(f"the local chains of {state_dir} do not run: `qtg chains up` first")
    current = read_world(state_dir)
    if current is not None and serve_running(current):
        if current.chain_pids == _chain_pids(chains):
            return current, False
        _stop_pid(current.pid)
    (world_dir(state_dir) / STATE_FILE_NAME).unlink(missing_ok=True)
    ensure_api_key(state_dir)
    log_file = world_dir(state_dir) / LOG_FILE_NAME
    args = [
        sys.executable, "-m", MODULE,
        "--state-dir", str(state_dir.resolve()),
        "--iris-port", str(iris_port),
        "--bybit-port", str(bybit_port),
        "--ccip-port", str(ccip_port),
        "--time-scale", repr(time_scale),
        "--fund", str(fund),
        "--stargate-bus-wait", "-1" if stargate_bus_wait is None else repr(stargate_bus_wait),
    ]  # fmt: skip
    with log_file.open("ab") as out:
        # a session of its own: `qtg world up` returns and the world stays up
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(state_dir),
        )
    deadline = time.monotonic() + timeout
    while True:
        state = read_world(state_dir)
        if state is not None and state.pid == proc.pid:
            return state, True
        if proc.poll() is not None:
            tail = log_file.read_text(errors="replace").strip().splitlines()[-3:]
            raise ChainError(
                f"the world's serve process exited with {proc.returncode} before it was "
                f"ready: {' / '.join(tail)} (log: {log_file})"
            )
        if time.monotonic() > deadline:
            _stop_pid(proc.pid)
            raise ChainError(
                f"the world's serve process was not ready within {timeout:.0f}s (log: {log_file})"
            )
        time.sleep(0.1)


def _stop_pid(pid: int, timeout: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; whether it had to be killed."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        except ChildProcessError:
            if not pid_alive(pid):
                return False
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        kill_deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < kill_deadline:
            time.sleep(0.05)
    return True


def stop_world(state_dir: Path, timeout: float = STOP_TIMEOUT_S) -> WorldState | None:
    """Stop the serve process recorded in ``state_dir`` (SIGTERM, SIGKILL after
    ``timeout``) and remove its state file; the key file stays. Returns what was
    recorded (None: nothing was)."""
    state = read_world(state_dir)
    if state is None:
        return None
    if serve_running(state):
        _stop_pid(state.pid, timeout)
    (world_dir(state_dir) / STATE_FILE_NAME).unlink(missing_ok=True)
    return state


# -- the serve process -----------------------------------------------------------


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``python -m qtg_world``: both doubles in this process until SIGTERM."""
    from qtg_runner import signers
    from qtg_world import bybit, ccip, iris, stargate
    from qtg_world.chains.ccip import ensure_don_key
    from qtg_world.chains.cctp import load_attesters, read_domain
    from qtg_world.chains.keys import ensure_treasury_keys
    from qtg_world.chains.stargate import stargate_eid

    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--iris-port", type=int, default=0)
    parser.add_argument("--bybit-port", type=int, default=0)
    parser.add_argument("--ccip-port", type=int, default=0)
    parser.add_argument("--time-scale", type=float, default=DEFAULT_TIME_SCALE)
    parser.add_argument("--fund", type=Decimal, default=DEFAULT_FUND_BALANCE)
    parser.add_argument("--stargate-bus-wait", type=float, default=STARGATE_BUS_WAIT_S)
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.time_scale <= 0:
        parser.error("--time-scale is positive")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    state_dir: Path = args.state_dir
    chains = [c for c in read_state(state_dir) if is_running(c)]
    if not chains:
        log.error("no local chains run in %s: `qtg chains up` first", state_dir)
        return 1
    key_file = api_key_file(state_dir)
    api_key, api_secret = load_api_key(key_file)
    chain_env = chains_runner_env(state_dir)
    keys = bybit.ensure_exchange_keys(state_dir)
    hot = signers.load(keys.hot.signer_id, env=chain_env)
    attesters = load_attesters(state_dir)
    don = signers.load(ensure_don_key(state_dir).signer_id, env=chain_env)
    scale = 1.0 / args.time_scale  # the doubles' time scale: real seconds per protocol second

    handles: list[Any] = []
    try:
        iris_handle = iris.serve(
            chains, attesters, iris.IrisConfig(time_scale=scale), port=args.iris_port
        )
        handles.append(iris_handle)
        exchange = bybit.serve(
            [bybit.bybit_chain(c, keys.deposit.address) for c in chains],
            {api_key: api_secret},
            hot,
            bybit.BybitConfig(time_scale=scale),
            port=args.bybit_port,
        )
        handles.append(exchange)
        bus_wait = args.stargate_bus_wait if args.stargate_bus_wait >= 0 else None
        handles.append(
            stargate.serve(chains, stargate.RelayerConfig(bus_wait_s=bus_wait, time_scale=scale))
        )
        network = ccip.serve(
            chains,
            don,
            ccip.CcipConfig(time_scale=scale, attestation_url=iris_handle.url),
            port=args.ccip_port,
        )
        handles.append(network)
        # the local treasury accounts are on the address book, on every chain
        for account in ensure_treasury_keys(state_dir):
            exchange.whitelist(account.address)
        if args.fund > 0:
            exchange.credit(args.fund)
        state = WorldState(
            pid=os.getpid(),
            iris_url=iris_handle.url,
            bybit_url=exchange.url,
            key_file=str(key_file.resolve()),
            log_file=str((world_dir(state_dir) / LOG_FILE_NAME).resolve()),
            time_scale=args.time_scale,
            iris_domains={c.key: read_domain(c) for c in chains},
            chain_pids=_chain_pids(chains),
            deposit_address=keys.deposit.address,
            hot_wallet=keys.hot.address,
            stargate_eids={c.key: stargate_eid(c) for c in chains if "StargatePool" in c.contracts},
            ccip_url=network.url,
        )
        _write_world(state_dir, state)
        log.info(
            "local outside world serving: iris %s, bybit %s, ccip %s, time scale %sx (pid %d)",
            state.iris_url, state.bybit_url, state.ccip_url, args.time_scale, state.pid,
        )  # fmt: skip
        while not stop.wait(1.0):
            if not any(is_running(c) for c in chains):
                log.warning("the local chains stopped: the world stops with them")
                break
    finally:
        for handle in reversed(handles):
            handle.stop()
        del hot, attesters, api_secret, don
    log.info("local outside world stopped")
    return 0
