"""A receiver of the engine's signed callbacks: a real HTTP server on loopback
(a daemon thread) that checks every POST as a treasury system would, with the
`standardwebhooks` package: ``Webhook(secret).verify(body, headers)`` over the
exact body bytes and the ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` headers (a timestamp more than five minutes off is
refused too).

``POST <path>`` with a valid signature answers 204 and is kept as a
``Delivery``; a repeat of a ``webhook-id`` already seen is answered the same
and counted as a repeat, never as a second callback. A bad or missing
signature answers 401 and is kept as an invalid delivery (the dispatcher
retries it, and the demo fails). Anything else is a 404.

``CallbackReceiver(secret).start()`` binds a free port (or ``port``); ``.url``
is what the callback target is registered with; ``.stop()`` closes it.
``new_secret()`` makes a Standard Webhooks secret (``whsec_`` and base64 of 32
random bytes).
"""

from __future__ import annotations

import base64
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook

from qtg_runner.ports import LOOPBACK

__all__ = ["CallbackReceiver", "Delivery", "new_secret"]

MAX_BODY_BYTES = 64 * 1024


def new_secret() -> str:
    """A fresh Standard Webhooks signing secret."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass(frozen=True)
class Delivery:
    """One POST: its webhook-id, its JSON body (None when unreadable), whether
    its signature verified, and why not."""

    webhook_id: str
    payload: dict[str, Any] | None
    valid: bool
    problem: str | None = None


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
    """A dispatcher POSTs a batch at once (16 in flight in the demo): the default
    backlog of 5 would reset some of those connections."""


class CallbackReceiver:
    def __init__(self, secret: str, *, port: int = 0, path: str = "/qtg/callbacks") -> None:
        self._webhook = Webhook(secret)
        self.path = path
        self._lock = threading.Lock()
        self._deliveries: list[Delivery] = []
        self._server: ThreadingHTTPServer | None = None
        self.port = port
        """The port it listens on (the one it bound, once started)."""

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{self.path}"

    def deliveries(self) -> list[Delivery]:
        """Every POST so far, in the order received (repeats included)."""
        with self._lock:
            return list(self._deliveries)

    def _receive(self, body: bytes, headers: dict[str, str]) -> int:
        webhook_id = headers.get("webhook-id", "")
        try:
            payload = self._webhook.verify(body, headers)
            delivery = Delivery(webhook_id, payload if isinstance(payload, dict) else None, True)
        except Exception as exc:  # anything unverifiable is refused, never a 500
            delivery = Delivery(webhook_id, None, False, f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._deliveries.append(delivery)
        return 204 if delivery.valid else 401

    def start(self) -> CallbackReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if self.path != receiver.path or not 0 <= length <= MAX_BODY_BYTES:
                    self._answer(404)
                    return
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                self._answer(receiver._receive(body, headers))

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = _Server((LOOPBACK, self.port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        threading.Thread(
            target=self._server.serve_forever, name="callback-receiver", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> CallbackReceiver:
        return self if self._server is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
