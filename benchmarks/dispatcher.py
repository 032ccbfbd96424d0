"""A node_dispatcher process built from the runner's own parts, with or without
the LISTEN wake-up (case 2 measures both).

    python -m benchmarks.dispatcher DSN on|off [CONCURRENCY [WORKERS]]

It is what `qtg worker node_dispatcher` runs (Runtime.open, the registered
worker entry, supervise), except that with `off` no Wakeup is passed, so the
dispatcher only polls on its interval. WORKERS (comma-separated registered
worker names, default node_dispatcher) runs more workers in the same process,
as a runner does: case 2's "under load" run adds node_observer.
"""

from __future__ import annotations

import asyncio
import sys

from qtg_runner.log import configure
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.wakeup import Wakeup
from qtg_runner.workers import BY_NAME


async def main(dsn: str, notifications: bool, concurrency: int, workers: list[str]) -> int:
    runtime = await Runtime.open(
        dsn, "testnet", name="qtg-bench-dispatcher", max_concurrency=concurrency
    )
    try:
        ctx = runtime.context(concurrency)
        wakeup = Wakeup(runtime.conninfo, "testnet") if notifications else None
        return await supervise(ctx, [BY_NAME[w] for w in workers], wakeup)
    finally:
        await runtime.close()


if __name__ == "__main__":
    configure()
    dsn, mode = sys.argv[1], sys.argv[2]
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    workers = sys.argv[4].split(",") if len(sys.argv) > 4 else ["node_dispatcher"]
    sys.exit(asyncio.run(main(dsn, mode == "on", concurrency, workers)))
