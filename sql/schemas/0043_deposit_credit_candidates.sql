-- depends: 0042_balance_anchors
--
-- balance_candidates (verify_drift every 10 s, and the anchors) found the
-- transfers into a venue's deposit address whose credit was not yet certain
-- by reading every transfer ever completed into a deposit address, with two
-- probes each: a read that grew with the history. The credit of such a
-- transfer is said by one of two records, and what is not yet certain is now
-- read from them by index:
--   its capital transfer followup (a transfer with no bybit_deposit step):
--       WAITING or FAILED, or resolved since: by state and resolved_at;
--   its bybit_deposit step: not finished, finished since, or FAILED or
--       SKIPPED (never credited by the step): the steps by finished_at, and
--       the void steps;
-- and a transfer completed without a transaction hash, which no followup
-- can follow: the completed transfers without an external reference (a
-- recovery's outcome without one; rare).
-- Each index holds only its rows: the followups, the bybit_deposit steps, the
-- transfers without a hash.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE INDEX capital_transfer_followups_state_idx ON capital_transfer_followups (followup_state, resolved_at);

CREATE INDEX movement_request_nodes_deposit_steps_idx ON movement_request_nodes (finished_at)
    WHERE executor_key = 'bybit_deposit';

CREATE INDEX movement_request_nodes_void_deposit_steps_idx ON movement_request_nodes (id)
    WHERE executor_key = 'bybit_deposit' AND node_state IN ('FAILED', 'SKIPPED');

CREATE INDEX movement_request_nodes_unreferenced_transfers_idx ON movement_request_nodes (id)
    WHERE executor_key = 'evm_transfer' AND node_state = 'COMPLETED' AND external_ref IS NULL;
$ddl$);
