-- depends: 0014_node_requeues
--
-- Poison isolation, and a dead claimer's nodes recovered in seconds.
--
-- movement_request_nodes gains
--   quarantined_at      when the node was set aside (NULL: it is not): an
--                       executor raised something it never should for it, the
--                       engine could not apply its outcome, or its claims kept
--                       dying with their claimer. No claim hands a quarantined
--                       node out (claim_ready_nodes, observe_candidates,
--                       claim_observe, claim_recovery_nodes): it keeps its
--                       state until an operator releases it
--                       (release_quarantine). The quarantined_nodes view lists
--                       them.
--   quarantine_reason   why, as the runner or recovery reported it
--   lost_claims         the node's claims in a row that ended without a report
--                       because their claimer died or its lease ran out:
--                       recovery counts them, a submit or an observation that
--                       is reported sets it back to 0, and recovery
--                       quarantines the node once it reaches
--                       engine_limits.quarantine_after_lost_claims
--   claimer_worker,     the heartbeat (worker_heartbeats' worker_name and
--   claimer_instance    instance_id) of the worker that holds the node's open
--                       dispatcher or recovery claim; NULL when no such claim
--                       is open or its claimer named no instance. Recovery
--                       takes that claim at once once the heartbeat says the
--                       worker is dead (it stopped, or missed two expected
--                       ticks), instead of waiting for the lease.
-- engine_limits gains quarantine_after_lost_claims (3: one kill is chance,
-- three in a row on the same node are not).
-- The partial indexes the claims read leave quarantined nodes out; new ones
-- serve recovery's look for a dead worker's open claims and the
-- quarantined_nodes view.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_request_nodes
    ADD COLUMN quarantined_at    timestamptz,
    ADD COLUMN quarantine_reason text,
    ADD COLUMN lost_claims       integer NOT NULL DEFAULT 0 CHECK (lost_claims >= 0),
    ADD COLUMN claimer_worker    text,
    ADD COLUMN claimer_instance  text,
    ADD CHECK ((quarantined_at IS NULL) = (quarantine_reason IS NULL)),
    ADD CHECK ((claimer_worker IS NULL) = (claimer_instance IS NULL));

ALTER TABLE engine_limits
    ADD COLUMN quarantine_after_lost_claims integer NOT NULL DEFAULT 3
        CHECK (quarantine_after_lost_claims BETWEEN 1 AND 100);

DROP INDEX movement_request_nodes_ready_idx;
CREATE INDEX movement_request_nodes_ready_idx ON movement_request_nodes (priority DESC, id)
    WHERE node_state = 'READY' AND quarantined_at IS NULL;
DROP INDEX movement_request_nodes_observable_idx;
CREATE INDEX movement_request_nodes_observable_idx ON movement_request_nodes (next_observe_at)
    WHERE node_state IN ('SUBMITTED', 'OBSERVING') AND quarantined_at IS NULL;
DROP INDEX movement_request_nodes_recoverable_idx;
CREATE INDEX movement_request_nodes_recoverable_idx ON movement_request_nodes (lease_until)
    WHERE node_state IN ('UNKNOWN', 'SUBMITTING') AND quarantined_at IS NULL;
-- recovery's look for the open claims of a dead worker
CREATE INDEX movement_request_nodes_claimer_idx ON movement_request_nodes (claimer_instance, claimer_worker)
    WHERE claimer_instance IS NOT NULL AND node_state IN ('UNKNOWN', 'SUBMITTING') AND quarantined_at IS NULL;
CREATE INDEX movement_request_nodes_quarantined_idx ON movement_request_nodes (quarantined_at)
    WHERE quarantined_at IS NOT NULL AND finished_at IS NULL;
$ddl$);

