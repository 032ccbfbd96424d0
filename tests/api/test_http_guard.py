"""The guard of the HTTP API (qtg_runner/api/guard.py) against the attacks a
red team played on it, each played again over real HTTP against the real
server (uvicorn on loopback) and the module's own database.

Pins: a 300 MiB chunked body is answered 401 without credentials (or with
wrong ones) and 413 with them, and the server stops reading: the client's
generator is drained of at most a few socket buffers, and a body that never
ends is answered at once and the connection closed; a chunked body under
the cap still goes through. A request that changes something under /v1 from
another site (Origin, Sec-Fetch-Site, Referer) is 403, and a form's content
type (or an undeclared one) 415, before any credential is tried. Failed
authentications (Basic, bearer tokens, the operator page's sign-in) are
throttled per login and per client address with a clock the test moves:
429 with Retry-After, another address's failures block a login only through
that login's own count, concurrent guesses cannot overrun the limit, and the
window passes. A login of the other network gets 403 naming its network.
Every refusal leaves the database as it was.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from api_support import ONE_NODE, ApiWorld, api_world
from engine import fingerprint

from qtg_runner.api.app import ApiConfig
from qtg_runner.api.guard import MAX_BODY_BYTES, Throttle
from qtg_runner.api.identity import Database, server_conninfo, token_for
from qtg_runner.api.problems import Problem
from qtg_runner.api.server import serve_in_thread

CHUNK = 64 * 1024
HUGE = 300 * 1024 * 1024
READ_AT_MOST = 32 * 1024 * 1024
"""What the client may push before the server's refusal stops it: the cap
(2 MiB) and the two sockets' buffers on loopback (a few MiB each)."""


@pytest.fixture(scope="module")
def world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    yield from api_world(pg_server, template_db)


def problem(response: httpx.Response, status: int, title: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["detail"]
    if title is not None:
        assert body["title"] == title, body
    return body


class Chunks:
    """A chunked body of ``total`` bytes that counts what the client took of it."""

    def __init__(self, total: int = HUGE, prefix: bytes = b"") -> None:
        self.total = total
        self.prefix = prefix
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        block = b"x" * CHUNK
        if self.prefix:
            self.sent += len(self.prefix)
            yield self.prefix
        while self.sent < self.total:
            self.sent += CHUNK
            yield block


def post_chunked(client: httpx.Client, path: str, body: Chunks, **headers: str) -> httpx.Response:
    response = client.post(
        path, content=iter(body), headers={"content-type": "application/json", **headers}
    )
    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    return response


def answer_before_body_ends(url: str, head: str, start: bytes = b"") -> bytes:
    """Send ``head`` and the ``start`` of a body that never ends; what the
    server answers before it closes the connection (a server waiting for the
    rest of the body would leave recv to time out)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    request = head.replace("\n", "\r\n").encode() + b"\r\n"
    got = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=20) as sock:
        sock.sendall(request + start)
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            got += data
    return got


def test_an_unauthenticated_body_is_answered_401_unread(world: ApiWorld) -> None:
    alice = world.people["alice"]
    host = urlsplit(world.url).netloc
    with world.admin() as admin:
        before = fingerprint(admin)
    # a body that never ends: the 401 comes at once and the connection is closed
    for auth in ("", "Authorization: " + alice.basic()[:-4] + "AAA=\n"):
        answer = answer_before_body_ends(
            world.url,
            f"POST /v1/movements HTTP/1.1\nHost: {host}\n{auth}"
            "Content-Type: application/json\nTransfer-Encoding: chunked\n",
            b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n",
        )
        head = answer.split(b"\r\n\r\n", 1)[0].lower()
        assert head.startswith(b"http/1.1 401"), answer[:200]
        assert b"\r\nconnection: close" in head and b"www-authenticate: basic" in head
    # 300 MiB chunked, no credentials / a wrong password / a token that is not
    # alice's: 401, and the client could push only what the sockets buffer
    refusals = [
        {},
        {"Authorization": "Basic " + "bm9ib2R5Onh4eA=="},  # nobody:xxx
        {"Authorization": f"Bearer {token_for(alice.login, 'A' * 43)}"},
    ]
    for headers in refusals:
        body = Chunks()
        with httpx.Client(base_url=world.url, timeout=30) as client:
            problem(post_chunked(client, "/v1/movements", body, **headers), 401)
        assert body.sent < READ_AT_MOST, body.sent
    with world.admin() as admin:
        assert fingerprint(admin) == before


def test_a_body_is_bounded_while_it_streams(world: ApiWorld) -> None:
    with world.admin() as admin:
        before = fingerprint(admin)
    with world.client("alice") as alice:
        # as the login: refused (413) as soon as the cap is passed, the rest unread
        body = Chunks(prefix=b'{"external_id": "huge", "amount": "1", "plan": "')
        refused = post_chunked(alice, "/v1/movements", body)
        problem(refused, 413, "Request body too large")
        assert refused.headers["connection"] == "close"
        assert MAX_BODY_BYTES < body.sent < READ_AT_MOST, body.sent
        batch = Chunks(prefix=b'{"items": [')
        problem(post_chunked(alice, "/v1/movements:batch", batch), 413)
        assert batch.sent < READ_AT_MOST
        # the page's sign-in reads its form unauthenticated, and only 16 KiB of it
        form = Chunks()
        signin = alice.post(
            "/signin",
            content=iter(form),
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        problem(signin, 413)
        assert form.sent < READ_AT_MOST
        with world.admin() as admin:
            assert fingerprint(admin) == before
        # a chunked body under the cap is read whole, as ever
        whole = b'{"external_id": "chunked", "amount": "1", "plan": %s}' % (
            httpx.Request("POST", "/", json=ONE_NODE).content
        )
        pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
        created = alice.post(
            "/v1/movements", content=iter(pieces), headers={"content-type": "application/json"}
        )
        assert created.status_code == 201, created.text
        assert created.json()["external_id"] == "chunked"
    # a declared length over the cap is refused before a byte of it is sent
    answer = answer_before_body_ends(
        world.url,
        f"POST /v1/movements HTTP/1.1\nHost: {urlsplit(world.url).netloc}\n"
        f"Authorization: {world.people['alice'].basic()}\n"
        f"Content-Type: application/json\nContent-Length: {300 * 2**20}\n",
    )
    assert answer.lower().startswith(b"http/1.1 413"), answer[:200]
    assert b"\r\nconnection: close" in answer.lower()


def test_cross_site_requests_that_change_something_are_refused(world: ApiWorld) -> None:
    movement = {"external_id": "csrf", "amount": "100", "plan": ONE_NODE}
    with world.client("bob") as bob:
        made = bob.post("/v1/movements", json={**movement, "external_id": "csrf-target"})
        assert made.status_code == 201, made.text
        mid = made.json()["movement_id"]
    with world.admin() as admin:
        before = fingerprint(admin)
    cross = [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},  # a sandboxed frame, a data: URL
        {"Origin": world.url.replace("127.0.0.1", "localhost")},  # another host
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain: still another origin
        {"Referer": "https://evil.example/treasury.html"},
    ]
    with world.client("alice") as alice:
        for headers in cross:
            body = problem(
                alice.post("/v1/movements", json=movement, headers=headers),
                403,
                "Cross-site request refused",
            )
            assert "own origin" in body["detail"], body
            problem(alice.post(f"/v1/movements/{mid}/approve", headers=headers), 403)
            problem(alice.post(f"/v1/movements/{mid}/cancel", headers=headers), 403)
        # an HTML form (or a no-cors fetch) of another site: no JSON, so 415
        for content_type, content in (
            ("application/x-www-form-urlencoded", b""),
            ("application/x-www-form-urlencoded", b"reason=x"),
            ("multipart/form-data; boundary=b", b"--b\r\n\r\nx\r\n--b--\r\n"),
            ("text/plain", b'{"reason": "x"}'),
            ("text/plain;charset=UTF-8", b'{"reason": "x"}'),
        ):
            headers = {"content-type": content_type}
            refused = alice.post(f"/v1/movements/{mid}/cancel", content=content, headers=headers)
            problem(refused, 415, "Unsupported media type")
        no_type = alice.post("/v1/movements", content=b'{"a": 1}')  # no Content-Type
        assert "content-type" not in no_type.request.headers
        problem(no_type, 415)
        problem(
            alice.post("/v1/movements", content=b"{}", headers={"content-type": "text/plain"}), 415
        )
        # refused before any credential is tried
        with httpx.Client(base_url=world.url) as anonymous:
            problem(anonymous.post("/v1/movements", json=movement, headers=cross[0]), 403)
        with world.admin() as admin:
            assert fingerprint(admin) == before
        assert alice.get(f"/v1/movements/{mid}").json()["state"] == "PENDING_APPROVAL"
        # the API's own origin (a browser on it), a client that is no browser, reads
        own = alice.post(
            "/v1/movements",
            json={**movement, "external_id": "csrf-own"},
            headers={"Origin": world.url, "Sec-Fetch-Site": "same-origin"},
        )
        assert own.status_code == 201, own.text
        assert alice.post("/v1/movements", json=movement).status_code == 201
        read = alice.get(f"/v1/movements/{mid}", headers=cross[0])
        assert read.status_code == 200 and "access-control-allow-origin" not in read.headers


def test_a_login_of_the_other_network_is_told_so(world: ApiWorld) -> None:
    stranger = world.people["stranger"]
    with world.admin() as admin:
        before = fingerprint(admin)
    with world.client("stranger") as client:
        for response in (
            client.get("/v1/movements"),
            client.post(
                "/v1/movements", json={"external_id": "x", "amount": "1", "plan": ONE_NODE}
            ),
            client.post("/v1/movements/1/approve"),
            client.get("/metrics"),
            client.get("/readyz"),
        ):
            body = problem(response, 403, "Login of another network")
            assert "belongs to another network (mainnet)" in body["detail"]
            assert "serves testnet" in body["detail"] and stranger.login in body["detail"]
        page = client.post("/signin", data={"login": stranger.login, "password": stranger.password})
        assert page.status_code == 403 and "another network (mainnet)" in page.text
        assert "qtg_session" not in page.cookies
    with world.admin() as admin:
        assert fingerprint(admin) == before


@pytest.mark.parametrize("who", ["root", "owner"])
def test_an_administrative_login_is_served_nothing(world: ApiWorld, who: str) -> None:
    """A superuser (a member of every role, the embedded server's own admin
    among them) and a member of the owner role are refused, on the API and the
    page, however right their password: the API never acts as the admin. The
    answer is a wrong password's, to the letter: another answer would confirm
    the admin's password to whoever guessed it."""
    admin_login = world.people[who]
    with world.admin() as admin:
        before = fingerprint(admin)
    with world.client(who) as client:
        wrong = client.get("/v1/movements", auth=(admin_login.login, "not-the-password"))
        guessed = problem(wrong, 401, None)
        for response in (
            client.get("/v1/movements"),
            client.post(
                "/v1/movements", json={"external_id": "x", "amount": "1", "plan": ONE_NODE}
            ),
            client.post("/v1/pauses", json={"scope": "network", "name": "*", "reason": "x"}),
            client.get("/metrics"),
        ):
            assert problem(response, 401, None) == guessed
            assert response.headers["www-authenticate"] == wrong.headers["www-authenticate"]
        page = client.post(
            "/signin", data={"login": admin_login.login, "password": admin_login.password}
        )
        wrong_page = client.post(
            "/signin", data={"login": admin_login.login, "password": "not-the-password"}
        )
        assert page.status_code == wrong_page.status_code == 401 and page.text == wrong_page.text
        assert "qtg_session" not in page.cookies
    with world.admin() as admin:
        assert fingerprint(admin) == before


class Clock:
    """The throttle's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def served(world: ApiWorld, throttle: Throttle, **settings: Any) -> Iterator[str]:
    """A second API over the module's database, with this throttle (and these
    of ApiConfig's settings)."""
    config = ApiConfig(
        Database(server_conninfo(world.dsn), "testnet"), throttle=throttle, **settings
    )
    running = serve_in_thread(config)
    try:
        yield running.url
    finally:
        running.stop()


def client_from(url: str, address: str, auth: tuple[str, str] | None = None) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=url, auth=auth, transport=transport, timeout=30)


def test_failed_authentications_are_throttled_per_login_and_address(world: ApiWorld) -> None:
    alice, bob, reader, runner = (world.people[p] for p in ("alice", "bob", "reader", "runner"))
    clock = Clock()
    throttle = Throttle(window=60, per_login=3, per_address=5, clock=clock)
    with world.admin() as admin:
        before = fingerprint(admin)
    with (
        served(world, throttle) as url,
        client_from(url, "127.0.0.2") as mallory,
        client_from(url, "127.0.0.1") as here,
    ):

        def status(client: httpx.Client, who: str, password: str) -> int:
            return client.get("/v1/movements", auth=(who, password)).status_code

        # mallory guesses alice's password: three failures lock alice's login
        assert [status(mallory, alice.login, f"guess-{i}") for i in range(3)] == [401] * 3
        locked = mallory.get("/v1/movements", auth=(alice.login, alice.password))
        body = problem(locked, 429, "Too many failed authentications")
        assert locked.headers["retry-after"] == "60" and alice.login in body["detail"]
        # ... for alice from anywhere (what the per-login limit means), not for bob
        assert status(here, alice.login, alice.password) == 429
        assert status(here, bob.login, bob.password) == 200
        # two guesses at bob: mallory's address is at five failures, bob's login at two
        assert [status(mallory, bob.login, f"guess-{i}") for i in range(2)] == [401] * 2
        problem(mallory.get("/v1/movements", auth=(bob.login, bob.password)), 429)
        problem(mallory.get("/v1/movements", headers={"Authorization": "Basic !!"}), 429)
        page = mallory.post("/signin", data={"login": bob.login, "password": bob.password})
        assert page.status_code == 429 and page.headers["retry-after"] == "60"
        assert status(here, bob.login, bob.password) == 200  # bob himself, elsewhere
        clock.now += 59
        assert mallory.get("/v1/movements", auth=bob.auth).headers["retry-after"] == "1"
        clock.now += 1.5  # the window has passed: the oldest failures no longer count
        assert status(mallory, bob.login, bob.password) == 200
        assert status(here, alice.login, alice.password) == 200

        # bearer tokens and the page's sign-ins are the same attempts
        clock.now += 61
        for i in range(3):
            bad_token = {"Authorization": f"Bearer {token_for(reader.login, f'{i}' * 43)}"}
            problem(here.get("/v1/movements", headers=bad_token), 401)
        assert status(here, reader.login, reader.password) == 429
        clock.now += 61
        for i in range(3):
            page = here.post("/signin", data={"login": runner.login, "password": f"guess-{i}"})
            assert page.status_code == 401, page.text
        assert here.get("/v1/movements", auth=runner.auth).status_code == 429  # the same count
        page = here.post("/signin", data={"login": runner.login, "password": runner.password})
        assert page.status_code == 429 and "try again in 60 s" in page.text

        # concurrent guesses: an attempt in flight counts, so exactly the limit get through
        clock.now += 61
        with ThreadPoolExecutor(12) as pool:
            statuses = list(pool.map(lambda i: status(here, bob.login, f"parallel-{i}"), range(12)))
        assert sorted(statuses) == [401] * 3 + [429] * 9
        # successes are not failures
        clock.now += 61
        assert [status(here, alice.login, alice.password) for _ in range(8)] == [200] * 8
    with world.admin() as admin:
        assert fingerprint(admin) == before


def test_guesses_from_elsewhere_do_not_lock_a_login_out_where_it_works(
    world: ApiWorld,
) -> None:
    """alice works from 127.0.0.1. mallory, at 127.0.0.2, fails her password
    until her login is refused from anywhere: alice still gets in where she
    authenticated before, not from an address new to her, and no login
    mallory can name (her login and address spelled as one) counts against
    her there. Guesses from her own addresses are held to one count of
    their own, and an address she has not used for a week is new again."""
    alice = world.people["alice"]
    clock = Clock()
    throttle = Throttle(window=60, per_login=3, per_address=50, clock=clock)
    with (
        served(world, throttle) as url,
        client_from(url, "127.0.0.2") as mallory,
        client_from(url, "127.0.0.1") as here,
        client_from(url, "127.0.0.3") as elsewhere,
    ):

        def status(client: httpx.Client, password: str) -> int:
            return client.get("/v1/movements", auth=(alice.login, password)).status_code

        assert status(here, alice.password) == 200
        assert [status(mallory, f"guess-{i}") for i in range(3)] == [401] * 3
        assert status(mallory, alice.password) == 429
        assert status(elsewhere, alice.password) == 429
        assert status(here, alice.password) == 200  # where she works
        for forged in (f"{alice.login} at 127.0.0.1", f"{alice.login}:known"):
            for i in range(4):  # no such login: refused, counted as its own
                mallory.get("/v1/movements", auth=(forged, f"guess-{i}"))
        assert status(here, alice.password) == 200
        # guesses at her own address count there, to the same limit
        assert [status(here, f"guess-{i}") for i in range(3)] == [401] * 3
        refused = here.get("/v1/movements", auth=(alice.login, alice.password))
        detail = problem(refused, 429)["detail"]
        assert "at its own addresses has failed to authenticate 3 times" in detail
        clock.now += 61
        assert status(here, alice.password) == 200
        # a week without her at that address: it is new to her again
        clock.now += throttle.known_for + 1
        assert [status(mallory, f"guess-{i}") for i in range(3)] == [401] * 3
        assert status(here, alice.password) == 429


def test_junk_from_an_address_does_not_lock_out_a_login_at_home_there(
    world: ApiWorld,
) -> None:
    """Behind one NAT or proxy, one client sending malformed credentials
    fills the address's count for the price of a header each: a login that
    authenticated from that address before still gets in there (its own
    count holds it), while a login new to the address is refused."""
    alice, bob = world.people["alice"], world.people["bob"]
    throttle = Throttle(window=60, per_login=3, per_address=5, clock=Clock())
    with served(world, throttle) as url, client_from(url, "127.0.0.4") as shared:
        assert shared.get("/v1/movements", auth=alice.auth).status_code == 200
        for _ in range(5):
            problem(shared.get("/v1/movements", headers={"Authorization": "Basic !!!"}), 401)
        problem(shared.get("/v1/movements", headers={"Authorization": "Basic !!!"}), 429)
        assert shared.get("/v1/movements", auth=alice.auth).status_code == 200
        problem(shared.get("/v1/movements", auth=bob.auth), 429)


def test_guesses_spread_over_the_logins_known_at_an_address_are_capped_there() -> None:
    """At its own address a login answers to its own count, not to junk; but
    one client there guessing each of the logins known at that address (a
    shared NAT, a proxy every login signs in through) is held to the
    address's limit, as before, not to ten a minute for each login."""
    clock = Clock()
    throttle = Throttle(per_login=3, per_address=5, clock=clock)
    logins = ("a1", "a2", "a3")
    for login in logins:
        throttle.welcome(throttle.admit(login, "10.0.0.9"))
    for i in range(5):
        throttle.admit(logins[i % 3], "10.0.0.9")  # five failures, none past its login's three
    with pytest.raises(Problem) as refused:
        throttle.admit("a3", "10.0.0.9")
    assert refused.value.status == 429 and "your address, for its logins" in refused.value.detail
    clock.now += 61
    for _ in range(5):  # junk from there fills the address's own count only
        throttle.admit(None, "10.0.0.9")
    with pytest.raises(Problem):
        throttle.admit(None, "10.0.0.9")
    throttle.welcome(throttle.admit("a1", "10.0.0.9"))  # a login known there still gets in


def test_an_ipv6_client_is_counted_by_its_64_and_floods_wash_out_no_login() -> None:
    clock = Clock()
    throttle = Throttle(per_login=2, per_address=3, clock=clock, max_keys=50)
    for i in range(3):  # three addresses of one /64: one subscriber
        throttle.admit(None, f"2001:db8:0:7::{i + 1:x}")
    with pytest.raises(Problem) as refused:
        throttle.admit(None, "2001:db8:0:7:ffff::1")
    assert refused.value.status == 429
    throttle.admit(None, "2001:db8:0:8::1")  # the next /64 is someone else
    throttle.admit(None, "::ffff:10.1.2.3")  # an IPv4 client seen through IPv6 is itself
    assert "address 10.1.2.3" in throttle.failures
    # two guesses lock alice's login; a flood of one junk header from each of a
    # thousand addresses (more than the keys kept) does not unlock it
    for i in range(2):
        throttle.admit("alice", f"10.9.0.{i}")
    for i in range(1000):
        throttle.admit(None, f"2001:db8:{i:x}::1")
    assert len(throttle.failures) <= 50
    with pytest.raises(Problem):
        throttle.admit("alice", "10.9.1.1")


def test_a_body_that_trickles_is_refused_when_its_time_is_up(world: ApiWorld) -> None:
    """The caller's connection is opened before its body is read: a body not
    whole by the deadline is answered 408 and the connection closed, so a
    client cannot hold its login's database connections by trickling."""
    alice = world.people["alice"]
    with world.admin() as admin:
        before = fingerprint(admin)
    with served(world, Throttle(), body_seconds=0.5) as url:
        answer = answer_before_body_ends(
            url,
            f"POST /v1/movements HTTP/1.1\nHost: {urlsplit(url).netloc}\n"
            f"Authorization: {alice.basic()}\n"
            "Content-Type: application/json\nContent-Length: 100\n",
            start=b'{"external_id": "tr',
        )
    assert answer.lower().startswith(b"http/1.1 408"), answer[:200]
    assert b"\r\nconnection: close" in answer.lower() and b"within 0.5 s" in answer
    with world.admin() as admin:
        assert fingerprint(admin) == before


def test_a_body_with_many_errors_is_answered_briefly(world: ApiWorld) -> None:
    """Each unknown field of an item is an error: a batch item with 50,000 of
    them is refused as one error, and a batch of 1,000 bad items names the
    first 20 of its errors and counts them all."""
    with world.client("alice") as alice:
        flood = {"items": [{f"k{i}": 0 for i in range(50_000)}]}
        refused = problem(alice.post("/v1/movements:batch", json=flood), 422)
        assert refused["error_count"] == 1 and "at most" in refused["detail"]
        many = {"items": [{"external_id": f"m{i}", "amount": "-1"} for i in range(1000)]}
        answer = alice.post("/v1/movements:batch", json=many)
        body = problem(answer, 422)
        assert body["error_count"] == 1000 and len(body["errors"]) == 20
        assert body["detail"].startswith("1000 errors, the first 20: ")
        assert len(answer.content) < 20_000


def test_the_throttle_tracks_a_bounded_number_of_keys() -> None:
    clock = Clock()
    throttle = Throttle(per_login=2, per_address=1000, clock=clock, max_keys=50)
    for i in range(1000):
        throttle.admit(f"login_{i}", f"10.0.{i // 250}.{i % 250}")
    assert len(throttle.failures) <= 50
    throttle.forgive(throttle.admit("alice", "10.9.9.9"))
    assert "login alice" not in throttle.failures
    throttle.welcome(throttle.admit("alice", "10.2.0.1"))
    for i in range(1000):
        throttle.welcome(throttle.admit(f"login_{i}", f"10.1.{i // 250}.{i % 250}"))
        if i % 40 == 0:  # alice signs in again now and then: her address stays hers
            throttle.welcome(throttle.admit("alice", "10.2.0.1"))
    assert len(throttle.known) <= 50 and "login_999:10.1.3.249" in throttle.known
    assert "alice:10.2.0.1" in throttle.known


def test_signing_in_again_and_again_holds_a_bounded_number_of_connections(
    world: ApiWorld,
) -> None:
    """Each operator-page session holds its login's connection for its life
    (8 h): a login signing in again and again keeps at most
    max_sessions_per_login (3) of them; its oldest sessions are signed out."""
    bob = world.people["bob"]
    cookies = []
    for _ in range(6):
        with world.client() as client:
            page = client.post("/signin", data={"login": bob.login, "password": bob.password})
            assert page.status_code in (200, 303), page.text
            cookies.append(client.cookies.get("qtg_session"))
    with world.admin() as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (bob.login,)
        ).fetchone()
    assert row is not None and row[0] <= 3
    with world.client() as client:
        client.cookies.set("qtg_session", cookies[0])
        assert "signed in as" not in client.get("/").text  # the oldest was signed out
        client.cookies.set("qtg_session", cookies[-1])
        assert "signed in as" in client.get("/").text


@pytest.mark.parametrize("amount", [True, False])
def test_a_boolean_is_not_an_amount(world: ApiWorld, amount: bool) -> None:
    """JSON true passed the amount's type as the integer 1: a 1 USDC movement
    nobody wrote. Refused (422), nothing made."""
    with world.admin() as admin:
        before = fingerprint(admin)
    with world.client("alice") as alice:
        response = alice.post(
            "/v1/movements", json={"external_id": "bool-amount", "amount": amount, "plan": ONE_NODE}
        )
    assert response.status_code == 422, response.text
    assert "not true or false" in response.text
    with world.admin() as admin:
        assert fingerprint(admin) == before
