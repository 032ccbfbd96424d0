"""The request handler every loopback double of an outside service answers
with (Iris, the CCIP explorer, Bybit; the tests' silent endpoint and the
bench's stand-in world): quiet, and a JSON document sent with its length."""

from __future__ import annotations

import json
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests and `qtg world` show what matters

    def send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        """``payload`` as the whole answer, with ``status`` and ``headers``."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
