"""The five scenarios and what they share: a database of their own, a fleet of
runner processes, a feed of movements, a fault, the settle, the check.

Each scenario runs on a fresh database cloned from the run's migrated template
(so its invariants speak of its own movements only), in three phases:

  chaos   the fleet runs, the feeder creates and approves the planned
          movements, and the scenario's fault is injected until the feed ends;
  settle  no more faults; the fleet (restarted where it died) works until every
          movement is terminal or legitimately in flight, or the settle budget
          runs out. When nothing has moved for ``stall_seconds`` and open nodes
          wait for a time rule (a lease that a dead claimer left behind,
          mostly), the database clock is advanced past it (chaos.cluster.Clock):
          the time to settle is then wall time plus the seconds advanced;
  check   the fleet is stopped (SIGTERM) and chaos.checker checks the database.
"""

from __future__ import annotations

import contextlib
import random
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from chaos import workload
from chaos.checker import TERMINAL_MOVEMENT_STATES, CheckResult, Ledger, check, parked_condition
from chaos.cluster import Clock, Server, add_login, admin_conninfo
from chaos.figures import ClaimWaits, claim_waits
from chaos.fleet import Fleet, runner_env
from qtg_runner.config import NetworkMode
from qtg_runner.db import procs
from qtg_runner.db.migrate import mark_test_database, migrate
from qtg_runner.executors.registry import register_shipped

NETWORK: NetworkMode = "testnet"
TEMPLATE = "chaos_template"
OPERATORS = ("chaos_alice", "chaos_bob")
"""The operator logins: the first creates and cancels, the second approves."""
MAX_JUMP_SECONDS = 3600.0


@dataclass(frozen=True)
class Scale:
    name: str
    movements: dict[str, int]
    """Movements fed per scenario."""
    rate: float
    """Movements created per second."""
    burst: int
    """Good movements around each poison node."""
    settle_seconds: float
    """Wall-clock budget of a settle."""
    poison_settle_seconds: float
    stall_seconds: float
    """No progress this long, and open nodes waiting for a time rule: advance the clock."""


SCALES = {
    "full": Scale(
        "full",
        {
            "kills": 1000,
            "restarts": 500,
            "backends": 500,
            "poison": 300,
            "failover": 500,
            "freezes": 500,
        },
        rate=9.0,
        burst=40,
        settle_seconds=180,
        poison_settle_seconds=90,
        stall_seconds=20,
    ),
    "small": Scale(
        "small",
        {
            "kills": 120,
            "restarts": 80,
            "backends": 80,
            "poison": 60,
            "failover": 80,
            "freezes": 80,
        },
        rate=5.0,
        burst=16,
        settle_seconds=120,
        poison_settle_seconds=60,
        stall_seconds=15,
    ),
}

FLEET: dict[str, list[str]] = {
    "run-1": ["run", "--concurrency", "4"],
    "run-2": ["run", "--concurrency", "4"],
    "dispatcher": ["worker", "node_dispatcher", "--concurrency", "4"],
    "observer": ["worker", "node_observer", "--concurrency", "4"],
    "recovery": ["worker", "node_recovery", "--concurrency", "4"],
}
"""The runner processes, each logged in as a runner login of its own (one per
deployment): ``runner_login(label)``."""


def runner_login(label: str) -> str:
    return "chaos_runner_" + label.replace("-", "_")


def say(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Settled:
    settled: bool
    wall_seconds: float
    advanced_seconds: float
    jumps: int
    open_left: int
    others_seconds: float | None = None
    """Engine seconds until every movement but the watched ones (the poison) settled."""

    @property
    def engine_seconds(self) -> float:
        """The time the engine took to settle, seconds the clock skipped included."""
        return self.wall_seconds + self.advanced_seconds


@dataclass
class ScenarioResult:
    name: str
    faults: str
    check: CheckResult
    settle: Settled
    chaos_seconds: float
    kills: int = 0
    exits: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    """Core-worker crashes seen in the runners' logs, by error type."""
    notes: list[str] = field(default_factory=list)
    feed_errors: list[str] = field(default_factory=list)
    claims: ClaimWaits = field(default_factory=ClaimWaits)

    @property
    def ok(self) -> bool:
        return self.check.ok


@dataclass
class Run:
    """What every scenario of one run shares."""

    primary: Server
    out_dir: Path
    scale: Scale
    rng: random.Random
    clock: Clock = field(default_factory=Clock)
    standby: Server | None = None

    @property
    def servers(self) -> list[Server]:
        """The servers a client may reach, the primary first."""
        return [self.primary] + ([self.standby] if self.standby else [])

    def admin(self, dbname: str = "postgres") -> str:
        return admin_conninfo(self.servers, dbname)

    def make_template(self) -> None:
        """The migrated template of every scenario's database (marked as a test
        database: the settle may drive its clock), the build's executors
        registered and the sim lanes set, as the admin's deploy steps; and the
        run's logins (roles are the server's, shared by every database)."""
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
        dsn = self.primary.dsn(TEMPLATE)
        migrate(dsn)
        mark_test_database(dsn)
        register_shipped(dsn, NETWORK)
        with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={NETWORK},qtg") as conn:
            for lane, settings in workload.lane_settings().items():
                procs.upsert_lane_baseline(lane, **settings).one(conn)
        for label in FLEET:
            add_login(self.primary, runner_login(label), f"qtg_{NETWORK}_runner")
        for operator in OPERATORS:
            add_login(self.primary, operator, f"qtg_{NETWORK}_operator")

    def new_database(self, name: str) -> None:
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                    sql.Identifier(name), sql.Identifier(TEMPLATE)
                )
            )


@dataclass
class Chaos:
    """One scenario while it runs: what its fault function gets."""

    run: Run
    name: str
    dbname: str
    fleet: Fleet
    feeder: workload.Feeder
    notes: list[str]
    started: float
    """time.monotonic() when the feed started."""

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def feeding(self) -> bool:
        return not self.feeder.done.is_set()

    def sleep(self, seconds: float) -> bool:
        """Sleep while the feed goes on; False once it has ended."""
        return not self.feeder.done.wait(seconds)


Fault = Callable[[Chaos], str]
"""Injects the scenario's fault until the feed ends; returns what it did, in words."""


def run_scenario(
    run: Run,
    name: str,
    plan: list[workload.Planned],
    fault: Fault,
    prepare: Callable[[Run, str], None] | None = None,
    settle_seconds: float | None = None,
) -> ScenarioResult:
    dbname = f"chaos_{name}"
    # the real clock again before anything is copied (a standby's base backup
    # carries the primary's settings, a pinned clock included)
    run.clock.reset()
    run.new_database(dbname)
    if prepare is not None:
        prepare(run, dbname)
    run.clock.attach(run.admin())
    ledger = Ledger()
    log_dir = run.out_dir / "logs" / name
    fleet = Fleet(
        dict(FLEET),
        {
            label: runner_env(admin_conninfo(run.servers, dbname, runner_login(label)), NETWORK)
            for label in FLEET
        },
        log_dir,
    )
    creator, approver = (admin_conninfo(run.servers, dbname, login) for login in OPERATORS)
    feeder = workload.Feeder(
        creator,
        approver,
        NETWORK,
        name,
        plan,
        ledger,
        random.Random(run.rng.random()),
        run.clock.now,
    )
    notes: list[str] = []
    say(f"{name}: {len(plan)} movements over {feeder.duration:.0f}s, fleet of {len(FLEET)}")
    fleet.start()
    started = time.monotonic()
    try:
        feeder.start()
        chaos = Chaos(run, name, dbname, fleet, feeder, notes, started)
        try:
            faults = fault(chaos)
        except BaseException:
            feeder.stop.set()
            raise
        finally:
            feeder.done.wait()
        chaos_seconds = time.monotonic() - started
        say(f"{name}: chaos over after {chaos_seconds:.0f}s ({faults}); settling")
        poison_ids = ledger.snapshot()[3]
        settled = settle(
            run.admin(dbname),
            run.clock,
            settle_seconds or run.scale.settle_seconds,
            run.scale.stall_seconds,
            watched=poison_ids,
        )
    finally:
        fleet.stop()  # whatever happened, no runner is left behind
    if poison_ids and settled.others_seconds is not None:
        notes.append(
            f"every movement but the poison ones settled in {settled.others_seconds:.0f} s"
        )
    with psycopg.connect(run.admin(dbname), autocommit=True) as conn:
        result = check(conn, ledger, NETWORK)
        notes.extend(poison_notes(conn, ledger))
        poison_nodes = [
            int(r[0])
            for r in conn.execute(
                sql.SQL(
                    "SELECT n.id FROM {net}.movement_request_nodes n"
                    " JOIN {net}.movement_requests r ON r.id = n.request_id"
                    " WHERE r.external_id = ANY(%s) ORDER BY n.id"
                ).format(net=sql.Identifier(NETWORK)),
                (sorted(poison_ids),),
            ).fetchall()
        ]
        claims = claim_waits(conn, NETWORK, poison_nodes)
    for poison_node, others in claims.poison_batches:
        done = [w for w in others if w is not None]
        notes.append(
            f"poison node {poison_node} was claimed with {len(others)} other node(s): "
            + (
                f"they left SUBMITTING after {statistics.median(done):.0f} s median, "
                f"{max(done):.0f} s max"
                if done
                else "none left SUBMITTING"
            )
            + (f"; {len(others) - len(done)} never did" if len(done) < len(others) else "")
        )
    crashes = crash_counts(fleet.log_text())
    outcome = ScenarioResult(
        name=name,
        faults=faults,
        check=result,
        settle=settled,
        chaos_seconds=chaos_seconds,
        kills=fleet.kills,
        exits=fleet.exits,
        crashes=crashes,
        notes=notes,
        feed_errors=feeder.errors,
        claims=claims,
    )
    say(
        f"{name}: {'settled' if settled.settled else 'NOT settled'} in "
        f"{settled.engine_seconds:.0f}s (clock advanced {settled.advanced_seconds:.0f}s); "
        f"{result.created} movements, duplicates {result.duplicates}, stuck {result.stuck}, "
        f"lost {result.lost}; {'ok' if result.ok else 'FAILED: ' + ', '.join(result.failed())}"
    )
    return outcome


def settle(
    dsn: str,
    clock: Clock,
    budget_seconds: float,
    stall_seconds: float,
    network: str = NETWORK,
    watched: Collection[str] = (),
) -> Settled:
    """Wait until every movement is terminal or legitimately in flight; advance
    the clock past the time rule every open node waits for when nothing moves.
    Also notes when every movement but the ``watched`` ones (external ids) settled."""
    started = time.monotonic()
    last_progress = started
    last_mark: Any = None
    open_left = -1
    others: float | None = None
    while True:
        now = time.monotonic()
        try:
            with psycopg.connect(
                dsn, autocommit=True, options=f"-c search_path={network},qtg", connect_timeout=5
            ) as conn:
                parked = parked_condition(conn, network) or sql.SQL("false")
                open_left, open_others, mark = conn.execute(
                    sql.SQL(
                        """
                    SELECT count(*), count(*) FILTER (WHERE r.external_id <> ALL(%s)),
                           (SELECT max(base) FROM audit_batches)
                      FROM movement_requests r
                     WHERE r.request_state::text <> ALL({terminal})
                       AND NOT EXISTS (SELECT 1 FROM movement_request_nodes node
                                        WHERE node.request_id = r.id AND {parked})
                    """
                    ).format(terminal=sql.Literal(list(TERMINAL_MOVEMENT_STATES)), parked=parked),
                    (list(watched),),
                ).fetchone() or (0, 0, None)
                if open_others == 0 and others is None:
                    others = now - started + clock.advanced
                if open_left == 0:
                    return Settled(True, now - started, clock.advanced, clock.jumps, 0, others)
                if mark != last_mark:
                    last_mark, last_progress = mark, now
                elif now - last_progress >= stall_seconds:
                    wait = next_time_rule(conn)
                    if wait is not None and wait > 1:
                        jump = min(wait + 0.5, MAX_JUMP_SECONDS)
                        say(f"  nothing moved for {stall_seconds:.0f}s: clock advanced {jump:.0f}s")
                        clock.advance(jump)
                        last_progress = time.monotonic()
        except psycopg.Error as exc:
            say(f"  settle: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}")
        if now - started > budget_seconds:
            return Settled(False, now - started, clock.advanced, clock.jumps, open_left, others)
        time.sleep(0.5)


def next_time_rule(conn: psycopg.Connection[Any]) -> float | None:
    """Seconds until the time rule open nodes wait for: the last lease of the
    claimed (SUBMITTING) and doubtful (UNKNOWN) nodes, else the next retry or
    observation. None when no open node waits for the clock."""
    row = conn.execute(
        """
        SELECT extract(epoch FROM max(node.lease_until) FILTER (
                   WHERE node.node_state IN ('SUBMITTING', 'UNKNOWN')) - clock()),
               extract(epoch FROM least(
                   min(node.not_before) FILTER (WHERE node.node_state = 'READY'),
                   min(node.next_observe_at)
                       FILTER (WHERE node.node_state IN ('SUBMITTED', 'OBSERVING'))
               ) - clock())
          FROM movement_request_nodes node
          JOIN movement_requests r ON r.id = node.request_id
         WHERE r.finished_at IS NULL
           AND node.node_state NOT IN ('COMPLETED', 'FAILED', 'SKIPPED', 'PENDING')
        """
    ).fetchone()
    if row is None:
        return None
    lease, other = (float(v) if v is not None else None for v in row)
    if lease is not None and lease > 0:
        return lease
    return other if other is not None and other > 0 else None


_CRASH = re.compile(r"event=core_worker_crashed .*?worker=(\S+) error=\"?([A-Za-z_.]+)([^\n]*)")
_INNER = re.compile(r"\|\s+([A-Za-z_.]*(?:Error|Exception))\b")


def crash_counts(log_text: str) -> Counter[str]:
    """Core-worker crashes in the runners' logs, by worker and error type (an
    ExceptionGroup by the first error inside it)."""
    crashes: Counter[str] = Counter()
    for match in _CRASH.finditer(log_text):
        worker, error, rest = match.groups()
        if error.endswith("ExceptionGroup"):
            inner = _INNER.search(rest.replace("\\n", "\n"))
            error = f"{inner.group(1)} in a TaskGroup" if inner else error
        crashes[f"{worker} {error}"] += 1
    return crashes


def poison_notes(conn: psycopg.Connection[Any], ledger: Ledger) -> list[str]:
    """What became of each planted poison movement."""
    _tried, acknowledged, refused, poison = ledger.snapshot()
    parked = parked_condition(conn, NETWORK) or sql.SQL("false")
    notes = []
    for external_id in sorted(poison):
        if external_id in refused:
            notes.append(f"{external_id}: refused at creation ({refused[external_id]})")
            continue
        movement_id = acknowledged.get(external_id)
        row = conn.execute(
            sql.SQL(
                "SELECT r.request_state::text, node.node_state::text, {parked},"
                " node.submit_attempts, node.recovery_attempts,"
                " left(coalesce(node.last_error, ''), 120)"
                " FROM {net}.movement_requests r JOIN {net}.movement_request_nodes node"
                " ON node.request_id = r.id WHERE r.id = %s ORDER BY node.id LIMIT 1"
            ).format(net=sql.Identifier(NETWORK), parked=parked),
            (movement_id,),
        ).fetchone()
        if row is None:
            notes.append(f"{external_id}: not found")
            continue
        state, node_state, is_parked, submits, recoveries, error = row
        notes.append(
            f"{external_id}: movement {state}, node {node_state}"
            + (" (quarantined)" if is_parked else "")
            + f" after {submits} submit(s) and {recoveries} recovery claim(s)"
            + (f"; last error: {error}" if error else "")
        )
    return notes


# -- the faults ------------------------------------------------------------------------


def kills(chaos: Chaos) -> str:
    """kill -9 of a random runner process every 2 to 5 seconds."""
    rng = random.Random(chaos.run.rng.random())
    while chaos.sleep(rng.uniform(2.0, 5.0)):
        chaos.fleet.kill_random(rng)
    return f"{chaos.fleet.kills} kill -9"


RESTARTS = (("fast", 0.0), ("immediate", 0.0), ("fast", 5.0))
"""(stop mode, seconds down) of the three restarts, at 20, 50 and 80% of the feed."""


def restarts(chaos: Chaos) -> str:
    """Three server restarts while runners work: a fast one, an immediate one
    (a crash: recovery from WAL at start), and a fast one down for five seconds."""
    done = []
    for (mode, down), fraction in zip(RESTARTS, (0.2, 0.5, 0.8), strict=True):
        if not chaos.sleep(max(0.0, chaos.feeder.duration * fraction - chaos.elapsed())):
            break
        began = time.monotonic()
        chaos.run.primary.stop(mode)
        time.sleep(down)
        chaos.run.primary.start()
        done.append(
            f"{mode}{f' +{down:.0f}s down' if down else ''} ({time.monotonic() - began:.1f}s)"
        )
        chaos.notes.append(f"restart {len(done)}: {done[-1]}")
    return f"{len(done)} restarts: " + ", ".join(done)


def backends(chaos: Chaos) -> str:
    """pg_terminate_backend of one to three random runner connections every
    0.3 to 1 s (the runners' own application names; not the harness's)."""
    rng = random.Random(chaos.run.rng.random())
    terminated = 0
    with psycopg.connect(chaos.run.admin(chaos.dbname), autocommit=True) as conn:
        while chaos.sleep(rng.uniform(0.3, 1.0)):
            with contextlib.suppress(psycopg.Error):
                rows = conn.execute(
                    """
                    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE datname = current_database() AND backend_type = 'client backend'
                       AND application_name LIKE 'qtg-%%'
                       AND application_name NOT LIKE 'qtg-chaos%%'
                       AND pid <> pg_backend_pid()
                     ORDER BY random() LIMIT %s
                    """,
                    (rng.randint(1, 3),),
                ).fetchall()
                terminated += sum(1 for (ok,) in rows if ok)
    return f"{terminated} runner backends terminated"


def freezes(chaos: Chaos) -> str:
    """SIGSTOP of a random runner process for 2 to 15 s, every 2 to 5 s: long
    enough for recovery to take a frozen dispatcher's claims (its heartbeat two
    ticks late) and resubmit their prepared payloads, and for a frozen
    observer to hold its chunk's rows. At wake-up a stale dispatcher must not
    send again (check_claims); the checker counts each key's submissions to
    the sim's outside world (resubmits) beside the duplicates."""
    rng = random.Random(chaos.run.rng.random())
    while chaos.sleep(rng.uniform(2.0, 5.0)):
        chaos.fleet.freeze_random(rng, rng.uniform(2.0, 15.0))
    return f"{chaos.fleet.freezes} SIGSTOPs of 2 to 15 s"


def poison(chaos: Chaos) -> str:
    """Nothing more than the poison nodes planted in the feed's bursts."""
    while chaos.sleep(1.0):
        pass
    return f"{len(workload.poison_kinds())} poison nodes in busy batches"


def with_standby(run: Run, dbname: str) -> None:
    """A streaming standby of the primary, synchronous from now on."""
    standby_dir = run.primary.data_dir.parent / "standby"
    say("failover: pg_basebackup of the primary, standby started")
    run.standby = run.primary.make_standby("standby", standby_dir)
    run.primary.make_synchronous()


def failover(chaos: Chaos) -> str:
    """At 40% of the feed: the primary crashes (pg_ctl stop -m immediate) and the
    synchronous standby is promoted; clients find it through the multi-host DSN."""
    run = chaos.run
    assert run.standby is not None
    if not chaos.sleep(max(0.0, chaos.feeder.duration * 0.4 - chaos.elapsed())):
        return "no failover: the feed ended first"
    with psycopg.connect(run.primary.dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT sync_state, pg_current_wal_lsn() - replay_lsn FROM pg_stat_replication"
            " WHERE application_name = 'chaos_standby'"
        ).fetchone()
    chaos.notes.append(f"standby before the failover: {row[0] if row else 'absent'}")
    began = time.monotonic()
    run.primary.stop("immediate")
    run.standby.promote()
    writable = _wait_writable(run.admin(chaos.dbname), 60)
    took = time.monotonic() - began
    chaos.notes.append(
        f"primary crashed, standby promoted, read-write through the multi-host DSN "
        f"after {took:.1f}s" + ("" if writable else " (not writable after 60 s)")
    )
    while chaos.sleep(1.0):
        pass
    return f"failover at 40% of the feed, writable again after {took:.1f}s"


def _wait_writable(dsn: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                conn.execute("CREATE TEMP TABLE chaos_probe (x int)")
            return True
        except psycopg.Error:
            time.sleep(0.1)
    return False


# -- the run ------------------------------------------------------------------------------


SCENARIOS = ("kills", "restarts", "backends", "poison", "freezes", "failover")


def plan_for(name: str, scale: Scale, rng: random.Random) -> list[workload.Planned]:
    count = scale.movements[name]
    plan = workload.steady(rng, count, scale.rate)
    if name == "poison":
        duration = count / scale.rate
        poisons = workload.poison_kinds()
        for group, kind in enumerate(poisons):
            at = duration * (group + 1) / (len(poisons) + 1)
            plan.extend(workload.burst(rng, at, scale.burst, kind, group))
    return plan


def run_one(run: Run, name: str) -> ScenarioResult:
    rng = random.Random(run.rng.random())
    plan = plan_for(name, run.scale, rng)
    faults: dict[str, Fault] = {
        "kills": kills,
        "restarts": restarts,
        "backends": backends,
        "poison": poison,
        "failover": failover,
        "freezes": freezes,
    }
    return run_scenario(
        run,
        name,
        plan,
        faults[name],
        prepare=with_standby if name == "failover" else None,
        settle_seconds=run.scale.poison_settle_seconds if name == "poison" else None,
    )
