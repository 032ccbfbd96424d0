"""The `sim` executor: a configurable stand-in for a chain or an exchange.

Each node's config names a lane preset (latencies that mimic a real lane) and
may override its latency range, failure and UNKNOWN probabilities. Every side
effect is a row in qtg_sim.side_effects keyed by the intent's idempotency key:
a repeated submit is recognised, not repeated; observe() reads the row as a
chain RPC would read a receipt; recover() finds real evidence there.

Outcomes are drawn from a random generator seeded by the idempotency key, so a
run is reproducible. ``time_scale`` divides every latency, so the demo runs
real lane shapes in seconds.

Its schema bounds every number (a time scale of 0.001 to a million, latencies
of at most a week, probabilities of 0 to 1), so the engine refuses an absurd
config when the movement is created; and the executor clamps what it reads all
the same (a node created under an older schema, a NaN), so no config makes it
raise. For fault tests, ``crash_at`` makes it raise on purpose (SimCrash, not
an ExecutorError: what a bug would raise) at one step for that node: nothing
goes out, and the runner must quarantine that node alone.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from qtg_runner.executors.base import (
    ExecutorBase,
    HealthResult,
    HealthStatus,
    NodeWork,
    ObserveResult,
    ObserveStatus,
    Prepared,
    RecoveryOutcome,
    RecoveryResult,
    SubmitResult,
    config_schema,
)


@dataclass(frozen=True)
class LanePreset:
    """A real lane's shape, in real seconds."""

    baseline_seconds: float
    min_latency_seconds: float
    max_latency_seconds: float
    min_poll_seconds: float = 1.0
    description: str = ""


LANE_PRESETS: dict[str, LanePreset] = {
    "cctp_fast": LanePreset(15, 8, 20, 1, "CCTP v2 Fast Transfer: attestation in ~8-20 s"),
    "cctp_standard": LanePreset(960, 780, 1140, 5, "CCTP v2 Standard: ~13-19 min of finality"),
    "ccip": LanePreset(1200, 900, 1500, 5, "Chainlink CCIP from an L2: ~15-25 min"),
    "stargate_taxi": LanePreset(120, 60, 240, 2, "Stargate v2 taxi: sends at once"),
    "stargate_bus": LanePreset(600, 300, 1200, 5, "Stargate v2 bus: waits for the bus to fill"),
    "bybit_withdrawal": LanePreset(300, 120, 600, 5, "Bybit withdrawal: checks, then broadcast"),
    "bybit_deposit": LanePreset(180, 60, 300, 5, "Bybit deposit: credited after confirmations"),
    "instant": LanePreset(1, 0, 0, 0.05, "completes at submit: no observation"),
}


MIN_TIME_SCALE = 0.001
MAX_TIME_SCALE = 1_000_000.0
MAX_LATENCY_SECONDS = 7 * 24 * 3600.0
"""A week: the longest latency a sim lane takes (configs beyond it are refused)."""


class SimCrash(RuntimeError):
    """Raised by a node whose config asks for it (crash_at): what a bug in an
    executor would raise, not an ExecutorError."""


def _bounded(value: Any, low: float, high: float, default: float) -> float:
    """``value`` as a float within [low, high]; ``default`` when it is not a
    finite number."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return default
    if not math.isfinite(number):
        return default
    return min(max(number, low), high)


class SimExecutor(ExecutorBase):
    key = "sim"
    has_side_effect = True
    deduplicated_by = "the sim world's idempotency key (qtg_sim.side_effects)"
    description = "simulated lane with configurable latency and outcomes"
    node_config_schema = config_schema(
        (),
        own={
            "time_scale": {"type": "number", "minimum": MIN_TIME_SCALE, "maximum": MAX_TIME_SCALE},
            "min_latency_s": {"type": "number", "minimum": 0, "maximum": MAX_LATENCY_SECONDS},
            "max_latency_s": {"type": "number", "minimum": 0, "maximum": MAX_LATENCY_SECONDS},
            "fail_p": {"type": "number", "minimum": 0, "maximum": 1},
            "unknown_p": {"type": "number", "minimum": 0, "maximum": 1},
            "submit_error": {"type": "string", "enum": ["retryable", "permanent"]},
            "crash_at": {"type": "string", "enum": ["prepare", "submit", "observe", "recover"]},
            "amount": {"type": "number", "exclusiveMinimum": 0},
        },
    )

    # -- what a lane does --------------------------------------------------

    @staticmethod
    def _rng(work: NodeWork) -> random.Random:
        seed = hashlib.sha256(f"{work.network}:{work.idempotency_key}".encode()).digest()
        return random.Random(int.from_bytes(seed[:8], "big"))

    @staticmethod
    def _latency(work: NodeWork, rng: random.Random) -> float:
        """Seconds until the side effect settles, from the lane preset scaled by
        time_scale or the config's own range, each clamped to [0, a week]."""
        config = work.node_config
        preset = LANE_PRESETS.get(str(config.get("lane")), LANE_PRESETS["cctp_fast"])
        scale = _bounded(config.get("time_scale", 1), MIN_TIME_SCALE, MAX_TIME_SCALE, 1.0)
        low = _bounded(
            config.get("min_latency_s", preset.min_latency_seconds / scale),
            0.0,
            MAX_LATENCY_SECONDS,
            preset.min_latency_seconds,
        )
        high = _bounded(
            config.get("max_latency_s", preset.max_latency_seconds / scale),
            0.0,
            MAX_LATENCY_SECONDS,
            preset.max_latency_seconds,
        )
        return rng.uniform(min(low, high), max(low, high))

    @staticmethod
    def _chance(work: NodeWork, key: str) -> float:
        return _bounded(work.node_config.get(key, 0), 0.0, 1.0, 0.0)

    @staticmethod
    def _crash_point(work: NodeWork, step: str) -> None:
        if work.node_config.get("crash_at") == step:
            raise SimCrash(f"sim node {work.node_id} crashes at {step}, as its config asks")

    # -- the protocol ------------------------------------------------------

    async def preflight(self, work: NodeWork) -> None:
        from qtg_runner.executors.base import ExecutorError

        self._crash_point(work, "prepare")
        error = work.node_config.get("submit_error")
        if error is not None:
            raise ExecutorError(
                f"sim lane {work.lane} refused the submit ({error})",
                retryable=error == "retryable",
                retry_after=1.0,
            )

    async def prepare(self, work: NodeWork) -> Prepared:
        return Prepared(
            external_request_id=work.idempotency_key,
            payload={"lane": work.lane, "amount": str(work.amount)},
        )

    def _drawn(self, work: NodeWork) -> tuple[float, bool, bool]:
        """What the node's submit does, drawn from its seed: (latency, failed,
        hidden). A node whose config asks for it crashes here."""
        self._crash_point(work, "submit")
        rng = self._rng(work)
        latency = self._latency(work, rng)
        failed = rng.random() < self._chance(work, "fail_p")
        hidden = rng.random() < self._chance(work, "unknown_p")
        return latency, failed, hidden

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        (result,) = await self._submitted([(work, prepared)])
        return result

    async def submit_many(self, items: Sequence[tuple[NodeWork, Prepared]]) -> list[SubmitResult]:
        """submit() for many nodes in one INSERT: the same rows, outcomes and
        results as one submit() per node, in one transaction."""
        if not items:
            return []
        return await self._submitted(items)

    async def _submitted(self, items: Sequence[tuple[NodeWork, Prepared]]) -> list[SubmitResult]:
        """The side effects of ``items`` in one INSERT: a row each (a repeated
        one counted again), each settled at once when its drawn outcome has
        completed and is not hidden."""
        drawn = [(work, *self._drawn(work)) for work, _prepared in items]
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    """
                INSERT INTO qtg_sim.side_effects AS se
                       (network, idempotency_key, node_id, lane, amount, outcome, hidden,
                        completes_at)
                SELECT %s, u.key, u.node_id, u.lane, u.amount, u.outcome, u.hidden,
                       clock_timestamp() + u.latency
                  FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::numeric[], %s::text[],
                              %s::boolean[], %s::interval[])
                       AS u(key, node_id, lane, amount, outcome, hidden, latency)
                ON CONFLICT (network, idempotency_key)
                DO UPDATE SET submit_count = se.submit_count + 1
                RETURNING idempotency_key, submit_count, completes_at <= clock_timestamp(),
                          outcome
                """,
                    (
                        self._network,
                        [w.idempotency_key for w, *_ in drawn],
                        [w.node_id for w, *_ in drawn],
                        [w.lane for w, *_ in drawn],
                        [w.amount for w, *_ in drawn],
                        ["FAILED" if f else "COMPLETED" for _, _, f, _ in drawn],
                        [h for *_, h in drawn],
                        [timedelta(seconds=lat) for _, lat, _, _ in drawn],
                    ),
                )
            ).fetchall()
        by_key = {str(r[0]): r for r in rows}
        results = []
        for work, latency, _failed, hidden in drawn:
            _key, count, done, outcome = by_key[str(work.idempotency_key)]
            results.append(
                SubmitResult(
                    external_ref=f"sim:{self._network}:{work.idempotency_key}",
                    settled=bool(done) and outcome == "COMPLETED" and not hidden,
                    evidence={"latency_s": round(latency, 3), "submit_count": count},
                )
            )
        return results

    async def _lookup(self, work: NodeWork) -> tuple[Any, ...] | None:
        key = work.idempotency_key or (work.intent or {}).get("idempotency_key")
        async with self._pool.connection() as conn:
            row: tuple[Any, ...] | None = await (
                await conn.execute(
                    """
                SELECT outcome, completes_at <= clock_timestamp(), hidden,
                       extract(epoch FROM completes_at - clock_timestamp())::float8
                  FROM qtg_sim.side_effects
                 WHERE network = %s AND idempotency_key = %s
                """,
                    (self._network, key),
                )
            ).fetchone()
        return row

    async def observe(self, work: NodeWork) -> ObserveResult:
        self._crash_point(work, "observe")
        row = await self._lookup(work)
        if row is None:
            return ObserveResult(ObserveStatus.UNKNOWN, {"reason": "no such side effect"})
        outcome, done, hidden, remaining = row
        if hidden:
            return ObserveResult(ObserveStatus.UNKNOWN, {"reason": "lane cannot see the transfer"})
        if not done:
            return ObserveResult(ObserveStatus.PENDING, {"remaining_s": round(remaining, 3)})
        return ObserveResult(ObserveStatus(outcome), {"outcome": outcome})

    async def recover(self, work: NodeWork) -> RecoveryResult:
        self._crash_point(work, "recover")
        row = await self._lookup(work)
        if row is None:
            prepared = Prepared.from_intent(work.intent)
            if prepared is None:
                return RecoveryResult(
                    RecoveryOutcome.NOT_SUBMITTED, {"reason": "no side effect recorded"}
                )
            # prepared but not seen: resubmit that same payload (its idempotency key
            # makes a second arrival a no-op), never a new one
            prepared_key = str((work.intent or {}).get("idempotency_key"))
            result = await self.submit(replace(work, idempotency_key=prepared_key), prepared)
            return RecoveryResult(
                RecoveryOutcome.IN_FLIGHT,
                {"resubmitted": "the prepared payload", **result.evidence},
                external_ref=result.external_ref,
            )
        outcome, done, _hidden, _remaining = row
        key = work.idempotency_key or (work.intent or {}).get("idempotency_key")
        async with self._pool.connection() as conn:
            await conn.execute(
                "UPDATE qtg_sim.side_effects SET hidden = false"
                " WHERE network = %s AND idempotency_key = %s",
                (self._network, key),
            )
        ref = f"sim:{self._network}:{key}"
        if not done:
            return RecoveryResult(
                RecoveryOutcome.IN_FLIGHT, {"found": "in flight"}, external_ref=ref
            )
        return RecoveryResult(RecoveryOutcome(outcome), {"found": outcome}, external_ref=ref)

    async def health(self) -> HealthResult:
        async with self._pool.connection() as conn:
            await conn.execute("SELECT 1 FROM qtg_sim.side_effects LIMIT 1")
        return HealthResult(HealthStatus.HEALTHY, {"network": self._network})


def lane_baselines(time_scale: float = 1.0) -> dict[str, dict[str, float]]:
    """The presets as upsert_lane_baseline arguments, time-scaled."""
    return {
        lane: {
            "baseline_seconds": max(preset.baseline_seconds / time_scale, 0.05),
            "min_poll_seconds": min(
                preset.min_poll_seconds, max(preset.baseline_seconds / time_scale / 10, 0.05)
            ),
        }
        for lane, preset in LANE_PRESETS.items()
    }
