"""DBOS Transact beside the engine: a durable workflow per movement.

    python -m benchmarks.dbos_peer setup   DSN SYSTEM_DSN N
    python -m benchmarks.dbos_peer enqueue DSN SYSTEM_DSN N WORKFLOW
    python -m benchmarks.dbos_peer work    DSN SYSTEM_DSN WORKER_CONCURRENCY POLL_S EXECUTOR_ID

A workflow runs a movement as three checkpointed steps, `record_intent` (the
intent and the movement's transition, with their audit and callback rows),
`submit` (the side effect in the simulated outside world) and `report` (like
the first), with the statements every equal-guarantee peer runs
(`benchmarks/equal/movement.sql`). Two workflows, the same steps written two
ways:

  movement             three plain steps (`@DBOS.step`), each statement its
                       own transaction, as the other peers' handlers run
                       them; DBOS records each step after it returns
  movement_datasource  the two record steps as datasource transactions
                       (`@ds.transaction`): each statement committed with
                       DBOS's own record of the step, in the app database

Workflows are enqueued on a DBOS queue with DBOSClient and dequeued by worker
processes (`DBOS.launch()`), each with its own executor id, its queue's
`worker_concurrency` and `polling_interval_sec`; a worker runs until SIGTERM.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

APP = "qtg_bench_dbos"
QUEUE = "movements"
WORKFLOWS = ("movement", "movement_datasource")


def sqlalchemy_url(dsn: str) -> str:
    """A libpq DSN as the SQLAlchemy URL DBOS takes (postgresql+psycopg://...)."""
    import sqlalchemy as sa
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    host = str(p.get("host") or "localhost")
    # the other libpq parameters (passfile, sslmode...) pass through to psycopg
    query = {
        k: str(v)
        for k, v in p.items()
        if k not in ("user", "password", "host", "port", "dbname") and v is not None
    }
    if host.startswith("/"):
        query["host"] = host
        host_part = None
    else:
        host_part = host
    url = sa.URL.create(
        "postgresql+psycopg",
        username=str(p["user"]) if p.get("user") else None,
        password=str(p["password"]) if p.get("password") else None,
        host=host_part,
        port=int(p.get("port") or 5432),
        database=str(p["dbname"]),
        query=query,
    )
    return url.render_as_string(hide_password=False)


# Connection pools of a worker process (the system database's, the datasource's,
# the side effect's): SQLAlchemy's default (5 + 10 overflow, a 30 s wait) fails
# workflows with a pool timeout when the queue runs more of them than that on a
# loaded machine; a workflow waits for a connection instead, and 3 x 30
# connections a process keep 2 processes under the server's max_connections.
POOL = {"pool_size": 20, "max_overflow": 10, "pool_timeout": 600}


def _config(system_dsn: str, executor_id: str | None = None) -> Any:
    from dbos import DBOSConfig

    config: DBOSConfig = {
        "name": APP,
        "system_database_url": sqlalchemy_url(system_dsn),
        "log_level": "WARNING",
        "db_engine_kwargs": dict(POOL),
    }
    if executor_id:
        config["executor_id"] = executor_id
    return config


def _define(dsn: str) -> None:
    """The datasource and the workflows, registered before DBOS.launch()."""
    import sqlalchemy as sa
    from dbos import DBOS, SQLAlchemyDatasource

    from benchmarks import equal

    ds = SQLAlchemyDatasource.create(sqlalchemy_url(dsn), engine_kwargs=dict(POOL))
    record_sql = sa.text(equal.for_sqlalchemy("record_intent"))
    submit_sql = sa.text(equal.for_sqlalchemy("submit"))
    report_sql = sa.text(equal.for_sqlalchemy("report"))
    # the app database at READ COMMITTED, as the engine's procedures (DBOS's
    # datasource default is SERIALIZABLE): each transaction touches its own
    # movement's rows only
    app = sa.create_engine(sqlalchemy_url(dsn), isolation_level="READ COMMITTED", **POOL)

    def run(statement: Any, movement_id: int) -> None:
        with app.begin() as conn:
            conn.execute(statement, {"id": movement_id})

    @DBOS.step()
    def record_intent(movement_id: int) -> None:
        run(record_sql, movement_id)

    @DBOS.step()
    def submit(movement_id: int) -> None:
        run(submit_sql, movement_id)

    @DBOS.step()
    def report(movement_id: int) -> None:
        run(report_sql, movement_id)

    @ds.transaction(isolation_level="READ COMMITTED")
    def record_intent_in_datasource(movement_id: int) -> None:
        ds.sql_session().execute(record_sql, {"id": movement_id})

    @ds.transaction(isolation_level="READ COMMITTED")
    def report_in_datasource(movement_id: int) -> None:
        ds.sql_session().execute(report_sql, {"id": movement_id})

    @DBOS.workflow(name=WORKFLOWS[0])
    def movement(movement_id: int) -> None:
        record_intent(movement_id)
        submit(movement_id)
        report(movement_id)

    @DBOS.workflow(name=WORKFLOWS[1])
    def movement_datasource(movement_id: int) -> None:
        record_intent_in_datasource(movement_id)
        submit(movement_id)
        report_in_datasource(movement_id)


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING)
    action, dsn, system_dsn = argv[0], argv[1], argv[2]
    from dbos import DBOS, DBOSClient

    if action == "setup":
        # DBOS creates and migrates its system database and the datasource's
        # table on launch; launch once here, outside the measured window
        _define(dsn)
        DBOS(config=_config(system_dsn, "bench-setup"))
        DBOS.launch()
        DBOS.register_queue(QUEUE, on_conflict="always_update")
        DBOS.destroy()
    elif action == "enqueue":
        n, workflow = int(argv[3]), argv[4]
        if workflow not in WORKFLOWS:
            raise SystemExit(f"unknown workflow {workflow}; one of {', '.join(WORKFLOWS)}")
        from concurrent.futures import ThreadPoolExecutor

        # DBOSClient.enqueue is one workflow a call (a transaction each); eight
        # threads share the client's pool, outside the measured window
        client = DBOSClient(system_database_url=sqlalchemy_url(system_dsn))

        def enqueue(first: int) -> None:
            for i in range(first, n + 1, 8):
                client.enqueue(
                    {"queue_name": QUEUE, "workflow_name": workflow, "workflow_id": f"m-{i}"}, i
                )

        try:
            with ThreadPoolExecutor(8) as pool:
                for future in [pool.submit(enqueue, k) for k in range(1, 9)]:
                    future.result()
        finally:
            client.destroy()
    elif action == "work":
        concurrency, poll_s, executor_id = int(argv[3]), float(argv[4]), argv[5]
        _define(dsn)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        DBOS(config=_config(system_dsn, executor_id))
        DBOS.launch()
        DBOS.register_queue(
            QUEUE,
            worker_concurrency=concurrency,
            polling_interval_sec=poll_s,
            on_conflict="always_update",
        )
        stop.wait()
        DBOS.destroy(workflow_completion_timeout_sec=5)
    else:
        raise SystemExit(f"unknown action {action}")


if __name__ == "__main__":
    main(sys.argv[1:])
