"""The worker registry: one entry per worker (name, batch function, interval,
jitter, tier), as the seed describes. Adding a worker is a batch function in
its own module plus one line here."""

from __future__ import annotations

from qtg_runner.loop import WorkerEntry
from qtg_runner.workers import (
    audit_outbox_promoter,
    balance_snapshot,
    callback_dispatcher,
    capital_transfer_followup,
    ccip_stranded_reaper,
    evm_nonce_reaper,
    executor_health,
    expiration_checker,
    lane_pacing_refresh,
    node_dispatcher,
    node_observer,
    node_recovery,
    pipeline_rollup,
    session_watchdog,
    template_proposal_expiration,
    verify_drift_worker,
)

REGISTRY: tuple[WorkerEntry, ...] = (
    # drains=False: a periodic check that takes nothing off a queue runs at its
    # interval whatever its batch returns (an idle runner stays idle)
    # two loops: a node that becomes READY while one is in a batch (its side
    # effects, its reports) is claimed by the other at once
    WorkerEntry(
        "node_dispatcher",
        node_dispatcher.batch,
        interval=1.0,
        jitter=0.2,
        tier="core",
        wake_on=frozenset({"ready", "approved"}),
        loops=node_dispatcher.LOOPS,
    ),
    WorkerEntry("node_observer", node_observer.batch, interval=1.0, jitter=0.2, tier="core"),
    # every second: a dead claimer's nodes are recoverable as soon as its
    # heartbeat is two ticks late, and the claim reads a partial index only
    WorkerEntry("node_recovery", node_recovery.batch, interval=1.0, jitter=0.2, tier="core"),
    WorkerEntry(
        "expiration_checker", expiration_checker.batch, interval=10.0, jitter=2.0, tier="sidecar"
    ),
    WorkerEntry(
        "template_proposal_expiration",
        template_proposal_expiration.batch,
        interval=30.0,
        jitter=5.0,
        tier="sidecar",
    ),
    # each lane's poll schedule learned from its finished nodes
    WorkerEntry(
        "lane_pacing_refresh",
        lane_pacing_refresh.batch,
        interval=60.0,
        jitter=10.0,
        tier="sidecar",
        drains=False,
    ),
    # pipeline_counts' finished rows counted once, so reading it costs what is open
    WorkerEntry(
        "pipeline_rollup",
        pipeline_rollup.batch,
        interval=60.0,
        jitter=10.0,
        tier="sidecar",
        drains=False,
    ),
    # fills of nonces that will never broadcast, fee bumps of transactions
    # waiting more than 20 block times (at least a minute)
    WorkerEntry(
        "evm_nonce_reaper",
        evm_nonce_reaper.batch,
        interval=15.0,
        jitter=3.0,
        tier="sidecar",
        drains=False,
    ),
    # transfers into an exchange's deposit address, followed until credited
    WorkerEntry(
        "capital_transfer_followup",
        capital_transfer_followup.batch,
        interval=15.0,
        jitter=3.0,
        tier="sidecar",
    ),
    # every executor's health(); a DOWN one's nodes stay READY until it is up
    WorkerEntry(
        "executor_health",
        executor_health.batch,
        interval=30.0,
        jitter=5.0,
        tier="sidecar",
        drains=False,
    ),
    # the audit log's hash chain: a few seconds behind the outbox
    WorkerEntry(
        "audit_outbox_promoter",
        audit_outbox_promoter.batch,
        interval=2.0,
        jitter=0.5,
        tier="sidecar",
    ),
    # signed callbacks to the registered targets, a second after the state change
    WorkerEntry(
        "callback_dispatcher", callback_dispatcher.batch, interval=1.0, jitter=0.2, tier="sidecar"
    ),
    # manual executions of CCIP messages whose destination execution FAILED
    WorkerEntry(
        "ccip_stranded_reaper",
        ccip_stranded_reaper.batch,
        interval=15.0,
        jitter=3.0,
        tier="sidecar",
        drains=False,
    ),
    # the treasury's balances read from the chains and the venues, every minute
    WorkerEntry(
        "balance_snapshot",
        balance_snapshot.batch,
        interval=60.0,
        jitter=5.0,
        tier="sidecar",
        drains=False,
    ),
    # sessions of the network's logins holding a transaction past the bounds
    WorkerEntry(
        "session_watchdog",
        session_watchdog.batch,
        interval=10.0,
        jitter=2.0,
        tier="sidecar",
        drains=False,
    ),
    # the snapshots against the engine's records: drift alerts and breakers
    WorkerEntry(
        "verify_drift_worker",
        verify_drift_worker.batch,
        interval=10.0,
        jitter=2.0,
        tier="sidecar",
        drains=False,
    ),
)

BY_NAME: dict[str, WorkerEntry] = {entry.name: entry for entry in REGISTRY}
