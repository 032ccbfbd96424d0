"""Failpoints: named places where a drill or a test can make a runner die.

``QTG_FAILPOINTS=after_intent,after_submit`` makes the process SIGKILL itself
when it reaches one of those points, as a crash or an OOM kill would, so
tests can prove that recovery resolves every such gap from evidence. Unset
(always, in production) they cost one set lookup.
"""

from __future__ import annotations

import os
import signal

_ARMED = frozenset(p.strip() for p in os.environ.get("QTG_FAILPOINTS", "").split(",") if p.strip())


def failpoint(name: str) -> None:
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
