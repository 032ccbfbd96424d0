"""The node dispatcher's mechanics: each step of its loop (node_dispatcher) on a
batch of claimed nodes, with the rules that keep one node's failure its own.

  Dispatch.runnable        gives back the nodes whose executor this runner lacks
  Dispatch.prepare         preflight and prepare, each within its deadline
  Dispatch.record_intents  the intents in one call; a taken nonce signed again
  Dispatch.holding         the claims asked after just before the side effects
  Dispatch.submit          one group's side effects (submit_many, or each alone)
  Dispatch.report          one group's submits reported (complete_submit_batch)
  Dispatch.bounded         a step for many items, max_concurrency at a time
  groups                   the submit groups: a BatchSubmitter's nodes, or one

How a failure is settled, in one place (``Dispatch.failed``): a prepare
throttled by an endpoint's request budget or its 429 (ExecutorError
``throttled``: the endpoint's limit, nothing of the node's) gives the node
back through release_nodes, READY after the endpoint's wait, no attempt
counted; the executor's other refusals (ExecutorError, a transient error
before anything was signed, or a prepare or submit that outlives its
deadline, Bounds) are reported through fail_submit, which decides (in SQL)
between a retry, FAILED and recovery; any
other transient error once the intent is recorded leaves the node SUBMITTING
for recovery; a refusal because the node is someone else's now is dropped;
anything else (an executor raising what it never should, the engine refusing
the node's own data) quarantines the node (qtg_runner.faults).

Poison isolation (``Dispatch.each_alone``): a batch procedure call the
database fails as a whole with anything but a transient error is made again
for each node alone, so that such a failure lands on its node; a group's
submit_many that fails is made again as one submit a node, likewise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

from qtg_runner.db import procs
from qtg_runner.executors.base import (
    BatchSubmitter,
    Executor,
    ExecutorError,
    NodeWork,
    NonceSigner,
    Prepared,
    SubmitResult,
)
from qtg_runner.executors.evm_tx import EvmExecutor
from qtg_runner.faults import (
    Failure,
    NoAnswer,
    classify,
    describe,
    quarantine,
    refused,
    within,
)
from qtg_runner.log import node_event
from qtg_runner.loop import WorkerContext

WORKER = "node_dispatcher"
NONCE_ATTEMPTS = 5
"""Times an EVM intent is recorded, signed again at the account's next nonce
after each refusal because another dispatcher took its nonce (QT031)."""
NONCE_TAKEN = "QT031"

T = TypeVar("T")
U = TypeVar("U")
N = TypeVar("N")

MAX_THROTTLED_WAIT_S = 600.0
"""The longest a throttled node is given back for (an endpoint paused after a 429)."""


@dataclass(frozen=True)
class Bounds:
    """How long a batch's steps may take (node_dispatcher's settings)."""

    prepare_s: float
    """The longest a node's preflight and prepare (or a signing again) may take."""
    submit_s: float
    """The longest one submit (or a group's submit_many) may take."""
    report_retries_s: Sequence[float]
    """The waits between the attempts of a report that failed transiently."""


@dataclass(frozen=True)
class Node:
    work: NodeWork
    executor: Executor


@dataclass(frozen=True)
class PreparedNode(Node):
    prepared: Prepared


@dataclass(frozen=True)
class SubmittedNode(PreparedNode):
    result: SubmitResult


def asynchronous_commit(call: procs.Call[T]) -> procs.Call[T]:
    """``call`` as one statement whose transaction (the autocommit statement's
    own) commits without waiting for its WAL to reach disk: synchronous_commit
    is set for that transaction only (set_config's is_local), in the same
    round trip.

    The claim is made so: one fsync less between a node becoming READY and its
    side effect. Nothing outside the database acts on a claim before the
    intent is recorded, and that call (record_intent_prepared_batch) commits
    synchronously, which flushes the WAL up to it, the claim's included, before
    any side effect is made. A crash of the server that loses a claim loses it
    whole (the node READY again, its intent and audit rows gone with it),
    before anything was signed or sent. A claim that starts movements commits
    synchronously all the same (the procedure sets it back on for its
    transaction): their callbacks leave the database."""
    return dataclasses.replace(
        call,
        query="SELECT claimed.* FROM (SELECT set_config('synchronous_commit', 'off', true))"
        f" AS commit_mode CROSS JOIN LATERAL ({call.query}) AS claimed",
    )


def all_batched(ctx: WorkerContext) -> bool:
    """Whether every executor of the runner submits in batches (BatchSubmitter)."""
    executors = ctx.executors.values()
    return bool(executors) and all(isinstance(e, BatchSubmitter) for e in executors)


def groups(nodes: Sequence[PreparedNode]) -> list[list[PreparedNode]]:
    """The submit groups: all the nodes of an executor that implements
    BatchSubmitter (one call), and each node of any other executor alone."""
    batched: dict[str, list[PreparedNode]] = {}
    alone: list[list[PreparedNode]] = []
    for node in nodes:
        if isinstance(node.executor, BatchSubmitter):
            batched.setdefault(node.work.executor_key, []).append(node)
        else:
            alone.append([node])
    return [*batched.values(), *alone]


async def reported_again(call: Callable[[], Awaitable[T]], retries_s: Sequence[float]) -> T:
    """A report (complete_submit_batch, fail_submit) made again after a transient
    failure, ``retries_s`` apart, rather than left to the claim's lease (300 s,
    then recovery): a connection dropped or a failover under the report loses a
    few seconds, not minutes. A report that did commit before its answer was
    lost is refused when made again (the node is no longer the claim's:
    QT021/QT030), which the callers read as any refusal. Raises what the last
    attempt raised."""
    for wait in retries_s:
        try:
            return await call()
        except Exception as exc:
            if classify(exc) is not Failure.TRANSIENT:
                raise
            await asyncio.sleep(wait)
    return await call()


def _work(node: Node) -> NodeWork:
    return node.work


def _same(work: NodeWork) -> NodeWork:
    return work


async def step_failed(
    ctx: WorkerContext,
    worker: str,
    works: Sequence[NodeWork],
    step: str,
    exc: BaseException,
    level: int,
    name: str,
) -> None:
    """A ``step`` of ``works`` that failed with ``exc`` (not an executor's
    answer): logged as ``name`` for each node, with the failure's kind; the
    nodes quarantined when it is POISON, else left to their claims' leases."""
    kind = classify(exc)
    for work in works:
        node_event(
            level,
            name,
            worker,
            work,
            step=step,
            kind=kind.value,
            error=ctx.limits.text(describe(exc)),
        )
    if kind is Failure.POISON:
        await quarantine(ctx, worker, works, step, describe(exc))


@dataclass(frozen=True)
class Dispatch:
    """The steps of one batch for one runner (``ctx``) within ``bounds``. Every
    step takes the nodes the previous one kept and returns those it kept in
    turn; a node it drops was settled on the way (``failed``)."""

    ctx: WorkerContext
    bounds: Bounds

    # -- the steps, in the loop's order ---------------------------------------------

    async def runnable(self, works: Sequence[NodeWork]) -> list[Node]:
        """``works`` with their executors; those this runner cannot run go back,
        in one call (release_nodes), untouched, for a runner that can: READY
        again without consuming a submit attempt."""
        nodes: list[Node] = []
        missing: list[NodeWork] = []
        for work in works:
            executor = self.ctx.executor_for(work)
            if executor is None:
                missing.append(work)
            else:
                nodes.append(Node(work, executor))
        if missing:
            await self.each_alone(missing, "release", self._release, key=_same)
        return nodes

    async def prepare(self, nodes: Sequence[Node]) -> list[PreparedNode]:
        """Preflight and prepare, each node within ``bounds.prepare_s``: nothing is
        signed for a node the executor refuses."""

        async def one(node: Node) -> PreparedNode | None:
            return await self.guarded(
                [node.work],
                "prepare",
                lambda: within(self.bounds.prepare_s, "prepare()", _prepared(node)),
            )

        return [n for n in await self.bounded(nodes, one) if n is not None]

    async def record_intents(self, nodes: Sequence[PreparedNode]) -> list[PreparedNode]:
        """The intents, in one transaction (record_intent_prepared_batch): only a
        recorded node may be submitted."""
        if not nodes:
            return []
        return await self.each_alone(nodes, "record_intents", self._record, key=_work)

    async def holding(self, group: Sequence[PreparedNode]) -> list[PreparedNode]:
        """The nodes of ``group`` whose claims still hold, asked just before their
        external calls (check_claims): a dispatcher that froze after recording its
        intents may have been replaced by recovery, which resubmits the payload
        itself. A node whose claim is gone is left to its new owner (no report: it
        is not this dispatcher's any more). If the question cannot be asked, none
        is submitted: each stays SUBMITTING with its intent recorded, and recovery
        sends the same payload once the lease runs out."""
        try:
            async with self.ctx.pool.connection() as conn:
                rows = await procs.check_claims(
                    [n.work.node_id for n in group], [n.work.claim_secret for n in group]
                ).aall(conn)
        except Exception as exc:
            if classify(exc) is Failure.POISON:
                raise
            for node in group:
                node_event(
                    logging.WARNING, "claim_unchecked", WORKER, node.work, error=describe(exc)
                )
            return []
        held: list[PreparedNode] = []
        for node, row in zip(group, rows, strict=True):
            if row.error_code is None:
                held.append(node)
            else:
                node_event(
                    logging.WARNING,
                    "claim_lost",
                    WORKER,
                    node.work,
                    code=row.error_code,
                    error=self.ctx.limits.text(row.error_message or ""),
                )
        return held

    async def submit(self, group: Sequence[PreparedNode]) -> list[SubmittedNode]:
        """The side effects of one group: the nodes submitted, with their results.

        A BatchSubmitter's group goes in one call (submit_many). If that call fails
        for more than one node (with anything but a transient error, after which a
        side effect may be out and recovery reconciles each node from its intent),
        each node is submitted alone (submit): the prepared payloads are the same,
        the executor said none went out, and a node that fails alone fails on its
        own. Any other executor's group is one node."""
        if not group:
            return []
        executor = group[0].executor
        if isinstance(executor, BatchSubmitter):
            try:
                results = await within(
                    self.bounds.submit_s,
                    "submit_many()",
                    executor.submit_many([(n.work, n.prepared) for n in group]),
                )
                if len(results) != len(group):
                    raise RuntimeError(
                        f"submit_many answered {len(results)} results for {len(group)} nodes"
                    )
                return [
                    SubmittedNode(n.work, n.executor, n.prepared, r)
                    for n, r in zip(group, results, strict=True)
                ]
            except Exception as exc:
                transient = classify(exc) is Failure.TRANSIENT and not isinstance(
                    exc, ExecutorError
                )
                if transient or len(group) == 1:
                    await self.failed([n.work for n in group], "submit", exc)
                    return []
                self.ctx.log(
                    logging.WARNING,
                    "submit_many_failed",
                    WORKER,
                    executor=executor.key,
                    nodes=len(group),
                    error=self.ctx.limits.text(describe(exc)),
                )

        async def one(node: PreparedNode) -> SubmittedNode | None:
            result = await self.guarded(
                [node.work],
                "submit",
                lambda: within(
                    self.bounds.submit_s,
                    "submit()",
                    node.executor.submit(node.work, node.prepared),
                ),
            )
            if result is None:
                return None
            return SubmittedNode(node.work, node.executor, node.prepared, result)

        return [s for s in await self.bounded(group, one) if s is not None]

    async def report(self, nodes: Sequence[SubmittedNode]) -> list[SubmittedNode]:
        """The submits reported in one call (complete_submit_batch): the nodes
        whose report was accepted."""
        return await self.each_alone(nodes, "report", self._complete, key=_work)

    # -- failures and isolation ----------------------------------------------------

    async def failed(self, works: Sequence[NodeWork], step: str, exc: BaseException) -> None:
        """The one place a failed step of ``works`` is settled, by its kind (see the
        module's docstring and qtg_runner.faults). Never raises."""
        ctx = self.ctx
        if isinstance(exc, NoAnswer):
            # the executor said nothing in time, the database is there to hear it
            exc = ExecutorError(str(exc), retryable=True)
        if isinstance(exc, ExecutorError) and exc.throttled and step == "prepare":
            # the endpoint's budget, not the node: nothing was signed, so the
            # node waits its turn in READY without spending an attempt
            await self.each_alone(
                works, "release", functools.partial(self._throttled, exc), key=_same
            )
            return
        if isinstance(exc, ExecutorError):
            await self._fail_submits(works, step, exc)
            return
        kind = classify(exc)
        if kind is Failure.TRANSIENT and step == "prepare":
            # the executor's service is out of reach before anything was signed: a
            # retry later, as fail_submit decides, not a claim left to its lease
            await self._fail_submits(works, step, ExecutorError(describe(exc), retryable=True))
            return
        transient = kind is Failure.TRANSIENT
        await step_failed(
            ctx,
            WORKER,
            works,
            step,
            exc,
            logging.ERROR if transient else logging.WARNING,
            "dispatch_failed" if transient else "dispatch_refused",
        )

    async def guarded(
        self, works: Sequence[NodeWork], step: str, action: Callable[[], Awaitable[T]]
    ) -> T | None:
        """One step of the dispatch for ``works``: its result, or None when it
        failed (and the failure was settled by ``failed``)."""
        try:
            return await action()
        except Exception as exc:
            await self.failed(works, step, exc)
        return None

    async def each_alone(
        self,
        items: Sequence[N],
        step: str,
        call: Callable[[Sequence[N]], Awaitable[list[N]]],
        key: Callable[[N], NodeWork],
    ) -> list[N]:
        """``call`` (a batch procedure call) for ``items``: the items it accepted. If
        the call fails as a whole with anything but a transient error, it is made
        again for each item alone, so that the failure lands on its own node and
        the others go on."""
        try:
            return await call(items)
        except Exception as exc:
            if len(items) == 1 or classify(exc) is not Failure.POISON:
                await self.failed([key(i) for i in items], step, exc)
                return []
            self.ctx.log(
                logging.WARNING,
                "batch_call_failed",
                WORKER,
                step=step,
                nodes=len(items),
                error=self.ctx.limits.text(describe(exc)),
            )
        accepted: list[N] = []
        for item in items:
            try:
                accepted.extend(await call([item]))
            except Exception as exc:
                await self.failed([key(item)], step, exc)
        return accepted

    async def bounded(self, items: Sequence[T], step: Callable[[T], Awaitable[U]]) -> list[U]:
        """``step`` for every item, ``ctx.max_concurrency`` at a time, results in
        order. A bug in one cancels the others and reaches the supervisor."""
        limit = asyncio.Semaphore(self.ctx.max_concurrency)

        async def one(item: T) -> U:
            async with limit:
                return await step(item)

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(item)) for item in items]
        return [task.result() for task in tasks]

    # -- the procedure calls -------------------------------------------------------

    async def _release(
        self,
        works: Sequence[NodeWork],
        reason: str = "no executor for the node in this runner",
        wait_s: float | None = None,
        logged: str = "executor_missing",
    ) -> list[NodeWork]:
        """release_nodes: back to READY (after ``wait_s``, else the lane's
        release wait), the attempt not counted."""
        async with self.ctx.pool.connection() as conn:
            rows = await procs.release_nodes(
                [w.node_id for w in works],
                [w.claim_secret for w in works],
                reason,
                None if wait_s is None else Decimal(str(round(wait_s, 3))),
            ).aall(conn)
        released = []
        for work, row in zip(works, rows, strict=True):
            if await self._accepted(work, row, "release"):
                released.append(work)
                node_event(logging.WARNING, logged, WORKER, work, to_state=row.node_state)
        return released

    async def _throttled(
        self, throttled: ExecutorError, works: Sequence[NodeWork]
    ) -> list[NodeWork]:
        wait = min(MAX_THROTTLED_WAIT_S, max(1.0, throttled.retry_after or 1.0))
        reason = self.ctx.limits.text(str(throttled))
        return await self._release(works, reason, wait, "throttled")

    async def _record(self, nodes: Sequence[PreparedNode]) -> list[PreparedNode]:
        """record_intent_prepared_batch; returns the nodes whose intent was recorded.
        Nodes refused because their nonce was taken are signed again at the
        account's next nonces and recorded again, up to NONCE_ATTEMPTS times; then
        they are given back for a later try (nothing was broadcast)."""
        recorded: list[PreparedNode] = []
        pending = list(nodes)
        for attempt in range(1, NONCE_ATTEMPTS + 1):
            preps = [n.prepared for n in pending]
            async with self.ctx.pool.connection() as conn:
                rows = await procs.record_intent_prepared_batch(
                    [n.work.node_id for n in pending],
                    [n.work.claim_secret for n in pending],
                    [p.nonce for p in preps],
                    [p.signed_tx_hash for p in preps],
                    [p.external_request_id for p in preps],
                    [p.payload or None for p in preps],
                    [p.chain_key for p in preps],
                    [p.sender for p in preps],
                    [p.raw_tx for p in preps],
                ).aall(conn)
            taken: list[PreparedNode] = []
            for node, row in zip(pending, rows, strict=True):
                if row.error_code == NONCE_TAKEN and isinstance(node.executor, NonceSigner):
                    taken.append(node)
                elif await self._accepted(node.work, row, "record"):
                    recorded.append(node)
            if not taken:
                break
            if attempt == NONCE_ATTEMPTS:
                refused = ExecutorError(
                    f"the account's nonce was taken {NONCE_ATTEMPTS} times in a row",
                    retryable=True,
                )
                await self._fail_submits([n.work for n in taken], "record", refused)
                break
            pending = await self._resign(taken)
            if not pending:
                break
        return recorded

    async def _resign(self, nodes: Sequence[PreparedNode]) -> list[PreparedNode]:
        """``nodes`` signed again, each account's at consecutive nonces from its
        next one (as the engine has it now; from the lowest the executor chose
        when the engine has none yet)."""
        accounts: dict[tuple[str, str], list[PreparedNode]] = {}
        for node in nodes:
            p = node.prepared
            assert p.chain_key is not None and p.sender is not None and p.nonce is not None
            accounts.setdefault((p.chain_key, p.sender), []).append(node)
        assigned: list[tuple[PreparedNode, int]] = []
        async with self.ctx.pool.connection() as conn:
            for (chain_key, sender), group in accounts.items():
                nxt = await procs.evm_next_nonce(chain_key, sender).aone(conn)
                first = nxt if nxt is not None else min(n.prepared.nonce or 0 for n in group)
                assigned.extend((node, first + i) for i, node in enumerate(group))

        async def resign(item: tuple[PreparedNode, int]) -> PreparedNode | None:
            node, nonce = item
            executor = node.executor
            assert isinstance(executor, NonceSigner)
            prepared = await self.guarded(
                [node.work],
                "prepare",
                lambda: within(
                    self.bounds.prepare_s,
                    "resign()",
                    executor.resign(node.work, node.prepared, nonce),
                ),
            )
            return None if prepared is None else PreparedNode(node.work, node.executor, prepared)

        return [n for n in await self.bounded(assigned, resign) if n is not None]

    async def _complete(self, nodes: Sequence[SubmittedNode]) -> list[SubmittedNode]:
        """complete_submit_batch; returns the nodes whose report was accepted."""
        ctx = self.ctx
        results = [n.result for n in nodes]
        report = procs.complete_submit_batch(
            [n.work.node_id for n in nodes],
            [n.work.claim_secret for n in nodes],
            [r.external_ref for r in results],
            [ctx.limits.document(r.evidence) for r in results],
            [r.settled for r in results],
        )

        async def call() -> list[procs.NodeOutcome]:
            async with ctx.pool.connection() as conn:
                return await report.aall(conn)

        rows = await reported_again(call, self.bounds.report_retries_s)
        reported = []
        for node, row in zip(nodes, rows, strict=True):
            if await self._accepted(node.work, row, "report"):
                reported.append(node)
                node_event(
                    logging.INFO,
                    "node_submitted",
                    WORKER,
                    node.work,
                    to_state=row.node_state,
                    external_ref=node.result.external_ref,
                )
        return reported

    async def _fail_submits(
        self, works: Sequence[NodeWork], step: str, refused: ExecutorError
    ) -> None:
        """fail_submit for each node of a refused step, each in its own call: one the
        database does not take stays SUBMITTING for recovery (a transient error, a
        stale claim), or is quarantined (it refused the node's own data), and does
        not hold back the others' reports."""
        ctx = self.ctx
        error = ctx.limits.text(str(refused))
        for work in works:
            fail = procs.fail_submit(
                work.node_id, work.claim_secret, error, refused.retryable, refused.retry_after
            )

            async def call(fail: procs.Call[procs.NodeState] = fail) -> procs.NodeState:
                async with ctx.pool.connection() as conn:
                    return await fail.aone(conn)

            try:
                state = await reported_again(call, self.bounds.report_retries_s)
            except Exception as exc:
                await self.failed([work], "fail_submit", exc)
                continue
            node_event(logging.WARNING, f"{step}_failed", WORKER, work, to_state=state, error=error)

    async def _accepted(
        self, work: NodeWork, row: procs.NodeOutcome | procs.RecordedIntent, step: str
    ) -> bool:
        """Whether the database accepted ``work`` in a batch call. A node refused
        because it is someone else's now (a stale claim, an expired lease, moved on)
        is logged and left to its owner; one refused for its own data (beyond the
        limits, or not applicable inside the engine: QT005, QT050) is quarantined."""
        assert row.node_id == work.node_id, "batch rows come back in input order"
        if row.error_code is None:
            return True
        await refused(
            self.ctx,
            logging.WARNING,
            "dispatch_refused",
            WORKER,
            work,
            step=step,
            code=row.error_code,
            message=row.error_message,
        )
        return False


async def _prepared(node: Node) -> PreparedNode:
    if isinstance(node.executor, EvmExecutor):
        # a requeued node signs again only once the chain shows its old transaction
        # can never land (requeue_node's hold rests on a runner's report)
        await node.executor.abandoned_settled(node.work)
    await node.executor.preflight(node.work)
    return PreparedNode(node.work, node.executor, await node.executor.prepare(node.work))
