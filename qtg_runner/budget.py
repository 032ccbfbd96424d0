"""Request budgets: how fast a runner process calls each outside endpoint (a
chain's RPC URL, Iris, an exchange venue), so that a provider's rate limit is
met before a call rather than discovered by its 429.

One budget per endpoint per process, shared by every worker and client of
that endpoint in the process (``endpoint_budget``). Its rate is the
endpoint's configured rate (``<URL_VARIABLE>_RATE`` in the runner's
environment, requests per second, beside the variable holding the URL:
``QTG_RPC_BASE_SEPOLIA_RATE`` for ``QTG_RPC_BASE_SEPOLIA``; DEFAULT_RATES
otherwise, LOCAL_RATE for an endpoint on this machine) divided by the
processes sharing the endpoint, which the endpoint_budget_lease worker
learns from the database (lease_endpoints) every few seconds, times the
slowdown below.

A call takes its turn (``acquire``): one turn every 1/rate seconds, no
burst (a provider counts its limit over any second: a burst on top of the
rate would overrun it), as a generic cell rate algorithm spaces them; and
however late its caller wakes for it, or sends after it (a busy event loop
wakes every caller whose turn passed meanwhile at once, and a call may wait
for the loop between its turn and its bytes on the wire), no call starts
while the rate's number of calls are in flight or ended less than a second
ago (``done``): a call reaches the provider between its start and its end,
so no second at the provider holds more than the rate. A call in flight for
a long time so holds its place longer (at the rate r and a call's latency L,
at most r / (1 + L) calls a second when every place is taken). A turn
further away than the
caller's ``max_wait`` is not taken: EndpointThrottled, with the wait, and
nothing is sent (the dispatcher then gives the node back to READY for that
long without counting an attempt). A 429 (``slowed``) pauses the endpoint
for its Retry-After (at least MIN_PAUSE_S), halves its rate (down to a
tenth), and is shared with the other processes through the lease; each
SLOW_RECOVERY_S without a 429 gives back RECOVERY_STEP of the configured
rate.
"""

from __future__ import annotations

import asyncio
import collections
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

DEFAULT_RATES: Mapping[str, float] = {"rpc": 25.0, "iris": 30.0, "venue": 10.0}
"""Requests per second an endpoint gets when its ``_RATE`` variable is not
set: a chain RPC 25 (a common entry tier), Iris 30 (Circle allows 35 a second
and blocks for 5 minutes beyond), an exchange venue 10."""
LOCAL_RATE = 1000.0
"""The default of an endpoint on this machine (a loopback address: a local
node, the local world's doubles), which no provider limits."""
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
RATE_SUFFIX = "_RATE"
MAX_RATE = 10_000.0
MIN_FACTOR = 0.1
SLOW_RECOVERY_S = 15.0
RECOVERY_STEP = 0.05
MIN_PAUSE_S = 1.0
MAX_PAUSE_S = 600.0
IN_FLIGHT_POLL_S = 0.02
"""How often a call waiting for one in flight to end looks again."""
DEFAULT_MAX_WAIT_S = 5.0
"""How long one call waits for its turn before it is refused as throttled."""
_NAME = re.compile(r"^[a-z][a-z0-9_.:-]{0,199}$")


class BudgetError(ValueError):
    """A ``_RATE`` setting the runner cannot use."""


class EndpointThrottled(Exception):
    """A call not made: the endpoint's budget has no turn for it within the
    caller's wait (or the endpoint is paused after a 429). ``wait_s``: when a
    turn is expected."""

    def __init__(self, endpoint: str, wait_s: float, why: str) -> None:
        super().__init__(f"throttled: {endpoint} {why}; its next turn in {wait_s:.1f} s")
        self.endpoint = endpoint
        self.wait_s = wait_s


def default_rate(kind: str, url: str) -> float:
    """An endpoint's rate when none is set: LOCAL_RATE on this machine, else its kind's."""
    if urlsplit(url).hostname in LOOPBACK_HOSTS:
        return LOCAL_RATE
    return DEFAULT_RATES.get(kind, DEFAULT_RATES["rpc"])


def configured_rate(env: Mapping[str, str], url_variable: str, kind: str, url: str) -> float:
    """The rate ``<url_variable>_RATE`` sets, else the default for ``url``.
    BudgetError for a value that is not a positive number of requests a second."""
    name = url_variable + RATE_SUFFIX
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default_rate(kind, url)
    try:
        rate = float(raw)
    except ValueError:
        rate = math.nan
    if not math.isfinite(rate) or not 0 < rate <= MAX_RATE:
        raise BudgetError(
            f"{name}={raw!r} is not a rate: give requests per second, above 0 and at most "
            f"{MAX_RATE:g} (your provider's limit for this endpoint, or a little below it)"
        )
    return rate


@dataclass
class EndpointBudget:
    """One endpoint's turns in this process (see the module's docstring)."""

    name: str
    """How the lease and messages name it: ``rpc:QTG_RPC_BASE_SEPOLIA``, ``iris``..."""
    configured: float
    sharers: int = 1
    factor: float = 1.0
    paused_until: float = 0.0
    """monotonic time before which no call goes (a 429's Retry-After)."""
    slowed_until: float | None = None
    """Wall-clock time of the last pause's end, for the other processes."""
    used: bool = False
    throttled: int = 0
    """429s this process received from the endpoint."""
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    _tat: float = 0.0
    _last_slow: float = -math.inf
    _ended: collections.deque[float] = field(default_factory=collections.deque)
    """When the calls that ended in the last second ended (``done``)."""
    _in_flight: int = 0
    """Calls started (``acquire``) and not yet ``done``."""

    @property
    def rate(self) -> float:
        """This process's requests per second now."""
        return max(self.configured * self.factor / max(1, self.sharers), 0.01)

    def _recover(self, now: float) -> None:
        if self.factor < 1.0 and now - self._last_slow >= SLOW_RECOVERY_S:
            steps = int((now - self._last_slow) // SLOW_RECOVERY_S)
            self.factor = min(1.0, self.factor + RECOVERY_STEP * steps)
            self._last_slow += steps * SLOW_RECOVERY_S

    def reserve(self, max_wait: float = DEFAULT_MAX_WAIT_S) -> float:
        """A turn taken: the seconds to wait before calling (0: now).
        EndpointThrottled, taking nothing, when it is further than ``max_wait``."""
        now = self.clock()
        self.used = True
        self._recover(now)
        interval = 1.0 / self.rate
        start = max(now, self.paused_until, self._tat)
        wait = start - now
        if wait > max_wait:
            why = "is paused after a 429" if self.paused_until > now else "is at its rate"
            raise EndpointThrottled(self.name, wait, f"{why} ({self.rate:.3g} requests/s here)")
        self._tat = max(self._tat, start) + interval
        return wait

    async def acquire(self, max_wait: float = DEFAULT_MAX_WAIT_S) -> None:
        """Take a turn, waiting for it (see ``reserve``); a pause a 429 set
        while it waited is waited out too (EndpointThrottled beyond
        ``max_wait``): a turn given before the 429 sends nothing into it.
        Then it waits for a place (see the module's docstring); the call is
        in flight until ``done``."""
        wait = self.reserve(max_wait)
        while wait > 0:
            await self.sleep(wait)
            wait = self.paused_until - self.clock()
            if wait > max_wait:
                raise EndpointThrottled(
                    self.name, wait, f"is paused after a 429 ({self.rate:.3g} requests/s here)"
                )
        # a turn its caller woke for late, or a call slow to reach the wire,
        # makes no burst at the provider with the calls after it
        while (wait := self._places_taken()) > 0:
            await self.sleep(wait)
        self._in_flight += 1

    def done(self) -> None:
        """The call ``acquire`` let start has ended (answered or not): its
        place is free a second after now. Every acquire() is followed by one
        done(), whatever the call came to."""
        self._in_flight = max(0, self._in_flight - 1)
        self._ended.append(self.clock())

    def _places_taken(self) -> float:
        """How long until a place is free (0: now): the rate's number of
        calls are in flight or ended less than a second ago."""
        now = self.clock()
        while self._ended and self._ended[0] <= now - 1.0:
            self._ended.popleft()
        if len(self._ended) + self._in_flight < max(1, int(self.rate)):
            return 0.0
        if self._ended:
            return self._ended[0] + 1.0 - now
        return IN_FLIGHT_POLL_S

    def slowed(self, retry_after: float | None) -> float:
        """A 429: pause for ``retry_after`` (at least MIN_PAUSE_S, at most
        MAX_PAUSE_S) and halve the rate. Returns the pause."""
        pause = min(MAX_PAUSE_S, max(MIN_PAUSE_S, retry_after or 0.0))
        now = self.clock()
        self.paused_until = max(self.paused_until, now + pause)
        self.slowed_until = max(self.slowed_until or 0.0, self.wall() + pause)
        self.factor = max(MIN_FACTOR, self.factor / 2)
        self._last_slow = now
        self.throttled += 1
        return pause

    def leased(self, sharers: int, slowed_until: float | None) -> None:
        """What the database says of the endpoint: the processes sharing it
        now, and the latest pause any of them was told (wall-clock time)."""
        self.sharers = max(1, sharers)
        if slowed_until is not None:
            left = slowed_until - self.wall()
            if left > 0:
                self.paused_until = max(self.paused_until, self.clock() + min(left, MAX_PAUSE_S))


_BUDGETS: dict[str, EndpointBudget] = {}


def endpoint_budget(key: str, name: str, rate: float | None) -> EndpointBudget:
    """The process's budget of the endpoint ``key`` (its URL: two variables
    naming one URL share one budget), made on first use at ``rate``, or at
    the default for its kind (the part of ``name`` before ':') and URL when None. A later
    caller's rate sets it (the configuration read last wins); None keeps it."""
    if not _NAME.match(name):
        raise BudgetError(f"{name!r} is not an endpoint name (lower case, digits, _.:-)")
    budget = _BUDGETS.get(key)
    if budget is None:
        kind = name.split(":", 1)[0]
        budget = _BUDGETS[key] = EndpointBudget(name, rate or default_rate(kind, key))
    elif rate is not None:
        budget.configured = rate
    return budget


def forget_budgets() -> None:
    """Every budget of the process dropped (a test's next endpoint starts afresh)."""
    _BUDGETS.clear()


def used_budgets() -> list[EndpointBudget]:
    """The budgets this process has called through."""
    return [b for b in _BUDGETS.values() if b.used]


def endpoint_name(kind: str, url_variable: str | None = None) -> str:
    """How a lease names an endpoint: ``rpc:qtg_rpc_base_sepolia``, ``iris``."""
    return f"{kind}:{url_variable}".lower() if url_variable else kind
