"""The throttling provider double (qtg_world.throttle) in front of a loopback
JSON server that echoes what it is asked, without a chain: each answer
forwarded unchanged (status, body, Content-Type; method, path, query and body
of the request as sent, under the upstream's own path); at most rate_per_s
requests admitted in any second, 429 with Retry-After and a JSON-RPC error
beyond, nothing of a refused request forwarded; block_s refusing everything
for its length; the counts with their timestamps. Every wait polls a
condition under a deadline."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from qtg_runner.ports import LOOPBACK, free_port
from qtg_world.json_http import JsonHandler
from qtg_world.throttle import LIMIT_EXCEEDED, ThrottleHandle, serve


class Echo:
    """A loopback JSON server answering each request with what it heard;
    ``status`` sets the status of its answers."""

    def __init__(self, prefix: str = "") -> None:
        self.heard: list[dict[str, Any]] = []
        self.status = 200
        echo = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def _echo(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                heard = {
                    "method": self.command,
                    "path": self.path,
                    "body": body,
                    "content_type": self.headers.get("Content-Type"),
                }
                echo.heard.append(heard)
                self.send_json(echo.status, heard)

            do_GET = do_POST = do_PUT = do_DELETE = _echo

        self.server = ThreadingHTTPServer((LOOPBACK, free_port()), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self.server.server_port}{prefix}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def echo() -> Iterator[Echo]:
    upstream = Echo()
    yield upstream
    upstream.close()


@pytest.fixture
def throttled(echo: Echo) -> Iterator[Callable[..., ThrottleHandle]]:
    handles: list[ThrottleHandle] = []

    def start(rate_per_s: int, **options: Any) -> ThrottleHandle:
        handles.append(serve(options.pop("upstream", echo.url), rate_per_s, **options))
        return handles[-1]

    yield start
    for handle in handles:
        handle.stop()


def call(client: httpx.Client, url: str, call_id: int = 1) -> httpx.Response:
    return client.post(url, json={"jsonrpc": "2.0", "id": call_id, "method": "eth_chainId"})


def until_admitted(client: httpx.Client, handle: ThrottleHandle, timeout: float = 10.0) -> float:
    """Ask until a request is admitted: when the double admitted it, by its
    own clock (the client's send time is earlier by however long the
    request took to arrive)."""
    deadline = time.monotonic() + timeout
    while call(client, handle.url).status_code != 200:
        assert time.monotonic() < deadline, "never admitted again"
        time.sleep(0.05)
    return handle.counts().admitted[-1]


def test_the_upstreams_answers_are_forwarded_unchanged() -> None:
    upstream = Echo("/v3/KEY")
    handle = serve(upstream.url, 100)
    try:
        with httpx.Client(timeout=5) as client:
            payload = {"jsonrpc": "2.0", "id": 7, "method": "eth_blockNumber", "params": []}
            answer = client.post(handle.url, json=payload)
            assert answer.status_code == 200
            assert answer.headers["Content-Type"] == "application/json"
            heard = answer.json()
            assert heard["method"] == "POST" and heard["path"] == "/v3/KEY"
            assert json.loads(heard["body"]) == payload
            assert heard["content_type"] == "application/json"

            answer = client.get(f"{handle.url}/v2/messages/6?transactionHash=0xab")
            assert answer.json()["path"] == "/v3/KEY/v2/messages/6?transactionHash=0xab"
            assert answer.json()["method"] == "GET" and answer.json()["body"] == ""

            upstream.status = 404  # an error of the upstream's is its answer too
            answer = client.put(f"{handle.url}/x", content=b"raw")
            assert answer.status_code == 404
            assert answer.json() == {
                "method": "PUT",
                "path": "/v3/KEY/x",
                "body": "raw",
                "content_type": None,
            }
            assert answer.content == json.dumps(upstream.heard[-1], separators=(",", ":")).encode()
        counts = handle.counts()
        assert len(counts.admitted) == 3 and counts.refused == ()
    finally:
        handle.stop()
        upstream.close()


@pytest.mark.parametrize("apart", [False, True], ids=["in-process", "apart"])
def test_rate_per_s_requests_are_admitted_in_a_second_and_the_rest_refused_with_429(
    echo: Echo, throttled: Callable[..., ThrottleHandle], apart: bool
) -> None:
    """Asked faster than 5 a second, the double admits 5 in any second and
    refuses the rest with 429 and its Retry-After, whatever the machine's
    pace (the properties are read from the double's own timestamps); the
    same from a process of its own, its counts read over its pipe."""
    handle = throttled(5, retry_after_s=3, apart=apart)
    with httpx.Client(timeout=5) as client:
        answers = [call(client, handle.url, call_id) for call_id in range(12)]
        deadline = time.monotonic() + 10
        while all(a.status_code == 200 for a in answers):  # a machine slower than 5 a second
            assert time.monotonic() < deadline, "never refused"
            answers.extend(call(client, handle.url, len(answers) + i) for i in range(12))
        first = handle.counts().admitted[0]
        admitted_again = until_admitted(client, handle)
    statuses = [a.status_code for a in answers]
    assert statuses[:5] == [200] * 5 and set(statuses) == {200, 429}
    for call_id, refused in enumerate(answers):
        if refused.status_code != 429:
            continue
        assert refused.headers["Retry-After"] == "3"
        assert refused.json() == {
            "jsonrpc": "2.0",
            "id": call_id,
            "error": {"code": LIMIT_EXCEEDED, "message": refused.json()["error"]["message"]},
        }
        assert "Too Many Requests" in refused.json()["error"]["message"]
    # nothing of a refused request reached the upstream
    admitted_ids = [i for i, a in enumerate(answers) if a.status_code == 200]
    assert [json.loads(h["body"])["id"] for h in echo.heard[: len(admitted_ids)]] == admitted_ids
    # the window slides: a request is admitted again once the first is a second old
    assert admitted_again >= first + 1.0
    counts = handle.counts()
    assert len(echo.heard) == len(counts.admitted) == len(admitted_ids) + 1
    assert counts.most_admitted_in_a_window() == 5
    # every refusal came while five admitted requests were less than a second old,
    # every admission while fewer were
    for refused_at in counts.refused:
        assert sum(1 for t in counts.admitted if refused_at - 1.0 < t <= refused_at) == 5
    for i, admitted_at in enumerate(counts.admitted):
        assert sum(1 for t in counts.admitted[:i] if admitted_at - 1.0 < t) < 5
    assert counts.refused_since(counts.admitted[-1]) == 0
    assert counts.admitted_since(counts.admitted[-1]) == 1


def test_a_batch_or_a_get_refused_gets_a_null_id(
    throttled: Callable[..., ThrottleHandle],
) -> None:
    handle = throttled(1)
    with httpx.Client(timeout=5) as client:
        assert call(client, handle.url).status_code == 200
        batch = client.post(handle.url, json=[{"jsonrpc": "2.0", "id": 1, "method": "x"}])
        get = client.get(f"{handle.url}/v2/messages/0")
    for refused in (batch, get):
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
        assert refused.json()["id"] is None
        assert refused.json()["error"]["code"] == LIMIT_EXCEEDED


def test_block_s_refuses_every_request_for_its_length_after_a_refusal(
    echo: Echo, throttled: Callable[..., ThrottleHandle]
) -> None:
    block_s = 2.5
    handle = throttled(3, block_s=block_s)
    with httpx.Client(timeout=5) as client:
        answers = [call(client, handle.url) for _ in range(4)]
        admitted_again = until_admitted(client, handle, timeout=block_s + 10)
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[3].headers["Retry-After"] == "3"  # the block's length, rounded up
    counts = handle.counts()
    blocked_at = counts.refused[0]
    assert admitted_again >= blocked_at + block_s
    # refused while the window had room again, the block not over
    late = [t for t in counts.refused if blocked_at + 1.1 <= t < blocked_at + block_s - 0.1]
    assert late, "no request was asked in the block's second half"
    assert len(echo.heard) == 4  # the three, and the one after the block
    assert counts.most_admitted_in_a_window() == 3


def test_the_counts_are_reset_and_a_silent_upstream_is_a_502(
    throttled: Callable[..., ThrottleHandle],
) -> None:
    handle = throttled(1)
    with httpx.Client(timeout=5) as client:
        call(client, handle.url)
        call(client, handle.url)
        assert (len(handle.counts().admitted), len(handle.counts().refused)) == (1, 1)
        handle.reset_counts()
        assert handle.counts().admitted == handle.counts().refused == ()

        closed = throttled(10, upstream=f"http://{LOOPBACK}:{free_port()}")
        answer = call(client, closed.url, 9)
    assert answer.status_code == 502
    assert answer.json()["id"] == 9 and answer.json()["error"]["code"] == -32603
