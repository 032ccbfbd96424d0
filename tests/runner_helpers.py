"""Helpers for tests that run the runner as real processes (`qtg run`, `qtg worker`).

Every wait is a condition polled with a deadline (``wait_until``); time-based
rules are driven by pinning the database clock, never by sleeping.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from qtg_runner.executors.registry import SHIPPED
from qtg_runner.executors.sim import lane_baselines

QTG = str(Path(sys.executable).with_name("qtg"))
T = TypeVar("T")

# what the test process may carry that must not leak into a runner under test
_SCRUBBED = (
    "QTG_FAILPOINTS",
    "PGOPTIONS",
    "QTG_DATABASE_URL",
    "QTG_CREDENTIALS_FILE",
    "QTG_DATA_DIR",
    "MG_WORKERS_ENABLED",
    "QTG_WORKERS_ENABLED",
    "QTG_NETWORK_MODE",
    "QTG_CALLBACK_SECRETS_DIR",
)


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    what: str = "condition",
    every: float = 0.05,
    alive: Sequence[RunnerProcess] = (),
) -> T:
    """Poll ``predicate`` every ``every`` seconds until it returns something truthy
    (returned); fail the test once ``timeout`` seconds have passed, or at once when
    one of the ``alive`` processes has exited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for process in alive:
            if not process.alive():
                raise AssertionError(
                    f"waiting for {what}: exited with {process.proc.returncode}: "
                    + process.describe()
                )
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r})")
        time.sleep(every)


def runner_env(dsn: str | None, *, workers: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a runner process: this test's database, testnet, the gate."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    if dsn is not None:
        env["QTG_DATABASE_URL"] = dsn
    env["QTG_NETWORK_MODE"] = "testnet"
    env["MG_WORKERS_ENABLED"] = "true" if workers else "false"
    env.update(extra)
    return env


class RunnerProcess:
    """One `qtg ...` process, its stderr captured in a file we can read while it runs."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log_dir: Path, label: str):
        self.args = list(args)
        self.stdout_path = log_dir / f"{label}.stdout"
        self.stderr_path = log_dir / f"{label}.stderr"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen([QTG, *args], env=env, stdout=out, stderr=err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The exit code (negative: killed by that signal); fails the test on timeout."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"qtg {' '.join(self.args)} still running after {timeout}s; stderr:\n"
                + self.stderr()[-4000:]
            ) from None

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then the exit code."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def describe(self) -> str:
        return f"qtg {' '.join(self.args)} (pid {self.pid}); stderr:\n{self.stderr()[-4000:]}"


class Runners:
    """Starts runner processes for one test and SIGKILLs any still running at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[RunnerProcess] = []

    def start(self, *args: str, env: dict[str, str]) -> RunnerProcess:
        label = f"{len(self.started):02d}-{'-'.join(a.strip('-') for a in args)}"
        process = RunnerProcess(args, env, self.log_dir, label)
        self.started.append(process)
        return process

    def kill_all(self) -> None:
        for process in self.started:
            if process.alive():
                process.signal(signal.SIGKILL)
                process.proc.wait(timeout=10)


@contextmanager
def runners(log_dir: Path) -> Iterator[Runners]:
    r = Runners(log_dir)
    try:
        yield r
    finally:
        r.kill_all()


def register_runner_sim(conn: psycopg.Connection[Any]) -> None:
    """Register the runner's own executors (the sim and every other it ships,
    with their real config schemas), as the admin's `qtg executors register`
    does: a runner refuses to start without them; and give the sim's lane
    presets their rows (the owner's deploy step, as the demo takes it): a plan
    names only lanes that have one."""
    for executor in SHIPPED:
        conn.execute(
            "SELECT register_executor(%s, %s, %s::jsonb, %s)",
            (
                executor.key,
                executor.has_side_effect,
                json.dumps(executor.node_config_schema),
                executor.description,
            ),
        )
    for lane, pacing in lane_baselines().items():
        conn.execute(
            "SELECT upsert_lane_baseline(%s, %s::numeric, %s::numeric)",
            (lane, pacing["baseline_seconds"], pacing["min_poll_seconds"]),
        )


def heartbeats(conn: psycopg.Connection[Any], pid: int) -> dict[str, dict[str, Any]]:
    """worker name -> its heartbeat row, for the runner process ``pid``."""
    cur = conn.execute(
        "SELECT worker_name, live, ticks, consecutive_errors, last_error, last_tick_at,"
        " expected_interval_seconds, instance_id FROM worker_heartbeats WHERE pid = %s",
        (pid,),
    )
    names = [c.name for c in cur.description or ()]
    return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}


def side_effects(conn: psycopg.Connection[Any]) -> dict[int, list[int]]:
    """node id -> the submit_count of each of its sim side effects (testnet)."""
    rows = conn.execute(
        "SELECT node_id, submit_count FROM qtg_sim.side_effects WHERE network = 'testnet'"
        " ORDER BY node_id, idempotency_key"
    ).fetchall()
    result: dict[int, list[int]] = {}
    for node_id, count in rows:
        result.setdefault(int(node_id), []).append(int(count))
    return result


def node_rows(conn: psycopg.Connection[Any]) -> dict[int, str]:
    """node id -> state, for every node of the network."""
    rows = conn.execute("SELECT id, node_state::text FROM movement_request_nodes").fetchall()
    return {int(i): s for i, s in rows}


def request_rows(conn: psycopg.Connection[Any]) -> dict[int, str]:
    rows = conn.execute("SELECT id, request_state::text FROM movement_requests").fetchall()
    return {int(i): s for i, s in rows}


MOVEMENT_PATH = ("pending_approval", "approved", "executing")
"""The states every demo movement's callbacks report before its end state."""


def assert_demo_sidecars(stdout: str, ends: dict[str, int]) -> None:
    """The demo's callbacks and audit lines: one callback per state change of each
    movement (``ends``: how many movements end in each state, e.g. {"completed": 6,
    "failed": 2}), all received with a valid signature at the printed receiver,
    none dead; the audit chain holding more rows than that, unbroken."""
    paths = {
        int(m): path.split(" -> ")
        for m, path in re.findall(r"^  movement (\d+): ([a-z_ ()>-]+)$", stdout, re.M)
    }
    assert sum(ends.values()) == len(paths), stdout
    for movement, path in paths.items():
        assert tuple(path[:-1]) == MOVEMENT_PATH and path[-1] in ends, (movement, path)
    assert {end: [p[-1] for p in paths.values()].count(end) for end in ends} == ends, paths
    changes = sum(len(p) for p in paths.values())
    summary = re.search(
        r"^callbacks: (\d+) delivered to (http://127\.0\.0\.1:\d+/\S+?)(?: \(.*\))?, "
        r"all signatures valid, 0 dead$",
        stdout,
        re.M,
    )
    assert summary, stdout
    assert int(summary[1]) == changes == (len(MOVEMENT_PATH) + 1) * len(paths), stdout
    assert f"callbacks to {summary[2]}" in stdout
    audit = re.search(r"^audit chain: (\d+) rows verified, first broken link: none$", stdout, re.M)
    assert audit and int(audit[1]) > changes, stdout
