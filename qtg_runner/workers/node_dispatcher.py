"""node_dispatcher (core): APPROVED movements start; READY -> SUBMITTING -> SUBMITTED.

One batch: one call (claim_ready_nodes) starts approved movements, as many as
the batch holds, and claims READY nodes and the new movements' roots together
(the claim commits the nodes as SUBMITTING with their intents before any side
effect, and names this worker's heartbeat, so recovery takes them at once if
this process dies), then, for the claimed nodes together:

  0. give back, in one call (release_nodes), the nodes whose executor this
     runner does not carry: READY again for a runner that does, without
     consuming a submit attempt;
  1. preflight and prepare each node (bounded concurrency);
  2. record every prepared intent in one call (record_intent_prepared_batch,
     one transaction): a node whose intent is not recorded is not submitted.
     An EVM transaction's nonce is allocated by that call; one refused because
     another dispatcher took the nonce first (QT031) is signed again at the
     account's next nonces (NonceSigner.resign) and recorded again;
  3. submit the recorded nodes a group at a time (bounded concurrency), each
     group right after asking whether its claims still hold (check_claims: a
     node recovery took over meanwhile is not sent again by this one): an
     executor that implements BatchSubmitter submits all its nodes in one call,
     any other submits each node as a group of one; a group call that fails
     is made again for each node alone, so that one node's failure is its own;
  4. report each group's submits right after them, in one call
     (complete_submit_batch).

The dispatcher runs this batch in two loops (LOOPS): while one waits on its
side effects and reports, the other claims what has become READY since, so a
node's claim does not wait for another batch to end, and the runner's work
overlaps the database's.

Every rule of the single-node procedures holds per node in the batch calls
(fencing, lease, audit, DAG step, settle); a node the database refuses is
reported in its own row and the rest of the batch goes on. One node's failure
never stops the others nor the worker; each kind is handled in one place
(``_failed``): the executor's refusal (ExecutorError, a transient error
before anything was signed, or a prepare or submit that outlives its deadline,
PREPARE_DEADLINE_S and SUBMIT_DEADLINE_S) is reported through fail_submit,
which decides (in SQL) between a retry, FAILED and recovery; any other
transient error once the intent is recorded leaves the node SUBMITTING for
recovery; a refusal because the node is someone else's now is dropped;
anything else (an executor raising what it never should, the engine refusing
the node's own data) quarantines the node (qtg_runner.faults). A batch call
the database fails as a whole is made again for each node alone, so that such
a failure lands on its node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

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
from qtg_runner.failpoints import failpoint
from qtg_runner.faults import (
    Failure,
    NoAnswer,
    classify,
    classify_code,
    describe,
    quarantine,
    within,
)
from qtg_runner.log import event, node_event
from qtg_runner.loop import WorkerContext

WORKER = "node_dispatcher"
BATCH_SIZE = 64
"""Nodes claimed per tick."""
BATCH_SIZE_BATCHED = 256
"""Nodes claimed per tick when every executor of the runner submits in batches
(BatchSubmitter): a tick then costs a handful of calls whatever its size."""
LOOPS = 2
"""The dispatcher's loops in a process (WorkerEntry.loops): while one is in a
batch, the other claims what has become READY since. Each batch runs its
steps ``max_concurrency`` at a time."""
NONCE_ATTEMPTS = 5
"""Times an EVM intent is recorded, signed again at the account's next nonce
after each refusal because another dispatcher took its nonce (QT031)."""
NONCE_TAKEN = "QT031"
PREPARE_DEADLINE_S = 30.0
"""The longest a node's preflight and prepare (or a signing again, resign)
may take together. A batch's intents are recorded once every prepare has
answered, so one that never does would hold the batch's claims and its loop
for good; past this it is the executor's retryable refusal: fail_submit sends
the node READY again after its backoff (nothing it signed was recorded, so
nothing of it can go out)."""
SUBMIT_DEADLINE_S = 30.0
"""The longest one submit (or a group's submit_many) may take. Past it the
side effect may be out or not: the node's submit is failed as retryable, and
fail_submit makes a node whose intent is PREPARED UNKNOWN, so recovery reads
what happened from its intent at once, not after the claim's lease."""


T = TypeVar("T")
U = TypeVar("U")


REPORT_RETRIES_S = (0.2, 1.0, 3.0)
"""The waits between the attempts of a report that failed transiently (four
attempts over about 4 s; see reported_again)."""


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


@dataclass(frozen=True)
class _Node:
    work: NodeWork
    executor: Executor


@dataclass(frozen=True)
class _Prepared(_Node):
    prepared: Prepared


@dataclass(frozen=True)
class _Submitted(_Prepared):
    result: SubmitResult


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    size = _claim_size(ctx)
    claim = procs.claim_ready_nodes(WORKER, size, instance_id=ctx.instance_id, start=size)
    async with ctx.pool.connection() as conn:
        claims = await asynchronous_commit(claim).aall(conn)
    if claims:
        await dispatch_claims(ctx, [NodeWork.from_claim(claim, ctx.network) for claim in claims])
    return len(claims)


def _claim_size(ctx: WorkerContext) -> int:
    executors = ctx.executors.values()
    if executors and all(isinstance(e, BatchSubmitter) for e in executors):
        return BATCH_SIZE_BATCHED
    return BATCH_SIZE


async def dispatch_claims(ctx: WorkerContext, works: Sequence[NodeWork]) -> None:
    nodes: list[_Node] = []
    missing: list[NodeWork] = []
    for work in works:
        executor = ctx.executor_for(work)
        if executor is None:
            missing.append(work)
        else:
            nodes.append(_Node(work, executor))

    # 0. what this runner cannot run goes back, untouched, for one that can
    if missing:
        await _each_alone(ctx, missing, "release", lambda ws: _release(ctx, ws), key=_same)

    # 1. preflight and prepare: nothing is signed for a node the executor refuses
    async def prepare(node: _Node) -> _Prepared | None:
        return await _guarded(
            ctx,
            [node.work],
            "prepare",
            lambda: within(PREPARE_DEADLINE_S, "prepare()", _prepare(node)),
        )

    prepared = [n for n in await _bounded(ctx, nodes, prepare) if n is not None]
    if not prepared:
        return

    # 2. the intents, in one transaction: only a recorded node may be submitted
    recorded = await _each_alone(
        ctx, prepared, "record_intents", lambda ns: _record_intents(ctx, ns), key=_work
    )
    if not recorded:
        return
    # the intents are committed: only now may the side effects happen
    failpoint("after_intent")

    # 3. the side effects, a group at a time, and 4. each group's report after it
    async def submit_and_report(group: Sequence[_Prepared]) -> None:
        held = await _holding(ctx, group)
        if not held:
            return
        submitted = await _submit(ctx, held)
        if not submitted:
            return
        failpoint("after_submit")
        await _each_alone(
            ctx, submitted, "report", lambda ns: _complete_submits(ctx, ns), key=_work
        )

    await _bounded(ctx, _groups(recorded), submit_and_report)


def _work(node: _Node) -> NodeWork:
    return node.work


def _same(work: NodeWork) -> NodeWork:
    return work


async def _failed(
    ctx: WorkerContext, works: Sequence[NodeWork], step: str, exc: BaseException
) -> None:
    """The one place a failed step of ``works`` is settled, by its kind (see the
    module's docstring and qtg_runner.faults). Never raises."""
    if isinstance(exc, NoAnswer):
        # the executor said nothing in time, the database is there to hear it
        exc = ExecutorError(str(exc), retryable=True)
    if isinstance(exc, ExecutorError):
        await _fail_submits(ctx, works, step, exc)
        return
    kind = classify(exc)
    if kind is Failure.TRANSIENT and step == "prepare":
        # the executor's service is out of reach before anything was signed: a
        # retry later, as fail_submit decides, not a claim left to its lease
        await _fail_submits(ctx, works, step, ExecutorError(describe(exc), retryable=True))
        return
    for work in works:
        node_event(
            logging.ERROR if kind is Failure.TRANSIENT else logging.WARNING,
            "dispatch_failed" if kind is Failure.TRANSIENT else "dispatch_refused",
            WORKER,
            work,
            step=step,
            kind=kind.value,
            error=ctx.limits.text(describe(exc)),
        )
    if kind is Failure.POISON:
        await quarantine(ctx, WORKER, works, step, describe(exc))


async def _guarded(
    ctx: WorkerContext, works: Sequence[NodeWork], step: str, action: Callable[[], Awaitable[T]]
) -> T | None:
    """One step of the dispatch for ``works``: its result, or None when it failed
    (and the failure was settled by ``_failed``)."""
    try:
        return await action()
    except Exception as exc:
        await _failed(ctx, works, step, exc)
    return None


N = TypeVar("N")


async def _each_alone(
    ctx: WorkerContext,
    items: Sequence[N],
    step: str,
    call: Callable[[Sequence[N]], Awaitable[list[N]]],
    key: Callable[[N], NodeWork],
) -> list[N]:
    """``call`` (a batch procedure call) for ``items``: the items it accepted. If
    the call fails as a whole with anything but a transient error, it is made
    again for each item alone, so that the failure lands on its own node and the
    others go on."""
    try:
        return await call(items)
    except Exception as exc:
        if len(items) == 1 or classify(exc) is not Failure.POISON:
            await _failed(ctx, [key(i) for i in items], step, exc)
            return []
        event(
            logging.WARNING,
            "batch_call_failed",
            network=ctx.network,
            worker=WORKER,
            step=step,
            nodes=len(items),
            error=ctx.limits.text(describe(exc)),
        )
    accepted: list[N] = []
    for item in items:
        try:
            accepted.extend(await call([item]))
        except Exception as exc:
            await _failed(ctx, [key(item)], step, exc)
    return accepted


async def _bounded(
    ctx: WorkerContext, items: Sequence[T], step: Callable[[T], Awaitable[U]]
) -> list[U]:
    """``step`` for every item, ``ctx.max_concurrency`` at a time, results in order.
    A bug in one cancels the others and reaches the supervisor."""
    limit = asyncio.Semaphore(ctx.max_concurrency)

    async def one(item: T) -> U:
        async with limit:
            return await step(item)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(item)) for item in items]
    return [task.result() for task in tasks]


async def _release(ctx: WorkerContext, works: Sequence[NodeWork]) -> list[NodeWork]:
    async with ctx.pool.connection() as conn:
        rows = await procs.release_nodes(
            [w.node_id for w in works],
            [w.claim_secret for w in works],
            "no executor for the node in this runner",
        ).aall(conn)
    released = []
    for work, row in zip(works, rows, strict=True):
        if await _accepted(ctx, work, row, "release"):
            released.append(work)
            node_event(logging.WARNING, "executor_missing", WORKER, work, to_state=row.node_state)
    return released


async def _prepare(node: _Node) -> _Prepared:
    await node.executor.preflight(node.work)
    return _Prepared(node.work, node.executor, await node.executor.prepare(node.work))


async def _record_intents(ctx: WorkerContext, nodes: Sequence[_Prepared]) -> list[_Prepared]:
    """record_intent_prepared_batch; returns the nodes whose intent was recorded.
    Nodes refused because their nonce was taken are signed again at the
    account's next nonces and recorded again, up to NONCE_ATTEMPTS times; then
    they are given back for a later try (nothing was broadcast)."""
    recorded: list[_Prepared] = []
    pending = list(nodes)
    for attempt in range(1, NONCE_ATTEMPTS + 1):
        preps = [n.prepared for n in pending]
        async with ctx.pool.connection() as conn:
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
        taken: list[_Prepared] = []
        for node, row in zip(pending, rows, strict=True):
            if row.error_code == NONCE_TAKEN and isinstance(node.executor, NonceSigner):
                taken.append(node)
            elif await _accepted(ctx, node.work, row, "record"):
                recorded.append(node)
        if not taken:
            break
        if attempt == NONCE_ATTEMPTS:
            refused = ExecutorError(
                f"the account's nonce was taken {NONCE_ATTEMPTS} times in a row", retryable=True
            )
            await _fail_submits(ctx, [n.work for n in taken], "record", refused)
            break
        pending = await _resign(ctx, taken)
        if not pending:
            break
    return recorded


async def _resign(ctx: WorkerContext, nodes: Sequence[_Prepared]) -> list[_Prepared]:
    """``nodes`` signed again, each account's at consecutive nonces from its
    next one (as the engine has it now; from the lowest the executor chose
    when the engine has none yet)."""
    accounts: dict[tuple[str, str], list[_Prepared]] = {}
    for node in nodes:
        p = node.prepared
        assert p.chain_key is not None and p.sender is not None and p.nonce is not None
        accounts.setdefault((p.chain_key, p.sender), []).append(node)
    assigned: list[tuple[_Prepared, int]] = []
    async with ctx.pool.connection() as conn:
        for (chain_key, sender), group in accounts.items():
            nxt = await procs.evm_next_nonce(chain_key, sender).aone(conn)
            first = nxt if nxt is not None else min(n.prepared.nonce or 0 for n in group)
            assigned.extend((node, first + i) for i, node in enumerate(group))

    async def resign(item: tuple[_Prepared, int]) -> _Prepared | None:
        node, nonce = item
        executor = node.executor
        assert isinstance(executor, NonceSigner)
        prepared = await _guarded(
            ctx,
            [node.work],
            "prepare",
            lambda: within(
                PREPARE_DEADLINE_S, "resign()", executor.resign(node.work, node.prepared, nonce)
            ),
        )
        return None if prepared is None else _Prepared(node.work, node.executor, prepared)

    return [n for n in await _bounded(ctx, assigned, resign) if n is not None]


def _groups(nodes: Sequence[_Prepared]) -> list[list[_Prepared]]:
    """The submit groups: all the nodes of an executor that implements
    BatchSubmitter (one call), and each node of any other executor alone."""
    batched: dict[str, list[_Prepared]] = {}
    alone: list[list[_Prepared]] = []
    for node in nodes:
        if isinstance(node.executor, BatchSubmitter):
            batched.setdefault(node.work.executor_key, []).append(node)
        else:
            alone.append([node])
    return [*batched.values(), *alone]


async def _holding(ctx: WorkerContext, group: Sequence[_Prepared]) -> list[_Prepared]:
    """The nodes of ``group`` whose claims still hold, asked just before their
    external calls (check_claims): a dispatcher that froze after recording its
    intents may have been replaced by recovery, which resubmits the payload
    itself. A node whose claim is gone is left to its new owner (no report: it
    is not this dispatcher's any more). If the question cannot be asked, none
    is submitted: each stays SUBMITTING with its intent recorded, and recovery
    sends the same payload once the lease runs out."""
    try:
        async with ctx.pool.connection() as conn:
            rows = await procs.check_claims(
                [n.work.node_id for n in group], [n.work.claim_secret for n in group]
            ).aall(conn)
    except Exception as exc:
        if classify(exc) is Failure.POISON:
            raise
        for node in group:
            node_event(logging.WARNING, "claim_unchecked", WORKER, node.work, error=describe(exc))
        return []
    held: list[_Prepared] = []
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
                error=ctx.limits.text(row.error_message or ""),
            )
    return held


async def _submit(ctx: WorkerContext, group: Sequence[_Prepared]) -> list[_Submitted]:
    """The side effects of one group: the nodes submitted, with their results.

    A BatchSubmitter's group goes in one call (submit_many). If that call fails
    for more than one node (with anything but a transient error, after which a
    side effect may be out and recovery reconciles each node from its intent),
    each node is submitted alone (submit): the prepared payloads are the same,
    the executor said none went out, and a node that fails alone fails on its
    own. Any other executor's group is one node."""
    executor = group[0].executor
    if isinstance(executor, BatchSubmitter):
        try:
            results = await within(
                SUBMIT_DEADLINE_S,
                "submit_many()",
                executor.submit_many([(n.work, n.prepared) for n in group]),
            )
            if len(results) != len(group):
                raise RuntimeError(
                    f"submit_many answered {len(results)} results for {len(group)} nodes"
                )
            return [
                _Submitted(n.work, n.executor, n.prepared, r)
                for n, r in zip(group, results, strict=True)
            ]
        except Exception as exc:
            transient = classify(exc) is Failure.TRANSIENT and not isinstance(exc, ExecutorError)
            if transient or len(group) == 1:
                await _failed(ctx, [n.work for n in group], "submit", exc)
                return []
            event(
                logging.WARNING,
                "submit_many_failed",
                network=ctx.network,
                worker=WORKER,
                executor=executor.key,
                nodes=len(group),
                error=ctx.limits.text(describe(exc)),
            )

    async def one(node: _Prepared) -> _Submitted | None:
        result = await _guarded(
            ctx,
            [node.work],
            "submit",
            lambda: within(
                SUBMIT_DEADLINE_S, "submit()", node.executor.submit(node.work, node.prepared)
            ),
        )
        if result is None:
            return None
        return _Submitted(node.work, node.executor, node.prepared, result)

    return [s for s in await _bounded(ctx, group, one) if s is not None]


async def reported_again(call: Callable[[], Awaitable[T]]) -> T:
    """A report (complete_submit_batch, fail_submit) made again after a transient
    failure, REPORT_RETRIES_S apart, rather than left to the claim's lease
    (300 s, then recovery): a connection dropped or a failover under the
    report loses a few seconds, not minutes. A report that did commit before
    its answer was lost is refused when made again (the node is no longer the
    claim's: QT021/QT030), which the callers read as any refusal. Raises what
    the last attempt raised."""
    for wait in REPORT_RETRIES_S:
        try:
            return await call()
        except Exception as exc:
            if classify(exc) is not Failure.TRANSIENT:
                raise
            await asyncio.sleep(wait)
    return await call()


async def _complete_submits(ctx: WorkerContext, nodes: Sequence[_Submitted]) -> list[_Submitted]:
    """complete_submit_batch; returns the nodes whose report was accepted."""
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

    rows = await reported_again(call)
    reported = []
    for node, row in zip(nodes, rows, strict=True):
        if await _accepted(ctx, node.work, row, "report"):
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
    ctx: WorkerContext, works: Sequence[NodeWork], step: str, refused: ExecutorError
) -> None:
    """fail_submit for each node of a refused step, each in its own call: one the
    database does not take stays SUBMITTING for recovery (a transient error, a
    stale claim), or is quarantined (it refused the node's own data), and does
    not hold back the others' reports."""
    error = ctx.limits.text(str(refused))
    for work in works:
        fail = procs.fail_submit(
            work.node_id, work.claim_secret, error, refused.retryable, refused.retry_after
        )

        async def call(fail: procs.Call[procs.NodeState] = fail) -> procs.NodeState:
            async with ctx.pool.connection() as conn:
                return await fail.aone(conn)

        try:
            state = await reported_again(call)
        except Exception as exc:
            await _failed(ctx, [work], "fail_submit", exc)
            continue
        node_event(logging.WARNING, f"{step}_failed", WORKER, work, to_state=state, error=error)


class _NodeRow(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def error_message(self) -> str | None: ...


async def _accepted(ctx: WorkerContext, work: NodeWork, row: _NodeRow, step: str) -> bool:
    """Whether the database accepted ``work`` in a batch call. A node refused
    because it is someone else's now (a stale claim, an expired lease, moved on)
    is logged and left to its owner; one refused for its own data (beyond the
    limits, or not applicable inside the engine: QT005, QT050) is quarantined."""
    assert row.node_id == work.node_id, "batch rows come back in input order"
    if row.error_code is None:
        return True
    node_event(
        logging.WARNING,
        "dispatch_refused",
        WORKER,
        work,
        step=step,
        code=row.error_code,
        error=row.error_message,
    )
    if classify_code(row.error_code) is Failure.POISON:
        await quarantine(ctx, WORKER, [work], step, f"{row.error_code}: {row.error_message}")
    return False
