"""What a request passes before an endpoint sees it: one ASGI middleware.

In this order, before a byte of the body is read:

1. A declared ``Content-Length`` over ``MAX_BODY_BYTES``: 413.
2. A request that changes something under /v1 (POST, PUT, PATCH, DELETE)
   sent by another site: 403. A browser sends a form, or a "simple" fetch,
   to another site without asking it first, and with the Basic credentials
   it remembers for that site; ``cross_site`` names such a request by its
   ``Origin``, or without one its ``Sec-Fetch-Site``, or without that its
   ``Referer``. A form's content type (urlencoded, multipart, text/plain), or
   a body not declared JSON: 415, since the endpoints take JSON only.
3. Under /v1, /metrics, and /readyz when it carries credentials: the
   caller's login, checked by the database (a connection as that login,
   api/identity.py), unless the throttle refuses the attempt first (429).
   An unauthenticated request is answered 401 with its body unread.

Then the body is counted as it arrives: past ``MAX_BODY_BYTES`` the request
is refused (413) and nothing more is read, and not whole ``BODY_SECONDS``
after the request came, it is refused too (408). Whatever the answer, one given
before the body's end closes the connection, so the server stops reading it
(uvicorn would otherwise read on, and drop, the rest).

The throttle counts failed authentications (a wrong password or token, a
malformed Authorization header, a failed sign-in on the operator page) in a
sliding window per login and per client address: ``per_login`` failures a
minute refuse that login's attempts from any address not its own (below),
``per_address`` failures
refuse that address's attempts for any login, each until its oldest failure
in the window is a minute old (429 with Retry-After). Another address's
failures refuse a login only through its own per-login count; a success
counts for nothing. An address the login authenticated from within
``known_for`` (a week) is its own: there the login answers to one count for
all its known addresses (``per_login`` a minute), and to a count of the
address's attempts at logins known there (``per_address`` a minute), so
neither guesses from addresses new to the login nor junk sent from its own
address (a NAT or proxy it shares: malformed headers, logins new to it) can
lock it out where it works, while guesses spread over the logins known at
one address are held to ``per_address`` a minute as before. An IPv6
client is counted by its /64, whose addresses are all one subscriber's to
use. A login is so guessed at most twice ``per_login`` times a minute:
once from new addresses, once from its known ones (from which only someone
at one of them, behind the same NAT say, can guess). A login's known
addresses are kept in memory too, at most ``max_keys`` of them across
logins, the stalest dropped first: a login that signs in from that many
addresses in a week can push another's out. An attempt in flight counts as
a failure until the database has answered, so concurrent guesses cannot
overrun the limits (and at most twice ``per_login`` connections of one
login are being opened at once: an operator login holds at most 10 anyway,
a reader 5). The counts live in
the memory of this API process: each process (or replica) counts its own,
and a restart forgets them. The address is the TCP peer's (proxy headers
are not trusted), so behind a reverse proxy every client shares the proxy's.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import psycopg
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from qtg_runner.api.identity import Credentials, Database, parse_authorization
from qtg_runner.api.problems import Problem, problem_response

log = logging.getLogger("qtg.api")

MAX_BODY_BYTES = 2 * 1024 * 1024
"""A request body larger than this is refused (413) as soon as it is seen to be;
the engine's own bound on a plan is 1 MiB (engine_limits.max_plan_bytes)."""

CALLER = "qtg.caller"
"""The scope key of the connection as the caller's login (api/app.py's ``Conn``)."""

CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
"""The content types a browser sends to another site without a CORS preflight."""


BODY_SECONDS = 30.0
"""A request's body must have arrived whole this long after the request did
(2 MiB at 70 KB/s): a client that trickles it would otherwise hold its
login's database connection, opened before the body is read, for as long as
it likes (an operator login has 10, a reader 5)."""


class BodyTooSlow(HTTPException):
    """Raised by the guard's ``receive`` once a body is not whole by its deadline."""

    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"a request body must arrive whole within {seconds:g} s")


class BodyTooLarge(HTTPException):
    """Raised by the guard's ``receive`` once a body passes ``MAX_BODY_BYTES``."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"a request body is at most {limit // (1024 * 1024)} MiB")


def too_large(limit: int) -> Problem:
    return Problem(413, "Request body too large", BodyTooLarge(limit).detail)


# -- the throttle ------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One authentication attempt, counted as a failure until forgiven."""

    keys: tuple[str, ...]
    at: float
    known_as: str | None = None
    """The login and address, for ``welcome`` (None: no login named)."""


@dataclass
class Throttle:
    """Failed authentications per login and per client address, in a sliding
    window (this process's memory; see the module's docstring)."""

    window: float = 60.0
    per_login: int = 10
    per_address: int = 30
    clock: Callable[[], float] = time.monotonic
    known_for: float = 7 * 24 * 3600.0
    """How long an address a login authenticated from stays the login's own."""
    max_keys: int = 10_000
    """Logins and addresses tracked at most, and logins' known addresses: beyond,
    the stalest are dropped."""
    failures: dict[str, deque[float]] = field(default_factory=dict, repr=False)
    known: dict[str, float] = field(default_factory=dict, repr=False)
    """The login at an address it authenticated from -> when it last did."""

    def admit(self, login: str | None, address: str) -> Attempt:
        """Count an attempt as ``login`` from ``address`` (a failure until
        ``forgive``), or refuse it (429) when either has failed too often."""
        now = self.clock()
        address = address_key(address)
        # keys a login cannot forge: a login holds no ':' (identity.LOGIN_PATTERN)
        known_as = None if login is None else f"{login}:{address}"
        if known_as is not None and self.known.get(known_as, -math.inf) > now - self.known_for:
            # at its own address a login answers to its own count, and to the count of
            # the address's known logins, which junk sent from there (a shared NAT or
            # proxy: malformed headers, logins new to it) never fills: it cannot lock
            # the login out, and guesses spread over the address's known logins are
            # held to per_address a minute as before
            limits = [
                (f"login {login}:known", self.per_login, f"login {login!r} at its own addresses"),
                (f"address {address}:known", self.per_address, "your address, for its logins"),
            ]
        else:
            limits = [(f"address {address}", self.per_address, "your address")]
            if login is not None:
                limits.append((f"login {login}", self.per_login, f"login {login!r}"))
        for key, limit, who in limits:
            times = self.failures.get(key)
            if times is not None and len(times) >= limit and times[0] > now - self.window:
                wait = max(1, math.ceil(times[0] + self.window - now))
                log.warning("event=api_throttled key=%r retry_after=%d", key, wait)
                raise Problem(
                    429,
                    "Too many failed authentications",
                    f"{who} has failed to authenticate {limit} times within "
                    f"{self.window:g} s; try again in {wait} s",
                    headers={"Retry-After": str(wait)},
                )
        self._make_room(now, len(limits))
        for key, limit, _ in limits:
            self.failures.setdefault(key, deque(maxlen=limit)).append(now)
        return Attempt(tuple(key for key, _, _ in limits), now, known_as)

    def forgive(self, attempt: Attempt) -> None:
        """The attempt did not fail (the password was right, or the database
        did not answer): it no longer counts."""
        for key in attempt.keys:
            times = self.failures.get(key)
            if times is not None and attempt.at in times:
                times.remove(attempt.at)
                if not times:
                    del self.failures[key]

    def welcome(self, attempt: Attempt) -> None:
        """The attempt authenticated: its address is the login's own from now
        (``known_for``), and it no longer counts as a failure."""
        self.forgive(attempt)
        if attempt.known_as is None:
            return
        self.known.pop(attempt.known_as, None)  # re-inserted last: the freshest
        self.known[attempt.known_as] = attempt.at
        while len(self.known) > self.max_keys:
            del self.known[next(iter(self.known))]  # the stalest

    def _make_room(self, now: float, wanted: int) -> None:
        if len(self.failures) + wanted <= self.max_keys:
            return
        for key, times in list(self.failures.items()):
            if times[-1] <= now - self.window:
                del self.failures[key]
        # addresses go first: a flood from many addresses (one per key, for the
        # price of a malformed header each) must not wash out a login's count
        for key in [k for k in self.failures if k.startswith("address ")]:
            if len(self.failures) + wanted <= self.max_keys:
                return
            del self.failures[key]
        while len(self.failures) + wanted > self.max_keys:
            del self.failures[next(iter(self.failures))]  # the longest tracked


def address_key(address: str) -> str:
    """A client's address as the throttle counts it: an IPv6 client by its /64
    (the block one subscriber is given, whose addresses are all its own to
    use), an IPv4 one, or an IPv4 address mapped into IPv6, as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network((ip, 64), strict=False))
    return str(ip)


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


async def authenticate(
    database: Database, throttle: Throttle, credentials: Credentials, address: str
) -> psycopg.AsyncConnection[Any]:
    """A connection as ``credentials``' login, its attempt counted by the
    throttle: a refused password stays counted as a failure."""
    attempt = throttle.admit(credentials.login, address)
    try:
        conn = await database.connect(credentials)
    except Problem as problem:
        if problem.status != 401:
            throttle.forgive(attempt)
        else:
            log.warning(
                "event=api_login_failed login=%r address=%s", credentials.login[:63], address
            )
        raise
    except BaseException:
        throttle.forgive(attempt)
        raise
    throttle.welcome(attempt)
    return conn


async def caller_connection(
    database: Database, throttle: Throttle, headers: Headers, address: str
) -> psycopg.AsyncConnection[Any]:
    """The connection as the login the Authorization header names, or the
    problem why not (401, 403, 429, 503)."""
    header = headers.get("authorization")
    try:
        credentials = parse_authorization(header)
    except Problem:
        if header:  # malformed credentials: a failure of the address (or 429 for it)
            throttle.admit(None, address)
        raise
    return await authenticate(database, throttle, credentials, address)


# -- cross-site requests -----------------------------------------------------------------


def cross_site(headers: Headers) -> str | None:
    """Why a request comes from another origin than the host it was sent to,
    or None: its Origin names another host and port (or is ``null``); without
    an Origin, its Sec-Fetch-Site is neither ``same-origin`` nor ``none``;
    without either, its Referer names another host. A request with none of
    the three (a client that is not a browser) is not cross-site."""
    host = headers.get("host", "").lower()
    origin = headers.get("origin")
    if origin is not None:
        if origin == "null" or urlsplit(origin).netloc.lower() != host:
            return f"its Origin {origin[:100]!r} is another site than this API ({host[:100]})"
        return None
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.lower() not in ("same-origin", "none"):
        return f"the browser says it comes from another site (Sec-Fetch-Site: {fetch_site[:20]})"
    referer = headers.get("referer")
    if referer is not None and urlsplit(referer).netloc.lower() != host:
        return f"its Referer is another site than this API ({host[:100]})"
    return None


def media_type(headers: Headers) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() != "0")


def changing_refusal(headers: Headers) -> Problem | None:
    """Why a request that changes something under /v1 is refused before its
    credentials are looked at: sent by another site (403), or not JSON (415)."""
    reason = cross_site(headers)
    if reason is not None:
        return Problem(
            403,
            "Cross-site request refused",
            f"a request that changes something must come from this API's own origin: {reason}",
        )
    media = media_type(headers)
    if media in FORM_TYPES or (
        has_body(headers) and media != "application/json" and not media.endswith("+json")
    ):
        return Problem(
            415,
            "Unsupported media type",
            f"this endpoint takes a JSON body (Content-Type: application/json), "
            f"not {media[:60] or 'a body of no declared type'}",
        )
    return None


# -- the middleware ------------------------------------------------------------------------


@dataclass
class BodyCount:
    expected: bool
    read: int = 0
    done: bool = False
    started: bool = False


class Guard:
    """The ASGI middleware of the module's docstring."""

    def __init__(
        self,
        app: ASGIApp,
        database: Database,
        throttle: Throttle,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_seconds: float = BODY_SECONDS,
    ) -> None:
        self.app = app
        self.database = database
        self.throttle = throttle
        self.limit = max_body_bytes
        self.body_seconds = body_seconds

    @staticmethod
    def authenticated(scope: Scope, headers: Headers) -> bool:
        path: str = scope["path"]
        return (
            path.startswith("/v1/")
            or path in ("/v1", "/metrics")
            or (path == "/readyz" and "authorization" in headers)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        body = BodyCount(expected=has_body(headers))
        body.done = not body.expected
        deadline = asyncio.get_running_loop().time() + self.body_seconds

        async def counted_receive() -> Message:
            if body.done:  # after the body: a wait for the client's disconnect
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow(self.body_seconds) from None
            if message["type"] == "http.request":
                body.read += len(message.get("body", b""))
                if body.read > self.limit:
                    raise BodyTooLarge(self.limit)
                if not message.get("more_body", False):
                    body.done = True
            return message

        async def marked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                body.started = True
                raw = list(message.get("headers", []))
                names = {name.lower() for name, _ in raw}
                for name, value in (
                    (b"cache-control", b"no-store"),
                    (b"x-content-type-options", b"nosniff"),
                ):
                    if name not in names:
                        raw.append((name, value))
                if not body.done and b"connection" not in names:
                    raw.append((b"connection", b"close"))  # the rest is never read
                message = {**message, "headers": raw}
            await send(message)

        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            length = headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > self.limit):
                raise too_large(self.limit)
            if scope["path"].startswith("/v1") and scope["method"] in CHANGING:
                refusal = changing_refusal(headers)
                if refusal is not None:
                    log.warning(
                        "event=api_refused status=%d path=%r detail=%r",
                        refusal.status,
                        scope["path"][:200],
                        refusal.detail,
                    )
                    raise refusal
            if self.authenticated(scope, headers):
                conn = await caller_connection(
                    self.database, self.throttle, headers, client_address(scope)
                )
                scope[CALLER] = conn
            await self.app(scope, counted_receive, marked_send)
        except Problem as problem:
            if body.started:
                raise
            await problem_response(problem)(scope, counted_receive, marked_send)
        except BodyTooLarge:
            if body.started:
                raise
            await problem_response(too_large(self.limit))(scope, counted_receive, marked_send)
        finally:
            if conn is not None:
                await conn.close()
