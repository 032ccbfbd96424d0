"""What a core worker does when one node fails it: the node alone pays.

Whatever step fails for a node (an executor call, or the procedure that
reports it), the failure is one of three kinds:

  transient   the database or the network said nothing about the node: a lost
              connection, a timeout, a lock wait, an exhausted pool
              (psycopg.OperationalError and InterfaceError, PoolTimeout,
              OSError, TimeoutError). The node stays as it is, claimed, for
              recovery: at once once its claimer is known dead, else after the
              claim's lease. An executor's call that outlives the worker's
              deadline over it (``within``: NoAnswer) is one too, but the
              database did answer, so the worker reports the node's call as
              failed, as it would the executor's own retryable refusal;
  stale       a procedure refused the node because it is someone else's now:
              not this claim's (QT030), moved on (QT021), gone (QT011). The
              result is dropped; its owner carries on;
  poison      anything else: an executor raised what it never should (any
              type but ExecutorError, whose verdict each worker reports through
              its procedure), or the engine refused the node's own data
              (QT002, QT005, QT050, a constraint, a value out of range).
              Retrying would fail the same way, so the node is quarantined
              (quarantine_nodes): no claim hands it out until an operator
              releases it.

The other nodes of the batch go on in every case, and the worker stays up.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from qtg_runner.db import procs
from qtg_runner.executors.base import NodeWork
from qtg_runner.log import node_event
from qtg_runner.loop import WorkerContext

T = TypeVar("T")


class NoAnswer(TimeoutError):
    """An executor's call that gave no answer within the deadline its worker
    sets over the whole call (``within``), whatever calls to services it made
    on the way, each within its own client's bound."""


async def within(seconds: float, call: str, action: Awaitable[T]) -> T:
    """``action``, an executor's ``call`` (``"prepare()"``), cancelled once
    ``seconds`` have passed, and then NoAnswer saying so. A worker's batch
    waits for its slowest node: without this an executor that never answers
    (a service that drips, a signer that hangs, a bug) would hold the batch,
    its claims and the worker's loop for good. A TimeoutError of the action's
    own is raised as it is."""
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            return await action
    except TimeoutError:
        if deadline.expired():
            raise NoAnswer(f"{call} gave no answer in {seconds:g} s") from None
        raise


class Failure(enum.Enum):
    TRANSIENT = "transient"
    STALE = "stale"
    POISON = "poison"


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    PoolTimeout,
    OSError,
    TimeoutError,
)
STALE_CODES = frozenset({"QT011", "QT021", "QT030"})


def classify(exc: BaseException) -> Failure:
    """The kind of a failure raised for a node (not an ExecutorError)."""
    if isinstance(exc, TRANSIENT_ERRORS):
        return Failure.TRANSIENT
    if isinstance(exc, psycopg.Error) and exc.sqlstate in STALE_CODES:
        return Failure.STALE
    return Failure.POISON


def classify_code(code: str) -> Failure:
    """The kind of a batch call's refusal of one node (its row's error_code)."""
    return Failure.STALE if code in STALE_CODES else Failure.POISON


async def refused(
    ctx: WorkerContext,
    level: int,
    name: str,
    worker: str,
    work: NodeWork,
    /,
    *,
    step: str,
    code: str,
    message: str | None,
    claims: ClaimTransaction | None = None,
) -> None:
    """A batch call's refusal of one node (its row's error ``code`` and
    ``message``), logged as ``name``: the node quarantined when the engine
    refused its own data (POISON), else (STALE) left to its owner. ``claims``:
    the claim's transaction, when only it can prove the claim (the observer's)."""
    node_event(level, name, worker, work, step=step, code=code, error=message)
    if classify_code(code) is Failure.POISON:
        await quarantine(ctx, worker, [work], step, f"{code}: {message}", claims=claims)


@dataclass
class ClaimTransaction:
    """The caller's open transaction, which holds the nodes' claims (the
    observer's: only it can prove them). A quarantine made on it takes effect
    when it commits, so that is when it is said: the caller calls
    :meth:`committed` after the COMMIT, and a transaction rolled back says
    nothing of it."""

    conn: psycopg.AsyncConnection[Any]
    _said: list[Callable[[], None]] = field(default_factory=list)

    def on_commit(self, say: Callable[[], None]) -> None:
        self._said.append(say)

    def committed(self) -> None:
        said, self._said = self._said, []
        for say in said:
            say()


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def quarantine(
    ctx: WorkerContext,
    worker: str,
    works: Sequence[NodeWork],
    step: str,
    error: str,
    claims: ClaimTransaction | None = None,
) -> None:
    """quarantine_nodes for ``works``, each proven by its claim, with why; on
    ``claims`` when the caller's transaction holds the nodes' locks (the
    observer's), in a savepoint, and said once it commits. Never raises: a
    node the call does not take stays claimed, and recovery finds it (and
    counts its lost claim)."""
    if not works:
        return
    reason = ctx.limits.text(f"{worker} {step}: {error}")
    call = procs.quarantine_nodes(
        [w.node_id for w in works], [w.claim_secret for w in works], [reason] * len(works)
    )
    try:
        if claims is None:
            async with ctx.pool.connection() as own:
                rows = await call.aall(own)
        else:
            async with claims.conn.transaction():
                rows = await call.aall(claims.conn)
    except Exception as exc:  # the last resort must not break the worker
        for work in works:
            node_event(
                logging.ERROR, "quarantine_failed", worker, work, step=step, error=describe(exc)
            )
        return
    for work, row in zip(works, rows, strict=True):
        if row.error_code is None:
            said = functools.partial(
                node_event, logging.ERROR, "node_quarantined", worker, work, step=step, error=error
            )
            if claims is None:
                said()
            else:
                claims.on_commit(said)
        else:
            node_event(
                logging.ERROR,
                "quarantine_refused",
                worker,
                work,
                step=step,
                code=row.error_code,
                error=row.error_message,
            )
