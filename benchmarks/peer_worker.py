"""One process of a Python peer queue: set up its schema, bulk-enqueue, or drain.

    python -m benchmarks.peer_worker procrastinate setup   DSN
    python -m benchmarks.peer_worker procrastinate enqueue DSN N
    python -m benchmarks.peer_worker procrastinate work    DSN CONCURRENCY
    python -m benchmarks.peer_worker pgqueuer      ...     (CONCURRENCY = dequeue tasks)
    python -m benchmarks.peer_worker pgqueuer enqueue-eg DSN N
    python -m benchmarks.peer_worker pgqueuer work-eg    DSN CONCURRENCY

Each peer is used as its documentation says: its own bulk enqueue call, its
own worker loop, and a no-op job. A worker drains the queue and exits.

`enqueue-eg` / `work-eg` (PgQueuer): the equal-guarantee job, one per movement
(its id as the payload), whose handler runs what a movement writes
(`benchmarks/equal/movement.sql`: the intent and its audit and callback rows
committed before the side effect, the side effect, the report) on a
connection pool of the worker process.
"""

from __future__ import annotations

import asyncio
import logging
import sys

NOOP = "bench_noop"
MOVEMENT = "bench_movement"


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


def _asyncpg_params(dsn: str) -> dict[str, object]:
    """asyncpg takes keywords, not a libpq key=value string."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    return {
        "host": params.get("host"),
        "port": int(params.get("port") or 5432),
        "user": params.get("user"),
        "password": params.get("password"),
        "database": params.get("dbname"),
    }


async def _asyncpg_connect(dsn: str):  # type: ignore[no-untyped-def]
    import asyncpg

    return await asyncpg.connect(**_asyncpg_params(dsn))


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
    elif action == "enqueue-eg":
        conn = await _asyncpg_connect(dsn)
        # one job per movement, its id as the payload
        ids = [str(i).encode() for i in range(1, arg + 1)]
        await Queries(AsyncpgDriver(conn)).enqueue([MOVEMENT] * arg, ids, [0] * arg)
        await conn.close()
    elif action == "work-eg":
        import asyncpg

        from benchmarks import equal

        sql = equal.statements()
        # the handlers' own pool: two connections per dequeue loop
        pool = await asyncpg.create_pool(**_asyncpg_params(dsn), min_size=1, max_size=2 * arg)

        async def one_eg() -> None:
            conn = await _asyncpg_connect(dsn)
            pgq = PgQueuer(AsyncpgDriver(conn))

            @pgq.entrypoint(MOVEMENT)
            async def bench_movement(job: Job) -> None:
                movement_id = int(job.payload or b"0")
                async with pool.acquire() as c:
                    # three transactions: the intent before the side effect, the
                    # side effect, the report
                    await c.execute(sql["record_intent"], movement_id)
                    await c.execute(sql["submit"], movement_id)
                    await c.execute(sql["report"], movement_id)

            await pgq.run(batch_size=10, mode=QueueExecutionMode.drain)

        await asyncio.gather(*(one_eg() for _ in range(arg)))
        await pool.close()
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
