"""A rate-limited provider in front of any HTTP JSON endpoint (a local chain's
JSON-RPC, the fake Iris): a real HTTP server on loopback that answers as a
paid RPC provider or Circle's Iris does when a client asks too fast.

Every request (any method, its path, query and body) is forwarded to the
upstream, and the upstream's answer returned unchanged (its status, its body,
its Content-Type), while at most ``rate_per_s`` requests have been admitted in
the last second (a sliding window of one second: a request is admitted when
fewer than ``rate_per_s`` admitted requests are less than a second old; a
refused one takes no place in the window). Beyond that:

- HTTP 429 with ``Retry-After: retry_after_s`` (whole seconds) and a
  JSON-RPC-shaped error body, ``{"jsonrpc": "2.0", "id": <the request's id,
  null for a batch or a GET>, "error": {"code": -32005, "message": "Too Many
  Requests: ..."}}`` (-32005 is the "limit exceeded" of EIP-1474 that Infura
  answers), nothing of the request forwarded;
- with ``block_s`` > 0, every request for ``block_s`` seconds after that
  refusal is refused too (429, ``Retry-After`` what is left of the block,
  rounded up, at least ``retry_after_s``), as Iris blocks a client for five
  minutes; the window starts empty when the block ends.

An upstream that does not answer gets 502 with the same shape of body
(``code`` -32603, UPSTREAM_FAILED), so that a client sees the double's fault as a server error.

Each request is counted, admitted or refused, with its time.monotonic()
timestamp (``counts()``, ``reset_counts()``), so that a test can say how many
429s came after its warm-up; the admitted ones also by what they asked (the
JSON-RPC method of each call, a batch's each; else the HTTP method and the
path without its query), so that a test can say what a client asked.

``serve(upstream_url, rate_per_s, retry_after_s=1, block_s=0)`` starts it on a
free port (a daemon thread, or a process of its own: ``apart``) and returns
the handle: ``.url`` (given to a client in place of the upstream's URL: a
path of the upstream's, as an RPC URL's, is put before every request's),
``.stop()``, ``.counts()``, ``.reset_counts()``.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import multiprocessing.process
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException
from http.server import ThreadingHTTPServer
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

from qtg_runner.ports import LOOPBACK, free_port
from qtg_world.json_http import JsonHandler

__all__ = ["LIMIT_EXCEEDED", "ThrottleCounts", "ThrottleHandle", "serve"]

LIMIT_EXCEEDED = -32005
"""The JSON-RPC error code of a refused request (EIP-1474's "limit exceeded")."""
UPSTREAM_FAILED = -32603
"""The JSON-RPC error code of a request the upstream did not answer (internal error)."""
WINDOW_S = 1.0
"""The sliding window the rate is counted over."""
MAX_BODY_BYTES = 8 * 1024 * 1024
UPSTREAM_TIMEOUT_S = 30.0
_FORWARDED_HEADERS = ("Content-Type", "Accept")


@dataclass(frozen=True)
class ThrottleCounts:
    """The requests answered so far: the time.monotonic() of each, in order."""

    admitted: tuple[float, ...]
    refused: tuple[float, ...]
    asked: Mapping[str, int] = field(default_factory=dict)
    """The admitted requests by what they asked (see the module's docstring)."""

    def admitted_since(self, since: float) -> int:
        return sum(1 for t in self.admitted if t >= since)

    def refused_since(self, since: float) -> int:
        return sum(1 for t in self.refused if t >= since)

    def most_admitted_in_a_window(self, window_s: float = WINDOW_S) -> int:
        """The most requests admitted within any ``window_s`` (open at its end)."""
        most, first = 0, 0
        for last, t in enumerate(self.admitted):
            while t - self.admitted[first] >= window_s:
                first += 1
            most = max(most, last - first + 1)
        return most


@dataclass
class _State:
    rate_per_s: int
    retry_after_s: int
    block_s: float
    window: deque[float] = field(default_factory=deque)
    blocked_until: float = 0.0
    admitted: list[float] = field(default_factory=list)
    refused: list[float] = field(default_factory=list)
    asked: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count_asked(self, command: str, path: str, body: bytes) -> None:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        calls = parsed if isinstance(parsed, list) else [parsed]
        names = [str(c["method"]) for c in calls if isinstance(c, dict) and "method" in c]
        with self.lock:
            for name in names or [f"{command} {path.split('?', 1)[0]}"]:
                self.asked[name] = self.asked.get(name, 0) + 1

    def admit(self) -> int | None:
        """None when the request may go on (it is counted in the window), else
        the Retry-After of its 429."""
        now = time.monotonic()
        with self.lock:
            if now < self.blocked_until:
                self.refused.append(now)
                return max(self.retry_after_s, math.ceil(self.blocked_until - now))
            while self.window and self.window[0] <= now - WINDOW_S:
                self.window.popleft()
            if len(self.window) < self.rate_per_s:
                self.window.append(now)
                self.admitted.append(now)
                return None
            self.refused.append(now)
            if self.block_s > 0:
                self.blocked_until = now + self.block_s
                self.window.clear()
                return max(self.retry_after_s, math.ceil(self.block_s))
            return self.retry_after_s


def _request_id(body: bytes) -> Any:
    """The JSON-RPC id of a single call's body; None for a batch, a GET, or not JSON."""
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return None
    return parsed.get("id") if isinstance(parsed, dict) else None


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _handler(state: _State, upstream: str) -> type[JsonHandler]:
    target = urlsplit(upstream)
    host, port = target.hostname or LOOPBACK, target.port or 80
    base_path = target.path.rstrip("/")

    def upstream_path(path: str) -> str:
        """The request's path and query on the upstream: under its own path,
        the root being the upstream's path itself (an RPC URL's /v3/KEY)."""
        if base_path and (path == "/" or path.startswith("/?")):
            return base_path + path[1:]
        return base_path + path

    local = threading.local()  # one keep-alive connection to the upstream per server thread

    def forward(
        method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        for attempt in (1, 2):  # a kept-alive connection the upstream closed: once more
            conn: HTTPConnection | None = getattr(local, "conn", None)
            if conn is None:
                conn = HTTPConnection(host, port, timeout=UPSTREAM_TIMEOUT_S)
                local.conn = conn
            try:
                conn.request(method, path, body=body or None, headers=headers)
                answer = conn.getresponse()
                return answer.status, answer.getheader("Content-Type") or "", answer.read()
            except (OSError, HTTPException):
                conn.close()
                local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if 0 < length <= MAX_BODY_BYTES else b""
            retry_after = state.admit()
            if retry_after is not None:
                self.send_json(
                    429,
                    _error(
                        _request_id(body),
                        LIMIT_EXCEEDED,
                        f"Too Many Requests: more than {state.rate_per_s} requests a second",
                    ),
                    {"Retry-After": str(retry_after)},
                )
                return
            state.count_asked(self.command, self.path, body)
            headers = {name: v for name in _FORWARDED_HEADERS if (v := self.headers.get(name))}
            try:
                status, content_type, answer = forward(
                    self.command, upstream_path(self.path), body, headers
                )
            except (OSError, HTTPException) as exc:
                self.send_json(
                    502,
                    _error(
                        _request_id(body),
                        UPSTREAM_FAILED,
                        f"upstream unreachable: {type(exc).__name__}",
                    ),
                )
                return
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_PUT = do_DELETE = _relay

    return Handler


class _InProcess:
    """The double's server on a thread of this process."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread, state: _State):
        self._server, self._thread, self._state = server, thread, state

    def counts(self) -> ThrottleCounts:
        with self._state.lock:
            return ThrottleCounts(
                tuple(self._state.admitted), tuple(self._state.refused), dict(self._state.asked)
            )

    def reset_counts(self) -> None:
        with self._state.lock:
            self._state.admitted.clear()
            self._state.refused.clear()
            self._state.asked.clear()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class _Apart:
    """The double in a process of its own, told what to do over a pipe."""

    def __init__(self, process: multiprocessing.process.BaseProcess, pipe: Connection):
        self._process, self._pipe = process, pipe

    def _ask(self, command: str) -> Any:
        self._pipe.send(command)
        if not self._pipe.poll(10):
            raise TimeoutError(f"the throttling double did not answer {command!r}")
        return self._pipe.recv()

    def counts(self) -> ThrottleCounts:
        admitted, refused, asked = self._ask("counts")
        return ThrottleCounts(tuple(admitted), tuple(refused), dict(asked))

    def reset_counts(self) -> None:
        self._ask("reset")

    def stop(self) -> None:
        with contextlib.suppress(OSError, EOFError, TimeoutError):
            self._ask("stop")
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=10)
        self._pipe.close()


@dataclass
class ThrottleHandle:
    """A running throttling double."""

    url: str
    _running: _InProcess | _Apart

    def counts(self) -> ThrottleCounts:
        return self._running.counts()

    def reset_counts(self) -> None:
        """Forget the requests counted so far (not the window nor a block)."""
        self._running.reset_counts()

    def stop(self) -> None:
        self._running.stop()


def _start(
    upstream_url: str, rate_per_s: int, retry_after_s: int, block_s: float, host: str, port: int
) -> tuple[str, _InProcess]:
    state = _State(rate_per_s, retry_after_s, block_s)
    server = ThreadingHTTPServer((host, port), _handler(state, upstream_url))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="throttle", daemon=True)
    thread.start()
    bound_host, bound_port = server.server_address[:2]
    return f"http://{bound_host!s}:{bound_port}", _InProcess(server, thread, state)


def _serve_apart(pipe: Connection, args: tuple[str, int, int, float, str, int]) -> None:
    """The child process: the double, and its answers to the parent's commands."""
    url, running = _start(*args)
    pipe.send(url)
    while True:
        try:
            command = pipe.recv()
        except (EOFError, OSError):  # the parent is gone
            command = "stop"
        if command == "counts":
            counts = running.counts()
            pipe.send((counts.admitted, counts.refused, dict(counts.asked)))
        elif command == "reset":
            running.reset_counts()
            pipe.send(None)
        else:
            running.stop()
            with contextlib.suppress(OSError):
                pipe.send(None)
            return


def serve(
    upstream_url: str,
    rate_per_s: int,
    retry_after_s: int = 1,
    block_s: float = 0.0,
    host: str = LOOPBACK,
    port: int | None = None,
    apart: bool = False,
) -> ThrottleHandle:
    """Start the double in front of ``upstream_url`` (plain HTTP), admitting
    ``rate_per_s`` requests a second; ``port`` None picks a free one.
    ``apart``: in a process of its own, as a provider is, so that a busy
    client in this process never holds up the double's clock and bunches
    the arrivals it counts (the counts' times are time.monotonic(), one
    clock for every process of the machine)."""
    if rate_per_s < 1 or retry_after_s < 0 or block_s < 0:
        raise ValueError("rate_per_s must be at least 1, retry_after_s and block_s not negative")
    if urlsplit(upstream_url).scheme != "http":
        raise ValueError("the upstream must be a plain http:// URL")
    args = (upstream_url, rate_per_s, retry_after_s, block_s, host,
            free_port(host) if port is None else port)  # fmt: skip
    if not apart:
        url, running = _start(*args)
        return ThrottleHandle(url, running)
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    process = context.Process(target=_serve_apart, args=(theirs, args), daemon=True)
    process.start()
    theirs.close()
    if not mine.poll(60):
        process.kill()
        raise TimeoutError("the throttling double's process did not start")
    return ThrottleHandle(str(mine.recv()), _Apart(process, mine))
