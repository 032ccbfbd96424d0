"""node_dispatcher (core): APPROVED movements start; READY -> SUBMITTING -> SUBMITTED.

One batch is the seed's loop: claim, call, report.

  claim    one call (claim_ready_nodes) starts approved movements, as many as
           the batch holds, and claims READY nodes and the new movements'
           roots together: the claim commits the nodes as SUBMITTING with their
           intents before any side effect, and names this worker's heartbeat,
           so recovery takes them at once if this process dies;
  0.       the nodes whose executor this runner does not carry go back in one
           call (release_nodes), READY for a runner that does;
  1.       each node is preflighted and prepared (bounded concurrency, within
           PREPARE_DEADLINE_S);
  2.       every prepared intent is recorded in one call (one transaction): a
           node whose intent is not recorded is not submitted. An EVM nonce
           another dispatcher took first is signed again and recorded again;
  call     3. the recorded nodes are submitted a group at a time (a
           BatchSubmitter's nodes in one call, any other node alone; bounded
           concurrency, within SUBMIT_DEADLINE_S), each group right after
           asking whether its claims still hold (check_claims);
  report   4. each group's submits are reported right after them, in one call
           (complete_submit_batch), made again after a transient failure.

Every rule of the single-node procedures holds per node in the batch calls
(fencing, lease, audit, DAG step, settle); one node's failure never stops the
others nor the worker. How each kind of failure is settled, how a batch call
that fails as a whole is made again node by node, the submit groups and the
re-signing are the mechanics of qtg_runner.workers.dispatch.

The dispatcher runs this batch in two loops (LOOPS): while one waits on its
side effects and reports, the other claims what has become READY since, so a
node's claim does not wait for another batch to end, and the runner's work
overlaps the database's.
"""

from __future__ import annotations

from collections.abc import Sequence

from qtg_runner.db import procs
from qtg_runner.executors.base import NodeWork
from qtg_runner.failpoints import failpoint
from qtg_runner.loop import WorkerContext
from qtg_runner.workers.dispatch import (
    WORKER,
    Bounds,
    Dispatch,
    PreparedNode,
    all_batched,
    asynchronous_commit,
    groups,
)

BATCH_SIZE = 64
"""Nodes claimed per tick."""
BATCH_SIZE_BATCHED = 256
"""Nodes claimed per tick when every executor of the runner submits in batches
(BatchSubmitter): a tick then costs a handful of calls whatever its size."""
LOOPS = 2
"""The dispatcher's loops in a process (WorkerEntry.loops): while one is in a
batch, the other claims what has become READY since. Each batch runs its
steps ``max_concurrency`` at a time."""
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
REPORT_RETRIES_S = (0.2, 1.0, 3.0)
"""The waits between the attempts of a report that failed transiently (four
attempts over about 4 s; see dispatch.reported_again)."""


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    size = BATCH_SIZE_BATCHED if all_batched(ctx) else BATCH_SIZE
    claim = procs.claim_ready_nodes(WORKER, size, instance_id=ctx.instance_id, start=size)
    async with ctx.pool.connection() as conn:
        claims = await asynchronous_commit(claim).aall(conn)
    if claims:
        await dispatch_claims(ctx, [NodeWork.from_claim(claim, ctx.network) for claim in claims])
    return len(claims)


async def dispatch_claims(ctx: WorkerContext, works: Sequence[NodeWork]) -> None:
    bounds = Bounds(PREPARE_DEADLINE_S, SUBMIT_DEADLINE_S, REPORT_RETRIES_S)
    step = Dispatch(ctx, bounds)
    nodes = await step.runnable(works)  # 0. what this runner cannot run goes back
    prepared = await step.prepare(nodes)  # 1. nothing is signed for a node refused
    recorded = await step.record_intents(prepared)  # 2. only a recorded node is sent
    if not recorded:
        return
    # the intents are committed: only now may the side effects happen
    failpoint("after_intent")

    async def submit_and_report(group: Sequence[PreparedNode]) -> None:
        submitted = await step.submit(await step.holding(group))  # 3. the side effects
        if submitted:
            failpoint("after_submit")
            await step.report(submitted)  # 4. the group's report, right after it

    await step.bounded(groups(recorded), submit_and_report)
