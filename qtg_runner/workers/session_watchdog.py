"""session_watchdog (sidecar): ends the sessions of this network's logins that
hold a transaction open past the engine's bounds (end_stalled_sessions, in
SQL: idle in a transaction for a minute, or in one statement for two).

A login's own timeouts are its to change (SET statement_timeout = 0, ALTER
ROLE itself), and a backend that last read a pipeline's flush request stays
idle in its transaction without its idle timer: neither may hold the rows
other runners and operators need (a claim's value-limit rows, a frozen
observer's nodes and movements) for longer than the bound. The rule and the
bounds live in SQL; this module calls it and logs what it ended."""

from __future__ import annotations

import logging

from qtg_runner.db import procs
from qtg_runner.loop import WorkerContext

WORKER = "session_watchdog"


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    ended = await ctx.all(procs.end_stalled_sessions(worker_id))
    for session in ended:
        ctx.log(
            logging.WARNING,
            "session_ended",
            WORKER,
            pid=session.pid,
            login=session.login,
            state=session.state,
            held_seconds=str(session.held_seconds),
            ended=session.ended,
        )
    return len(ended)
