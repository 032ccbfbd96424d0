"""The bench's equal-guarantee handler (benchmarks/equal/movement.sql): what a peer's
job writes for one movement, run on a real database, and the table rows that compare
the engine with those peers."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from benchmarks import equal, report


@pytest.fixture
def eg(new_database: Any) -> psycopg.Connection[Any]:
    c = psycopg.connect(new_database(template=None).dsn, autocommit=True)
    equal.setup(c, 3)
    return c


def _run(c: psycopg.Connection[Any], name: str, movement_id: int) -> None:
    c.execute(equal.for_psycopg(name), {"id": movement_id})  # type: ignore[arg-type]


def test_one_movement_writes_intent_before_the_side_effect_then_reports(
    eg: psycopg.Connection[Any],
) -> None:
    _run(eg, "record_intent", 2)
    # committed before the side effect: the movement EXECUTING, the intent PREPARED,
    # an audit row per transition and a callback for the movement's state change
    assert eg.execute("SELECT state FROM eg.movements WHERE id = 2").fetchone() == ("EXECUTING",)
    assert eg.execute("SELECT state FROM eg.intents WHERE movement_id = 2").fetchone() == (
        "PREPARED",
    )
    assert eg.execute(
        "SELECT entity, from_state, to_state FROM eg.audit WHERE movement_id = 2 ORDER BY id"
    ).fetchall() == [("movement", "APPROVED", "EXECUTING"), ("intent", None, "PREPARED")]
    assert eg.execute("SELECT state FROM eg.callbacks WHERE movement_id = 2").fetchall() == [
        ("EXECUTING",)
    ]
    assert eg.execute("SELECT count(*) FROM eg_world.side_effects").fetchone() == (0,)

    _run(eg, "submit", 2)
    _run(eg, "report", 2)
    assert eg.execute("SELECT state FROM eg.movements WHERE id = 2").fetchone() == ("COMPLETED",)
    assert eg.execute(
        "SELECT entity, from_state, to_state FROM eg.audit WHERE movement_id = 2 ORDER BY id"
    ).fetchall() == [
        ("movement", "APPROVED", "EXECUTING"),
        ("intent", None, "PREPARED"),
        ("intent", "PREPARED", "SUBMITTED"),
        ("movement", "EXECUTING", "COMPLETED"),
    ]
    assert eg.execute(
        "SELECT state FROM eg.callbacks WHERE movement_id = 2 ORDER BY id"
    ).fetchall() == [("EXECUTING",), ("COMPLETED",)]
    # the other movements are untouched
    assert eg.execute("SELECT count(*) FROM eg.movements WHERE state = 'APPROVED'").fetchone() == (
        2,
    )


def test_a_redelivered_job_writes_nothing_twice(eg: psycopg.Connection[Any]) -> None:
    for movement_id in (1, 2, 3):
        for _ in range(2):  # every job delivered twice, each step run again
            for name in ("record_intent", "submit", "report"):
                _run(eg, name, movement_id)
    got = equal.check(eg, 3)
    assert got["submits"] == 6  # the outside world saw each submit (idempotent by id)


def test_check_refuses_an_incomplete_record(eg: psycopg.Connection[Any]) -> None:
    _run(eg, "record_intent", 1)
    with pytest.raises(RuntimeError, match="incomplete"):
        equal.check(eg, 3)


def test_server_cpu_counts_the_servers_work(eg: psycopg.Connection[Any]) -> None:
    cpu = equal.ServerCpu.open(eg)
    if cpu is None:
        pytest.skip("the test server is not a process on this machine")
    before = cpu.seconds()
    with psycopg.connect(eg.info.dsn, autocommit=True) as other:
        other.execute("SELECT count(*) FROM generate_series(1, 3000000)")
        assert cpu.seconds() - before > 0.05


def _run_row(system: str, per_s: float, cpu_ms: float, **kw: Any) -> dict[str, Any]:
    return {
        "system": system,
        "processes": 1,
        "concurrency": 8,
        "jobs": 1000,
        "wall_s": 1.0,
        "per_s": per_s,
        "db_cpu_ms_per_job": cpu_ms,
        "enqueue_s": 0.1,
        **kw,
    }


def test_the_table_sets_the_engine_beside_the_best_equal_guarantee_peer() -> None:
    # the engine counted until its audit_log holds every event: the drain
    # (2000/s) and its promotion after it (1 s for the 1000) take 1.5 s in all
    engine_run = _run_row(
        "QTG engine",
        2000.0,
        0.4,
        db_span_s=1.0,
        per_s_db_span=2000.0,
        node_transitions_per_s=6000.0,
        client_cpu_ms_per_job=0.3,
        with_audit_rows={
            "seconds": 1.5,
            "per_s": 666.7,
            "db_cpu_ms_per_job": 0.5,
            "total_cpu_ms_per_job": 0.8,
        },
    )
    results = {
        "cases": {
            "throughput": {
                "engine": [engine_run],
                "peers": [],
                "ceiling": [],
                "equal_peers": [
                    _run_row(
                        "Graphile Worker", 300.0, 1.2, equal_guarantees=True, version="0.17.3"
                    ),
                    _run_row(
                        "PgQueuer", 200.0, 0.9, equal_guarantees=True, client_cpu_ms_per_job=0.7
                    ),
                    {"system": "DBOS Transact", "equal_guarantees": True, "skipped": "why"},
                ],
            }
        }
    }
    rows = {r[1]: r for r in report.build_rows(results)}
    ratio = rows[
        "engine, every transition's audit row written / best equal-guarantee peer: movements/s"
    ]
    assert ratio[2:5] == ["2.22", ">= 3", "MISSED"]  # 666.7 / 300, not the drain's 6.67
    assert "Graphile Worker" in ratio[5] and "the drain alone" in ratio[5] and "6.67x" in ratio[5]
    cpu = rows[
        "database CPU per movement, audit rows counted: leanest equal-guarantee peer / engine"
    ]
    assert cpu[2:5] == ["1.80", ">= 2", "MISSED"]  # 0.9 / 0.5, not the drain's 0.4
    total = rows[
        "total CPU per movement (server and clients), audit rows counted:"
        " leanest equal-guarantee peer / engine"
    ]
    assert total[2] == "2.00"  # PgQueuer 0.9 + 0.7 against the engine's 0.8
    assert rows["DBOS Transact, equal guarantees"][2] == "could not run"
    engine_row = rows["QTG engine (1 runner, c=8): movements/s"][5]
    assert "database CPU 0.400 ms/movement, clients 0.300 ms" in engine_row
    assert (
        "Graphile Worker 0.17.3;"
        in rows["Graphile Worker, equal guarantees (1 proc, c=8): movements/s"][5]
    )
