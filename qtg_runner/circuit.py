"""Circuits: a service that stops answering costs one wait, not one per call.

A call the service never answers holds its caller for the client's whole
timeout (10 s for a chain's RPC, Iris, Bybit and a callback receiver), and
whatever waits on that caller with it: the observer's chunk of nodes (locked
until its slowest observe() answers) and the batches after it, the
dispatcher's batch, the callback dispatcher's round. A service that takes
connections and says nothing (an overloaded RPC provider, a load balancer
with no backend) would make every call wait so, and with them the nodes of
every other chain and venue the runner serves.

So each endpoint (a chain's RPC URL, Iris's and Bybit's base URL, a callback
receiver's URL) has one Circuit in the process, shared by every client of
that endpoint. A call that gets no answer in time opens it. While it is open
every call fails at once, unsent, as the client's usual "unavailable"
failure (retryable; its message says why), and a probe (a read that changes
nothing: ``eth_chainId``, Iris's lookup of a hash nobody burnt, Bybit's
server time) goes out in the background once the cool-down has passed: the
cool-down is COOL_DOWN_S after the circuit opens and doubles after each
probe that gets no answer, to at most MAX_COOL_DOWN_S. Any answer closes the
circuit, the probe's or a call's sent before it opened; a call's silence
right after a probe's answer (before any call has answered) opens it again
with the next cool-down, not the first, so an endpoint that answers its
probes and no call is tried ever less often. No caller waits on a
background probe; one is sent only when a call is refused, so an endpoint
nobody calls is never probed.

An endpoint with no read that changes nothing (a callback receiver, whose
one route is its deliveries) is probed by a call instead: once the cool-down
has passed, the next call goes out as the probe (the one caller that may
wait), the others still refused; its silence doubles the cool-down as a
probe's does.

Only silence opens a circuit: a refused connection, an HTTP error or a rate
limit are answers, which the caller gets at once already.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

from qtg_runner.log import event

COOL_DOWN_S = 5.0
"""The first wait, after a call got no answer, before a probe is sent."""
MAX_COOL_DOWN_S = 30.0
"""The longest wait between probes of an endpoint that answers none."""
TRIAL_S = 60.0
"""How long a call let out as the probe (no probe function) is waited for: a
trial that never reported its answer or silence (its caller gone) lets the
next call out after this."""

Probe = Callable[[], Awaitable[object]]
"""One read that changes nothing, sent around the circuit (it must not call
``refusal``); its answer or silence is reported by the client as for any call
(``answered`` or ``silent``), whatever it returns or raises."""


class Circuit:
    """One endpoint's circuit (see the module). ``name`` is how messages and
    logs show the endpoint (never a URL's secret parts); ``clock`` counts
    seconds (time.monotonic)."""

    def __init__(self, name: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self._opened_at: float | None = None
        self._cool_down = COOL_DOWN_S
        self._probe_at = 0.0
        self._probe: asyncio.Task[None] | None = None
        self._on_probation = False
        """Closed by a probe's answer, and no call has answered since: a call's
        silence now opens the circuit with the next, longer cool-down, so an
        endpoint that answers its probes and not the calls is probed ever less
        often."""
        self._trial_until: float | None = None
        """While a call let out as the probe is out (no probe function)."""

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def refusal(self, probe: Probe | None) -> str | None:
        """None when a call may go; else why it may not (sending ``probe`` in the
        background when one is due; without one, letting this call out as the
        probe). Called from a running event loop."""
        if self._opened_at is None:
            return None
        now = self._clock()
        if now >= self._probe_at and not self._probing(now):
            if probe is None:
                self._trial_until = now + TRIAL_S
                return None
            self._probe = asyncio.get_running_loop().create_task(self._send(probe))
        return (
            f"not sent: {self.name} gave no answer to a call {now - self._opened_at:.0f} s ago"
            " and none since; its calls fail at once until it answers a probe"
            f" (one every {COOL_DOWN_S:g}-{MAX_COOL_DOWN_S:g} s)"
        )

    def silent(self) -> None:
        """A call got no answer in time: open the circuit (if it is not)."""
        if self._opened_at is not None:
            if self._trial_until is not None:  # the call let out as the probe
                self._trial_until = None
                self._wait_longer()
            return
        self._opened_at = self._clock()
        self._cool_down = (
            min(MAX_COOL_DOWN_S, self._cool_down * 2) if self._on_probation else COOL_DOWN_S
        )
        self._on_probation = False
        self._probe_at = self._opened_at + self._cool_down
        event(logging.WARNING, "circuit_opened", endpoint=self.name, probe_in_s=self._cool_down)

    @contextlib.asynccontextmanager
    async def watching(self, whole_s: float) -> AsyncIterator[None]:
        """The call inside, bounded in all by ``whole_s`` (httpx's timeout
        bounds each read, not an answer dripped a byte at a time: past this it
        is a TimeoutError), and what it came to told to the circuit: silence
        when it timed out (httpx's timeout or this bound), an answer when it
        ended any other way, an error included (cancelled: nothing)."""
        try:
            async with asyncio.timeout(whole_s):
                yield
        except (httpx.TimeoutException, TimeoutError):
            self.silent()
            raise
        except Exception:
            self.answered()
            raise
        self.answered()

    def answered(self) -> None:
        """A call got an answer (any): close the circuit (if it is open)."""
        if self._opened_at is None:
            self._on_probation = False  # the endpoint answers calls, not only probes
            return
        opened_for = self._clock() - self._opened_at
        self._opened_at = None
        self._trial_until = None
        event(logging.INFO, "circuit_closed", endpoint=self.name, open_s=round(opened_for, 1))

    def _probing(self, now: float) -> bool:
        if self._trial_until is not None and now < self._trial_until:
            return True
        task = self._probe
        return task is not None and not task.done() and not task.get_loop().is_closed()

    def _wait_longer(self) -> None:
        self._cool_down = min(MAX_COOL_DOWN_S, self._cool_down * 2)
        self._probe_at = self._clock() + self._cool_down

    async def _send(self, probe: Probe) -> None:
        with contextlib.suppress(Exception):  # the client told the circuit what came back
            await probe()
        if self._opened_at is None:
            self._on_probation = True
        else:
            self._wait_longer()


_CIRCUITS: dict[str, Circuit] = {}


def endpoint_circuit(key: str, name: str) -> Circuit:
    """The process's circuit of the endpoint ``key`` (its URL: a dictionary key
    only, never shown), made on first use with ``name``."""
    found = _CIRCUITS.get(key)
    if found is None:
        found = _CIRCUITS[key] = Circuit(name)
    return found
