"""Case 5 (runner memory): the peak resident set (VmHWM) of a runner process.

Two runners drain the same one-step movements on the sim executor's `instant`
lane (as case 1), each in a database of its own:

* **sim only**: `qtg worker node_dispatcher`, case 1's process, in a network
  with no chain and no venue registered: the executors' modules are imported
  and their instances built (the runner always carries every shipped
  executor), but none of them makes a client.
* **every executor loaded**: `qtg run` (every worker, as deployed) in a network
  with two chains (their USDC, a treasury account each, the CCTP, Stargate and
  CCIP protocols) and a Bybit venue registered, and the runner's environment
  naming each chain's RPC URL, the venue's URL and key file, Iris's URL and a
  keystore directory. The outside world is a stand-in HTTP server in the bench
  process (``Outside``): a JSON-RPC node per chain (chain id, a fresh head
  block, zero balances), Bybit's server time and FUND balance, Iris answering
  404. So every executor's health check (executor_health, at start and every
  30 s) builds its RPC, venue and Iris clients and reads through them, and the
  sidecars (balance_snapshot, the reapers, capital_transfer_followup) run
  their first ticks against the same world. The figure is read once the
  movements are drained and every executor has reported its health, a few
  seconds later.

The treasury's signer (a keystore at eth-account's default work factor) is not
loaded in this run: no EVM node is prepared. Its cost is pinned by
tests/runner/test_runner_memory.py (the key derivation runs in a child process).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from urllib.parse import urlsplit

import psycopg

from benchmarks import engine
from benchmarks.cluster import Cluster
from benchmarks.procs import QTG, Child, runner_env, spawn, wait_for
from benchmarks.throughput import INSTANT_PLAN
from qtg_world.json_http import JsonHandler

DRAIN_TIMEOUT = 300.0
SETTLE_S = 5.0
"""Seconds the loaded runner keeps running after the drain and the health
reports, before its peak is read (the sidecars' first ticks)."""

CHAINS = {"bench-a": 31_001, "bench-b": 31_002}
TREASURY = "0x" + "a1" * 20
USDC = {"bench-a": "0x" + "c1" * 20, "bench-b": "0x" + "c2" * 20}
PROTOCOLS: dict[str, tuple[dict[str, int], tuple[str, ...]]] = {
    "cctp": ({"bench-a": 100, "bench-b": 101}, ("MessageTransmitterV2", "TokenMessengerV2")),
    "stargate": ({"bench-a": 50_101, "bench-b": 50_102}, ("StargatePool", "TokenMessaging")),
    "ccip": (
        {"bench-a": 1_001, "bench-b": 1_002},
        ("CcipRouter", "CcipOnRamp", "CcipOffRamp"),
    ),
}


def _rpc_env(chain_key: str) -> str:
    return "QTG_BENCH_RPC_" + chain_key.upper().replace("-", "_")


class _Handler(JsonHandler):
    """The stand-in outside world (see the module's header)."""

    server_version = "qtg-bench-outside"

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        if not path.startswith("/rpc/"):
            self.send_json(404, {"error": "not here"})
            return
        chain_id = int(path.removeprefix("/rpc/"))
        calls = request if isinstance(request, list) else [request]
        answers = [self._rpc(chain_id, call) for call in calls]
        self.send_json(200, answers if isinstance(request, list) else answers[0])

    def _rpc(self, chain_id: int, call: dict[str, Any]) -> dict[str, Any]:
        method = call.get("method")
        now = int(time.time())
        head = now - 1_700_000_000
        result: Any
        if method == "eth_chainId":
            result = hex(chain_id)
        elif method == "eth_blockNumber":
            result = hex(head)
        elif method == "eth_getBlockByNumber":
            result = {
                "number": hex(head),
                "hash": "0x" + f"{head:064x}",
                "parentHash": "0x" + f"{head - 1:064x}",
                "timestamp": hex(now),
                "baseFeePerGas": hex(10**9),
                "transactions": [],
            }
        elif method == "eth_call":
            result = "0x" + "00" * 32
        elif method in ("eth_getTransactionCount", "eth_getBalance"):
            result = "0x0"
        elif method in ("eth_getTransactionReceipt", "eth_getTransactionByHash"):
            result = None
        elif method == "eth_getLogs":
            result = []
        else:
            return {
                "jsonrpc": "2.0",
                "id": call.get("id"),
                "error": {"code": -32601, "message": f"the bench's node has no {method}"},
            }
        return {"jsonrpc": "2.0", "id": call.get("id"), "result": result}

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        now_ms = int(time.time() * 1000)
        if path.startswith("/iris/"):
            self.send_json(404, {"error": "Message not found"})
            return
        if path == "/bybit/v5/market/time":
            result: dict[str, Any] = {
                "timeSecond": str(now_ms // 1000),
                "timeNano": str(now_ms * 10**6),
            }
        elif path == "/bybit/v5/asset/transfer/query-account-coins-balance":
            result = {"accountType": "FUND", "balance": [{"coin": "USDC", "walletBalance": "0"}]}
        elif path.startswith("/bybit/v5/"):
            result = {"rows": [], "nextPageCursor": ""}
        else:
            self.send_json(404, {"error": "not here"})
            return
        self.send_json(
            200, {"retCode": 0, "retMsg": "OK", "result": result, "retExtInfo": {}, "time": now_ms}
        )


@contextmanager
def outside_world() -> Iterator[str]:
    """The stand-in server on loopback; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="bench-outside", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def register_world(conn: psycopg.Connection[Any]) -> None:
    """The admin's registry steps for the loaded run (as `qtg chains up` and
    `qtg world up` make them for the local chains and exchange)."""
    from qtg_runner.db import procs

    for key, chain_id in CHAINS.items():
        procs.upsert_chain(key, chain_id, _rpc_env(key), 2, 2000).one(conn)
        procs.upsert_chain_token(key, "USDC", USDC[key], 6).one(conn)
        procs.upsert_treasury_account(key, TREASURY, "keystore:bench-treasury").one(conn)
        for protocol, (remote_ids, names) in PROTOCOLS.items():
            contracts = {name: "0x" + f"{i + 1:02x}" * 20 for i, name in enumerate(names)}
            procs.upsert_chain_protocol(key, protocol, remote_ids[key], contracts).one(conn)
    venue = procs.upsert_exchange_venue(
        "bybit", "bybit", "QTG_BENCH_BYBIT_URL", "QTG_BENCH_BYBIT_KEYS"
    )
    venue.one(conn)
    for key in CHAINS:
        procs.upsert_venue_chain("bybit", key, key.upper()).one(conn)
        procs.upsert_venue_deposit_address("bybit", key, "USDC", "0x" + "d1" * 20).one(conn)


def world_env(base_url: str, secrets_dir: Path) -> dict[str, str]:
    """What the loaded runner's environment names: every URL, the venue's key
    file (mode 0600), a keystore directory."""
    key_file = secrets_dir / "bybit.json"
    key_file.write_text(json.dumps({"api_key": "bench-key", "api_secret": "bench-secret"}))
    key_file.chmod(0o600)
    env = {_rpc_env(key): f"{base_url}/rpc/{chain_id}" for key, chain_id in CHAINS.items()}
    env.update(
        QTG_BENCH_BYBIT_URL=f"{base_url}/bybit",
        QTG_BENCH_BYBIT_KEYS=str(key_file),
        QTG_IRIS_URL=f"{base_url}/iris",
        QTG_KEYSTORE_DIR=str(secrets_dir),
        QTG_KEYSTORE_PASSWORD="bench-password",
    )
    return env


def _drain(
    cluster: Cluster,
    source: str,
    name: str,
    argv: list[str],
    extra_env: dict[str, str],
    log_dir: Path,
    loaded: bool,
) -> dict[str, Any]:
    dsn = cluster.create_db(name, source)
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        if loaded:
            register_world(conn)
        engine.vacuum_analyze(conn)
        env = runner_env(cluster.runner_dsn(dsn)) | extra_env
        t0 = time.monotonic()
        child: Child = spawn(name, argv, env, log_dir)
        try:
            last = [0.0]

            def tick(now: float) -> None:
                if now - last[0] >= 0.25:
                    last[0] = now
                    child.sample_rss(now - t0)

            def done() -> bool:
                row = conn.execute(
                    "SELECT count(*) FROM movement_requests WHERE request_state <> 'COMPLETED'"
                ).fetchone()
                if not row or int(row[0]) != 0:
                    return False
                if not loaded:
                    return True
                row = conn.execute(
                    "SELECT count(*) FROM executor_status WHERE last_status IS NULL"
                ).fetchone()
                return row is not None and int(row[0]) == 0

            wait_for(done, DRAIN_TIMEOUT, f"{name} to drain", 0.25, [child], tick)
            if loaded:
                settle_until = time.monotonic() + SETTLE_S
                wait_for(
                    lambda: time.monotonic() >= settle_until,
                    SETTLE_S + 5,
                    f"{name} to settle",
                    0.25,
                    [child],
                    tick,
                )
            peak = child.peak_rss()
            health = {
                str(key): {"status": str(status), "detail": detail}
                for key, status, detail in conn.execute(
                    "SELECT executor_key, last_status, detail FROM executor_status ORDER BY 1"
                ).fetchall()
            }
        finally:
            code = child.stop()
    cluster.drop_db(name)
    return {
        "argv": " ".join(["qtg", *argv[1:]]),
        "peak_rss_mb": round(peak / 2**20, 1),
        "exit_code": code,
        "executor_health": health,
        "rss_samples_mb": [(round(t, 2), round(r / 2**20, 1)) for t, r in child.rss_samples],
    }


def run(cluster: Cluster, jobs: int, log_dir: Path) -> dict[str, Any]:
    """Both runners over ``jobs`` sim movements (at most 5,000: memory does not
    grow with them, the drain only exercises the dispatcher)."""
    movements = min(jobs, 5000)
    source = "qtg_bench_memory_src"
    dsn = engine.clone(cluster, source)
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        engine.create_movements(conn, movements, INSTANT_PLAN, "mem-")
    cluster.disconnect_all(source)
    out: dict[str, Any] = {"movements": movements}
    try:
        out["sim_only"] = _drain(
            cluster,
            source,
            "qtg_bench_memory_sim",
            [QTG, "worker", "node_dispatcher", "--concurrency", "8"],
            {},
            log_dir,
            loaded=False,
        )
        with outside_world() as base_url, TemporaryDirectory(prefix="qtg-bench-secrets-") as tmp:
            out["loaded"] = _drain(
                cluster,
                source,
                "qtg_bench_memory_loaded",
                [QTG, "run", "--concurrency", "8"],
                world_env(base_url, Path(tmp)),
                log_dir,
                loaded=True,
            )
    finally:
        cluster.drop_db(source)
    return out
