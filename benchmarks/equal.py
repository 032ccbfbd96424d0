"""Equal-guarantee peers: what a movement writes, written by a peer's own job handler.

`benchmarks/equal/movement.sql` holds the schema and the three statements a
handler runs for one movement (record the intent, make the side effect, report
it); every peer (Graphile Worker, PgQueuer, DBOS Transact) runs the same ones.
This module reads them, sets a peer's database up with N approved movements,
checks that every movement ended as the engine's would, and measures the
database server's CPU time.
"""

from __future__ import annotations

import contextlib
import re
from functools import cache
from pathlib import Path
from typing import Any

import psutil
import psycopg

SQL_FILE = Path(__file__).resolve().parent / "equal" / "movement.sql"
SCHEMAS = ("eg",)  # the movement's record; eg_world is the simulated outside world
WORLD = ("eg_world",)


@cache
def statements() -> dict[str, str]:
    """The named sections of movement.sql (``-- name: X`` up to the next marker)."""
    parts = re.split(r"^-- name: (\w+)\s*$", SQL_FILE.read_text(), flags=re.M)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def for_psycopg(name: str) -> str:
    """A statement with psycopg's placeholder (``$1`` -> ``%(id)s``)."""
    return statements()[name].replace("$1", "%(id)s")


def for_sqlalchemy(name: str) -> str:
    """A statement with SQLAlchemy's placeholder (``$1`` -> ``:id``)."""
    return statements()[name].replace("$1", ":id")


def setup(conn: psycopg.Connection[Any], movements: int) -> None:
    """The equal-guarantee tables and ``movements`` APPROVED movements, ids 1..N."""
    conn.execute(statements()["schema"].encode())
    conn.execute(
        "INSERT INTO eg.movements (id, state) SELECT g, 'APPROVED' FROM generate_series(1, %s) g",
        [movements],
    )
    conn.execute("VACUUM ANALYZE eg.movements")


REMAINING = "SELECT count(*) FROM eg.movements WHERE state <> 'COMPLETED'"


def check(conn: psycopg.Connection[Any], movements: int) -> dict[str, int]:
    """What the handlers left: every movement COMPLETED with its intent SUBMITTED,
    4 audit rows, 2 callbacks and one side effect. Raises when one is missing."""
    row = conn.execute(
        """SELECT (SELECT count(*) FROM eg.movements WHERE state = 'COMPLETED'),
                  (SELECT count(*) FROM eg.intents WHERE state = 'SUBMITTED'),
                  (SELECT count(*) FROM eg.audit),
                  (SELECT count(*) FROM eg.callbacks),
                  (SELECT count(*) FROM eg_world.side_effects),
                  (SELECT coalesce(sum(submit_count), 0) FROM eg_world.side_effects)"""
    ).fetchone()
    assert row is not None
    got = dict(
        zip(
            ("completed", "intents_submitted", "audit", "callbacks", "side_effects", "submits"),
            (int(x) for x in row),
            strict=True,
        )
    )
    want = {
        "completed": movements,
        "intents_submitted": movements,
        "audit": 4 * movements,
        "callbacks": 2 * movements,
        "side_effects": movements,
    }
    wrong = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    if wrong:
        raise RuntimeError(f"the handlers' record is incomplete (got, want): {wrong}")
    return got


# -- database CPU ----------------------------------------------------------------


def _ticks(pid: int, children_too: bool = False) -> int:
    """utime + stime (+ cutime + cstime: reaped children) of ``pid``, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after the command: state is field 3, utime 14, stime 15, cutime 16, cstime 17
    n = int(fields[11]) + int(fields[12])
    if children_too:
        n += int(fields[13]) + int(fields[14])
    return n


class ServerCpu:
    """CPU seconds spent by the PostgreSQL server: the postmaster, its live children
    (backends, autovacuum, WAL writer, checkpointer...) and its exited children
    (which the kernel adds to the postmaster's cutime/cstime once reaped). The
    connection given (the bench's own poll) is left out.

    Only for a server on this machine (the embedded one, or a local
    QTG_DATABASE_URL); :meth:`open` returns None elsewhere.
    """

    def __init__(self, postmaster: int, excluded: set[int]) -> None:
        self.postmaster = postmaster
        self.excluded = excluded
        self.hz = _clock_ticks()

    @classmethod
    def open(cls, conn: psycopg.Connection[Any]) -> ServerCpu | None:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        if not row:
            return None
        try:
            backend = psutil.Process(int(row[0]))
            parent = backend.parent()
            if parent is None or "postgres" not in (parent.name() + backend.name()).lower():
                return None
            _ticks(parent.pid, True)
        except (psutil.Error, OSError):
            return None
        return cls(parent.pid, {backend.pid})

    def seconds(self) -> float:
        total = _ticks(self.postmaster, children_too=True)
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.postmaster).children():
                if child.pid in self.excluded:
                    continue
                with contextlib.suppress(OSError, ValueError, IndexError):
                    total += _ticks(child.pid)
        return total / self.hz


def _clock_ticks() -> int:
    import os

    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100
