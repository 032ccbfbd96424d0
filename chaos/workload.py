"""The mixed movements a scenario feeds in, the way operators would.

Every lane of the sim executor runs scaled so that its baseline is
``BASELINE_SECONDS`` (real lane shapes, seconds instead of minutes), and the
mix covers what the engine has to get right under faults: single steps and
DAGs (chains, fan-out and fan-in), steps that settle at submit, failing lanes
(the dependants are skipped), lost receipts (UNKNOWN, recovered from
evidence), flaky lanes, refused submits (permanent, and retryable until the
attempts run out), movements cancelled while they run, and movements left
unapproved until they expire. The poison kinds make the executor raise: two
absurd configs (refused at creation by an engine that bounds them, which the
run reports) and, when the sim offers it, a node that crashes on purpose.

One login creates (the network's operator) and another approves (the
admin's), as four-eyes wants. Creation is idempotent on the external id, so a
call lost to a fault is simply made again until the database answers; the
``Ledger`` keeps what was tried and what was acknowledged.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import heapq
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from chaos.checker import Ledger
from qtg_runner.config import NetworkMode
from qtg_runner.db import procs
from qtg_runner.executors.sim import LANE_PRESETS, SimExecutor

BASELINE_SECONDS = 2.0
RETRY_SECONDS = 90.0
"""How long a creation, approval or cancel is retried through faults."""
CALLBACK_URL = "https://receiver.chaos.invalid/qtg"
"""Every movement names this receiver, so each state change writes its callback
row (the checker's final_callback); no target is registered with it, so the
dispatcher marks the rows REFUSED at its claim and never POSTs."""
SLOW_LANES = ("cctp_standard", "ccip", "stargate_bus", "bybit_withdrawal")
ANY_LANE = ("cctp_fast", "stargate_taxi", "bybit_deposit", *SLOW_LANES)


def lane_scale(lane: str) -> float:
    """The sim's time_scale that makes ``lane``'s baseline BASELINE_SECONDS."""
    return max(1.0, LANE_PRESETS[lane].baseline_seconds / BASELINE_SECONDS)


def lane_settings() -> dict[str, dict[str, float]]:
    """upsert_lane_baseline arguments for every sim lane (and the default one):
    the scaled baseline, and the waits after errors cut to a second or two."""
    settings = {
        lane: {"baseline_seconds": BASELINE_SECONDS if preset.max_latency_seconds else 1.0}
        for lane, preset in LANE_PRESETS.items()
    }
    settings["default"] = {"baseline_seconds": BASELINE_SECONDS}
    for values in settings.values():
        values.update(
            min_poll_seconds=1.0,
            observe_error_retry_seconds=1.0,
            recovery_retry_seconds=2.0,
            release_retry_seconds=1.0,
        )
    return settings


def node(key: str, lane: str, *depends_on: str, **config: Any) -> dict[str, Any]:
    return {
        "key": key,
        "executor": "sim",
        "depends_on": list(depends_on),
        "config": {"lane": lane, "time_scale": lane_scale(lane), **config},
    }


Plan = Callable[[random.Random], list[dict[str, Any]]]


@dataclass(frozen=True)
class Kind:
    name: str
    weight: float
    plan: Plan
    approve: bool = True
    cancel_after: tuple[float, float] | None = None
    """Cancelled by the operator this many seconds (a range) after approval."""
    expires_in: float | None = None
    """Left unapproved, with an expiry this many seconds after creation."""
    poison: bool = False


def _chain(rng: random.Random) -> list[dict[str, Any]]:
    return [
        node("burn", "cctp_fast"),
        node("mint", "cctp_fast", "burn"),
        node("deposit", "bybit_deposit", "mint"),
    ]


KINDS: tuple[Kind, ...] = (
    Kind("single", 22, lambda rng: [node("transfer", rng.choice(ANY_LANE))]),
    Kind("chain", 16, _chain),
    Kind(
        "fanout",
        10,
        lambda rng: [
            node("withdraw", "bybit_withdrawal"),
            node("taxi", "stargate_taxi", "withdraw"),
            node("cctp", "cctp_fast", "withdraw"),
            node("settle", "bybit_deposit", "taxi", "cctp"),
        ],
    ),
    Kind(
        "instant",
        8,
        lambda rng: [node("a", "instant"), node("b", "instant", "a"), node("c", "instant", "b")],
    ),
    Kind(
        "failing",
        7,
        lambda rng: [
            node("bridge", "stargate_taxi", fail_p=1.0),
            node("deposit", "bybit_deposit", "bridge"),
        ],
    ),
    Kind(
        "lost_receipt",
        6,
        lambda rng: [node("burn", "cctp_fast", unknown_p=1.0), node("mint", "cctp_fast", "burn")],
    ),
    Kind(
        "flaky",
        10,
        lambda rng: [
            node("send", rng.choice(SLOW_LANES), fail_p=0.3, unknown_p=0.2),
            node("credit", "cctp_fast", "send", unknown_p=0.2),
        ],
    ),
    Kind(
        "refused",
        3,
        lambda rng: [
            node("withdraw", "bybit_withdrawal", submit_error="permanent"),
            node("deposit", "bybit_deposit", "withdraw"),
        ],
    ),
    Kind(
        "retried", 2, lambda rng: [node("withdraw", "bybit_withdrawal", submit_error="retryable")]
    ),
    Kind("cancelled", 4, _chain, cancel_after=(0.5, 5.0)),
    Kind("expiring", 2, lambda rng: [node("transfer", "cctp_fast")], approve=False, expires_in=3),
)
BY_NAME = {kind.name: kind for kind in KINDS}

POISON: dict[str, Kind] = {
    # the sim's latency overflows a timedelta: OverflowError inside submit
    "poison_overflow": Kind(
        "poison_overflow",
        0,
        lambda rng: [node("transfer", "cctp_fast", time_scale=1e-300)],
        poison=True,
    ),
    # a latency of 1e13 s: the side effect's INSERT fails, timestamp out of range
    "poison_range": Kind(
        "poison_range",
        0,
        lambda rng: [node("transfer", "cctp_fast", min_latency_s=1e13, max_latency_s=1e13)],
        poison=True,
    ),
}
"""Node configs that make the sim raise, if they get in: the sim's schema now
bounds them, so the engine refuses them at creation (the run says so, with the
SQLSTATE)."""


def _crash_at(step: str) -> Kind:
    return Kind(
        f"poison_crash_{step}",
        0,
        lambda rng: [node("transfer", "cctp_fast", crash_at=step)],
        poison=True,
    )


def poison_kinds() -> list[Kind]:
    """POISON, and when the sim executor can crash on purpose (a ``crash_at``
    step in its node config schema) a node that crashes at submit and one that
    crashes at observe, after its side effect went out."""
    kinds = list(POISON.values())
    crash_at = SimExecutor.node_config_schema.get("properties", {}).get("crash_at", {})
    kinds += [_crash_at(step) for step in ("submit", "observe") if step in crash_at.get("enum", ())]
    return kinds


def pick(rng: random.Random) -> Kind:
    return rng.choices(KINDS, weights=[k.weight for k in KINDS])[0]


def _transient(exc: BaseException) -> bool:
    """A fault between us and the server (worth calling again), not a refusal."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not (
        getattr(exc, "sqlstate", None) or ""
    ).startswith("QT")


class Session:
    """One login's connection, reopened after a fault."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None

    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        return self._conn

    def drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def call(self, fn: Callable[[psycopg.Connection[Any]], Any], until: float) -> Any:
        """``fn(conn)``, called again after every transient fault until ``until``."""
        while True:
            try:
                return fn(self.conn())
            except psycopg.Error as exc:
                if not _transient(exc) or time.monotonic() > until:
                    raise
                self.drop()
                time.sleep(0.3)


@dataclass
class Planned:
    at: float
    """Seconds after the feed starts."""
    kind: Kind
    group: int | None = None
    """Movements of one group are approved together, in one transaction: their
    first nodes are READY at the same moment, and claimed in one batch."""


def steady(rng: random.Random, count: int, rate: float) -> list[Planned]:
    """``count`` movements of the mix, ``rate`` a second."""
    return [Planned(i / rate, pick(rng)) for i in range(count)]


def burst(rng: random.Random, at: float, size: int, poison: Kind, group: int) -> list[Planned]:
    """``size`` movements approved at once with ``poison`` in the middle: one busy batch."""
    good = [Planned(at, pick(rng), group) for _ in range(size)]
    good.insert(size // 2, Planned(at, poison, group))
    return good


def _bound(dsn: str, network: NetworkMode, application_name: str) -> str:
    return make_conninfo(
        dsn, application_name=application_name, options=f"-c search_path={network},qtg"
    )


class Feeder:
    """Creates, approves and cancels the planned movements in a thread of its own."""

    def __init__(
        self,
        operator_dsn: str,
        approver_dsn: str,
        network: NetworkMode,
        prefix: str,
        plan: list[Planned],
        ledger: Ledger,
        rng: random.Random,
        now: Callable[[], dt.datetime],
    ) -> None:
        """``operator_dsn`` creates and cancels, ``approver_dsn`` (another login)
        approves; both are bound to ``network`` here."""
        self.operator = Session(_bound(operator_dsn, network, "qtg-chaos-operator"))
        self.approver = Session(_bound(approver_dsn, network, "qtg-chaos-approver"))
        self.prefix = prefix
        self.plan = sorted(plan, key=lambda p: p.at)
        self.ledger = ledger
        self.rng = rng
        self.now = now
        self.errors: list[str] = []
        self.cancels = 0
        self.done = threading.Event()
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-feeder", daemon=True)
        self._cancels: list[tuple[float, int]] = []

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def duration(self) -> float:
        return self.plan[-1].at if self.plan else 0.0

    def _run(self) -> None:
        started = time.monotonic()
        try:
            for first, group in self._groups():
                while not self.stop.is_set():
                    self._due_cancels()
                    wait = started + group[0].at - time.monotonic()
                    if wait <= 0:
                        break
                    time.sleep(min(wait, 0.05))
                if self.stop.is_set():
                    return
                try:
                    self._feed(first, group)
                except Exception as exc:  # a bug or an unexpected refusal: say it, go on
                    self.errors.append(f"feed {first}: {type(exc).__name__}: {exc}"[:300])
            while self._cancels and not self.stop.is_set():
                self._due_cancels()
                time.sleep(0.05)
        finally:
            self.operator.drop()
            self.approver.drop()
            self.done.set()

    def _groups(self) -> list[tuple[int, list[Planned]]]:
        """The plan as runs of one group (a movement alone is a group of one),
        each with the index of its first movement."""
        runs: list[tuple[int, list[Planned]]] = []
        for i, planned in enumerate(self.plan):
            last = runs[-1][1] if runs else None
            if last is not None and planned.group is not None and last[-1].group == planned.group:
                last.append(planned)
            else:
                runs.append((i, [planned]))
        return runs

    def _feed(self, first: int, group: list[Planned]) -> None:
        """Create the group's movements, then approve those that want it, together."""
        created: list[tuple[str, Kind, int]] = []
        for i, planned in enumerate(group, start=first):
            external_id = f"{self.prefix}-{i:05d}-{planned.kind.name}"
            movement_id = self._create(external_id, planned.kind)
            if movement_id is not None and planned.kind.approve:
                created.append((external_id, planned.kind, movement_id))
        if not created:
            return
        ids = [movement_id for _, _, movement_id in created]
        try:
            self.approver.call(
                lambda c: self._approve_all(c, ids), time.monotonic() + RETRY_SECONDS
            )
        except psycopg.Error as exc:
            self._failed(",".join(e for e, _, _ in created), "approve", exc)
            return
        for _, kind, movement_id in created:
            if kind.cancel_after is not None:
                delay = self.rng.uniform(*kind.cancel_after)
                heapq.heappush(self._cancels, (time.monotonic() + delay, movement_id))

    def _create(self, external_id: str, kind: Kind) -> int | None:
        self.ledger.try_(external_id, kind.name, poison=kind.poison)
        amount = Decimal(self.rng.randint(100, 10**8)) / 100
        expires_at = self.now() + dt.timedelta(seconds=kind.expires_in) if kind.expires_in else None
        create = procs.create_movement(
            external_id,
            amount,
            plan={"nodes": kind.plan(self.rng)},
            expires_at=expires_at if expires_at is not None else procs.DEFAULT,
            callback_url=CALLBACK_URL,
        )
        try:
            created = self.operator.call(create.one, time.monotonic() + RETRY_SECONDS)
        except psycopg.Error as exc:
            self._failed(external_id, "create", exc)
            return None
        self.ledger.ack(external_id, created.movement_id)
        return int(created.movement_id)

    @classmethod
    def _approve_all(cls, conn: psycopg.Connection[Any], movement_ids: list[int]) -> None:
        with conn.transaction():
            for movement_id in movement_ids:
                cls._approve(conn, movement_id)

    @staticmethod
    def _approve(conn: psycopg.Connection[Any], movement_id: int) -> None:
        """Approve, unless an earlier call lost to a fault already did."""
        row = conn.execute(
            "SELECT request_state::text FROM movement_requests WHERE id = %s", (movement_id,)
        ).fetchone()
        if row is not None and row[0] == "PENDING_APPROVAL":
            procs.approve_movement(movement_id).one(conn)

    def _due_cancels(self) -> None:
        while self._cancels and self._cancels[0][0] <= time.monotonic():
            _, movement_id = heapq.heappop(self._cancels)
            cancel = procs.cancel_movement(movement_id, "chaos: the operator changed their mind")
            try:
                self.operator.call(cancel.one, time.monotonic() + RETRY_SECONDS)
                self.cancels += 1
            except psycopg.Error as exc:
                # QT020: it ended before the cancel arrived; that is a race, not a fault
                if getattr(exc, "sqlstate", None) != "QT020":
                    self._failed(str(movement_id), "cancel", exc)

    def _failed(self, what: str, step: str, exc: psycopg.Error) -> None:
        sqlstate = getattr(exc, "sqlstate", None) or type(exc).__name__
        if step == "create":
            self.ledger.refuse(what, sqlstate)
        self.errors.append(f"{step} {what}: {sqlstate}: {' '.join(str(exc).split())[:200]}")
