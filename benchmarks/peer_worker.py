"""One process of a Python peer queue: set up its schema, bulk-enqueue, or drain.

    python -m benchmarks.peer_worker procrastinate setup   DSN
    python -m benchmarks.peer_worker procrastinate enqueue DSN N
    python -m benchmarks.peer_worker procrastinate work    DSN CONCURRENCY
    python -m benchmarks.peer_worker pgqueuer      ...     (CONCURRENCY = dequeue tasks)

Each peer is used as its documentation says: its own bulk enqueue call, its
own worker loop, and a no-op job. A worker drains the queue and exits.
"""

from __future__ import annotations

import asyncio
import logging
import sys

NOOP = "bench_noop"


# -- Procrastinate -----------------------------------------------------------


def _procrastinate_app(dsn: str, pool_size: int = 10):  # type: ignore[no-untyped-def]
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1, max_size=pool_size)
    )

    @app.task(name=NOOP)
    async def bench_noop() -> None:
        return None

    return app, bench_noop


async def procrastinate_main(action: str, dsn: str, arg: int) -> None:
    app, task = _procrastinate_app(dsn, pool_size=max(arg, 1) + 2 if action == "work" else 4)
    async with app.open_async():
        if action == "setup":
            await app.schema_manager.apply_schema_async()
        elif action == "enqueue":
            # the documented bulk enqueue: one batch_defer call, one INSERT
            await task.batch_defer_async(*({} for _ in range(arg)))
        elif action == "work":
            await app.run_worker_async(
                concurrency=arg,
                wait=False,  # exit once the queue is drained
                listen_notify=False,
                install_signal_handlers=True,
                delete_jobs="never",
            )


# -- PgQueuer ----------------------------------------------------------------


async def _asyncpg_connect(dsn: str):  # type: ignore[no-untyped-def]
    """asyncpg takes keywords, not a libpq key=value string."""
    import asyncpg
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    return await asyncpg.connect(
        host=params.get("host"),
        port=int(params.get("port") or 5432),
        user=params.get("user"),
        password=params.get("password"),
        database=params.get("dbname"),
    )


async def pgqueuer_main(action: str, dsn: str, arg: int) -> None:
    from pgqueuer import AsyncpgDriver, PgQueuer, Queries
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    if action == "setup":
        conn = await _asyncpg_connect(dsn)
        await Queries(AsyncpgDriver(conn)).install()
        await conn.close()
    elif action == "enqueue":
        conn = await _asyncpg_connect(dsn)
        # the documented bulk enqueue: lists of entrypoints, payloads and priorities
        await Queries(AsyncpgDriver(conn)).enqueue([NOOP] * arg, [None] * arg, [0] * arg)
        await conn.close()
    elif action == "work":
        # as PgQueuer's own drain benchmark: several dequeue loops, each with its
        # own connection, batch size 10, asyncpg
        async def one() -> None:
            conn = await _asyncpg_connect(dsn)
            pgq = PgQueuer(AsyncpgDriver(conn))

            @pgq.entrypoint(NOOP)
            async def bench_noop(job: Job) -> None:
                return None

            await pgq.run(batch_size=10, mode=QueueExecutionMode.drain)

        await asyncio.gather(*(one() for _ in range(arg)))


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    peer, action, dsn = argv[0], argv[1], argv[2]
    arg = int(argv[3]) if len(argv) > 3 else 0
    runner = {"procrastinate": procrastinate_main, "pgqueuer": pgqueuer_main}[peer]
    asyncio.run(runner(action, dsn, arg))


if __name__ == "__main__":
    main(sys.argv[1:])
