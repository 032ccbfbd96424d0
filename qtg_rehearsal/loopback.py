"""The JSON-RPC servers a rehearsal runs on loopback (the forks' proxies,
the relays to the real chains): one request handler, the answer left to the
server's owner."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from qtg_runner.ports import LOOPBACK

MAX_BODY = 8 * 1024 * 1024
"""The largest request read (requests are small; a batch of reads at most)."""


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up before its answer (anvil ending a fork's read)
    is no error worth a traceback."""

    daemon_threads = True
    request_queue_size = 128
    """anvil opens many connections at once to read a fork's state: the
    default backlog of 5 drops some (connection timed out) on a busy machine."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error answer."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


class LoopbackJsonRpc:
    """A server on loopback (``url``) whose every POST body, parsed, is
    answered with ``answer(body)`` (a request, or a batch: a list)."""

    def __init__(self, answer: Callable[[Any], Any], name: str) -> None:
        self._server = QuietServer((LOOPBACK, 0), _handler(answer))
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _handler(answer: Callable[[Any], Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                reply: Any = error(None, -32600, "the request is too large")
            else:
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    reply = error(None, -32700, "parse error")
                else:
                    reply = answer(body)
            data = json.dumps(reply, separators=(",", ":")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
