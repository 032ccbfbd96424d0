"""A service endpoint that stops answering, or drips its answers: a real
loopback HTTP server for the tests of the circuits (qtg_runner.circuit), of
the clients' bounds over a whole exchange, and of what a silent service costs
the workers."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from qtg_runner.ports import LOOPBACK, free_port
from qtg_world.json_http import JsonHandler

SERVER_TIME = {
    "retCode": 0,
    "retMsg": "OK",
    "result": {"timeSecond": "1700000000", "timeNano": "1700000000000000000"},
    "time": 1700000000000,
}


class Loopback:
    """``handler`` served on a free loopback port in a daemon thread: ``url``,
    and ``stop()``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer((LOOPBACK, free_port()), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://{LOOPBACK}:{self._server.server_port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


DRIP_S = 0.05
"""A dripping answer's pace: one byte every DRIP_S seconds, each well within
any client's read timeout, the whole answer (DRIP_BYTES of padding) not."""
DRIP_BYTES = 400


class Endpoint:
    """A loopback HTTP server that records each request and, until ``answer()``
    or ``drip()``, answers none (it holds the connection open and says
    nothing). Answering, it speaks just enough of each service: a JSON-RPC
    result of 0x1 to any POST (a callback receiver's 200), Bybit's server time,
    404 to any other GET (Iris's "not indexed"); dripping, it sends the same
    answers a byte at a time."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.answering = threading.Event()
        self.dripping = threading.Event()
        self.released = threading.Event()
        endpoint = self

        class Handler(JsonHandler):
            def _heard(self) -> bool:
                endpoint.requests.append(f"{self.command} {self.path.split('?')[0]}")
                if not (endpoint.answering.is_set() or endpoint.dripping.is_set()):
                    endpoint.released.wait(30)
                    return False
                return True

            def _send(self, status: int, payload: object) -> None:
                if not endpoint.dripping.is_set():
                    self.send_json(status, payload)
                    return
                body = json.dumps(payload).encode()  # "{", the padding, the rest: still JSON
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) + DRIP_BYTES))
                self.end_headers()
                try:
                    self.wfile.write(body[:1])
                    for _ in range(DRIP_BYTES):
                        if endpoint.released.wait(DRIP_S):
                            return
                        self.wfile.write(b" ")
                    self.wfile.write(body[1:])
                except OSError:
                    pass  # the client gave up on it

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self._heard():
                    call_id = body.get("id") if isinstance(body, dict) else None
                    self._send(200, {"jsonrpc": "2.0", "id": call_id, "result": "0x1"})

            def do_GET(self) -> None:
                if self._heard():
                    if self.path.startswith("/v5/market/time"):
                        self._send(200, SERVER_TIME)
                    else:
                        self._send(404, {"error": "not found"})

        self.server = ThreadingHTTPServer((LOOPBACK, free_port()), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self) -> None:
        self.answering.set()
        self.released.set()  # the requests held so far end without an answer

    def drip(self) -> None:
        """Answer every request from now on a byte every DRIP_S seconds."""
        self.dripping.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
