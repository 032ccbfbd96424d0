"""The worker registry: one entry per worker (name, batch function, interval,
jitter, tier), as the seed describes. Adding a worker is a batch function in
its own module plus one line here."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from qtg_runner.loop import Tier, WorkerEntry
from qtg_runner.workers import (
    audit_outbox_promoter,
    balance_snapshot,
    callback_dispatcher,
    capital_transfer_followup,
    ccip_stranded_reaper,
    endpoint_budget_lease,
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


def _entry(
    module: ModuleType, interval: float, jitter: float, tier: Tier, **options: Any
) -> WorkerEntry:
    """A worker's entry, named as its module (its batch function's)."""
    name = module.__name__.rsplit(".", 1)[-1]
    return WorkerEntry(name, module.batch, interval, jitter, tier, **options)


REGISTRY: tuple[WorkerEntry, ...] = (
    # drains=False: a periodic check that takes nothing off a queue runs at its
    # interval whatever its batch returns (an idle runner stays idle)
    # two loops: a node that becomes READY while one is in a batch (its side
    # effects, its reports) is claimed by the other at once
    _entry(
        node_dispatcher,
        1.0,
        0.2,
        "core",
        wake_on=frozenset({"ready", "approved"}),
        loops=node_dispatcher.LOOPS,
    ),
    _entry(node_observer, 1.0, 0.2, "core"),
    # every second: a dead claimer's nodes are recoverable as soon as its
    # heartbeat is two ticks late, and the claim reads a partial index only
    _entry(node_recovery, 1.0, 0.2, "core"),
    _entry(expiration_checker, 10.0, 2.0, "sidecar"),
    _entry(template_proposal_expiration, 30.0, 5.0, "sidecar"),
    # each lane's poll schedule learned from its finished nodes
    _entry(lane_pacing_refresh, 60.0, 10.0, "sidecar", drains=False),
    # pipeline_counts' finished rows counted once, so reading it costs what is open
    _entry(pipeline_rollup, 60.0, 10.0, "sidecar", drains=False),
    # fills of nonces that will never broadcast, fee bumps of transactions
    # waiting more than 20 block times (at least a minute)
    _entry(evm_nonce_reaper, 15.0, 3.0, "sidecar", drains=False),
    # transfers into an exchange's deposit address, followed until credited
    _entry(capital_transfer_followup, 15.0, 3.0, "sidecar"),
    # every executor's health(); a DOWN one's nodes stay READY until it is up
    _entry(executor_health, 30.0, 5.0, "sidecar", drains=False),
    # the audit log's hash chain: a few seconds behind the outbox
    _entry(audit_outbox_promoter, 2.0, 0.5, "sidecar"),
    # signed callbacks to the registered targets, a second after the state change
    _entry(callback_dispatcher, 1.0, 0.2, "sidecar"),
    # manual executions of CCIP messages whose destination execution FAILED
    _entry(ccip_stranded_reaper, 15.0, 3.0, "sidecar", drains=False),
    # the treasury's balances read from the chains and the venues, every minute
    _entry(balance_snapshot, 60.0, 5.0, "sidecar", drains=False),
    # sessions of the network's logins holding a transaction past the bounds
    _entry(session_watchdog, 10.0, 2.0, "sidecar", drains=False),
    # the snapshots against the engine's records: drift alerts and breakers
    _entry(verify_drift_worker, 10.0, 2.0, "sidecar", drains=False),
    # each endpoint's request budget shared with the other processes calling it
    _entry(endpoint_budget_lease, 5.0, 1.0, "sidecar", drains=False),
)

BY_NAME: dict[str, WorkerEntry] = {entry.name: entry for entry in REGISTRY}
