"""The read-only relay between a fork and the chain it forks: anvil is given
the relay's loopback URL, never the chain's own RPC URL (which may carry the
provider's API key: a command line is readable by every user of the
machine, and anvil writes its fork URL to its log).

The relay forwards to the real RPC only the methods that read the chain's
state (READ_METHODS, single or batched), and answers every other with a
JSON-RPC error: whatever is asked of a fork, nothing but reads ever reaches
the real chain.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from qtg_runner.chains.evm_rpc import redact_url
from qtg_runner.ports import LOOPBACK

READ_METHODS = frozenset(
    {
        "eth_blockNumber",
        "eth_call",
        "eth_chainId",
        "eth_feeHistory",
        "eth_gasPrice",
        "eth_getBalance",
        "eth_getBlockByHash",
        "eth_getBlockByNumber",
        "eth_getCode",
        "eth_getProof",
        "eth_getStorageAt",
        "eth_getTransactionByHash",
        "eth_getTransactionCount",
        "eth_getTransactionReceipt",
        "eth_maxPriorityFeePerGas",
        "net_version",
        "web3_clientVersion",
    }
)
"""What a fork reads from the chain it forks (anvil's fork backend)."""
MAX_BODY = 1024 * 1024


class QuietServer(ThreadingHTTPServer):
    """A loopback server of the rehearsal's: a client that hangs up before its
    answer (anvil ending a fork's read) is no error worth a traceback."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError):
            super().handle_error(request, client_address)


class ReadOnlyRelay:
    """``.url`` on loopback relays reads to ``upstream``; ``.stop()``."""

    def __init__(self, upstream: str, timeout: float = 30.0) -> None:
        self._upstream = upstream
        self.display = redact_url(upstream)
        self._client = httpx.Client(timeout=timeout)
        self.refused: list[str] = []
        self._server = QuietServer((LOOPBACK, 0), _handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="rehearsal-relay", daemon=True
        )
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"

    def relay(self, request: Any) -> Any:
        """One request (or a batch) forwarded, or refused."""
        if isinstance(request, list):
            return [self.relay(r) for r in request]
        if not isinstance(request, dict) or request.get("method") not in READ_METHODS:
            method = request.get("method") if isinstance(request, dict) else None
            self.refused.append(str(method))
            return {
                "jsonrpc": "2.0",
                "id": request.get("id") if isinstance(request, dict) else None,
                "error": {"code": -32601, "message": f"{method} is not relayed to the real chain"},
            }
        try:
            return self._client.post(self._upstream, json=request).json()
        except (httpx.HTTPError, ValueError) as exc:
            return {
                "jsonrpc": "2.0",
                "id": request.get("id"),
                "error": {
                    "code": -32603,
                    "message": f"{self.display} did not answer: {type(exc).__name__}",
                },
            }

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        self._client.close()


def _handler(relay: ReadOnlyRelay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                answer: Any = {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32600, "message": "too large"},
                }
            else:
                try:
                    answer = relay.relay(json.loads(self.rfile.read(length)))
                except ValueError:
                    answer = {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": -32700, "message": "parse error"},
                    }
            body = json.dumps(answer, separators=(",", ":")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
