"""Failpoints: named places where a drill or a test can make a runner fail.

``QTG_FAILPOINTS`` is a comma-separated list of armed points:

  after_intent, after_submit   the dispatcher SIGKILLs its own process right
                               after committing the intent / right after the
                               side effect, as a crash or an OOM kill would;
  crash:<worker>               that worker's batch raises a bug-like error
                               (not an operational one), to prove the
                               supervisor's tier policy.

Unset (always, in production) they cost one set lookup.
"""

from __future__ import annotations

import os
import signal

_ARMED = frozenset(p.strip() for p in os.environ.get("QTG_FAILPOINTS", "").split(",") if p.strip())


class FailpointCrash(RuntimeError):
    """Raised by an armed crash:<worker> failpoint."""


def failpoint(name: str) -> None:
    """SIGKILL this process if ``name`` is armed."""
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)


def crash_point(worker: str) -> None:
    """Raise FailpointCrash if ``crash:<worker>`` is armed."""
    if f"crash:{worker}" in _ARMED:
        raise FailpointCrash(f"failpoint crash:{worker} is armed")
