"""A service endpoint that stops answering: a real loopback HTTP server for the
tests of the circuits (qtg_runner.circuit) and of what a silent service costs
the workers."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer

from qtg_runner.chains.local import LOOPBACK, free_port
from qtg_runner.world.json_http import JsonHandler

SERVER_TIME = {
    "retCode": 0,
    "retMsg": "OK",
    "result": {"timeSecond": "1700000000", "timeNano": "1700000000000000000"},
    "time": 1700000000000,
}


class Endpoint:
    """A loopback HTTP server that records each request and, until ``answer()``,
    answers none (it holds the connection open and says nothing). Answering,
    it speaks just enough of each service: a JSON-RPC result of 0x1 to any
    POST, Bybit's server time, 404 to any other GET (Iris's "not indexed")."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.answering = threading.Event()
        self.released = threading.Event()
        endpoint = self

        class Handler(JsonHandler):
            def _heard(self) -> bool:
                endpoint.requests.append(f"{self.command} {self.path.split('?')[0]}")
                if not endpoint.answering.is_set():
                    endpoint.released.wait(30)
                    return False
                return True

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self._heard():
                    self.send_json(200, {"jsonrpc": "2.0", "id": body["id"], "result": "0x1"})

            def do_GET(self) -> None:
                if self._heard():
                    if self.path.startswith("/v5/market/time"):
                        self.send_json(200, SERVER_TIME)
                    else:
                        self.send_json(404, {"error": "not found"})

        self.server = ThreadingHTTPServer((LOOPBACK, free_port()), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self) -> None:
        self.answering.set()
        self.released.set()  # the requests held so far end without an answer

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
