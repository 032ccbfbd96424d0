"""Early wake-up: one LISTEN connection per process on qtg_<network>_work.

The procedures NOTIFY when work appears (nodes READY, movements approved).
A notification only shortens a worker's sleep; polling stays the source of
truth, so a lost notification (or a dropped LISTEN connection) loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

import psycopg

from qtg_runner.log import event
from qtg_runner.loop import WakeGroup

RECONNECT_SECONDS = 5.0


class Wakeup:
    def __init__(self, conninfo: str, network: str) -> None:
        self._conninfo = conninfo
        self._network = network
        self._subscribers: list[tuple[frozenset[str], WakeGroup]] = []

    @property
    def channel(self) -> str:
        return f"qtg_{self._network}_work"

    def subscribe(self, kinds: Iterable[str], loops: int = 1) -> WakeGroup:
        """The wake-up of a worker of ``loops`` loops, set by notifications of
        ``kinds`` (never, when there are none)."""
        wake = WakeGroup(loops)
        kinds = frozenset(kinds)
        if kinds:
            self._subscribers.append((kinds, wake))
        return wake

    def _deliver(self, kind: str) -> None:
        for kinds, wake in self._subscribers:
            if kind in kinds:
                wake.set()

    async def run(self, stopping: asyncio.Event) -> None:
        """Listen until ``stopping`` is set, reconnecting after failures."""
        if not self._subscribers:
            return
        while not stopping.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as conn:
                    await conn.execute(f'LISTEN "{self.channel}"')
                    while not stopping.is_set():
                        # a short timeout so a stop is noticed promptly
                        async for notify in conn.notifies(timeout=0.5):
                            self._deliver(notify.payload)
            except (psycopg.Error, OSError) as exc:
                event(
                    logging.WARNING,
                    "wakeup_listen_failed",
                    network=self._network,
                    error=f"{type(exc).__name__}: {exc}",
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), RECONNECT_SECONDS)
