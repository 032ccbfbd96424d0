-- balance_candidates: the nodes that may have an effect on a treasury account
-- not decided (certain or void) before p_since: every side-effect node not
-- finished before it (movement_request_nodes_balance_idx), and every transfer
-- completed into a venue's deposit address whose credit was not certain by
-- then. That credit is read from what says when the venue made it, each by
-- its index (0043_deposit_credit_candidates), not from the transfers: the
-- capital transfer followup not CREDITED or MISMATCH before p_since, the
-- bybit_deposit step not COMPLETED before p_since, and, for a transfer
-- completed without a hash and without a step, nothing (no followup can
-- follow it, so its credit is never certain). A superset: node_balance_effects
-- says what each node does, and when.
-- Internal; reads only (balance_expectations, advance_balance_anchors).
CREATE OR REPLACE FUNCTION balance_candidates(p_since timestamptz) RETURNS SETOF bigint
LANGUAGE sql STABLE
AS $$
    SELECT n.id
      FROM movement_request_nodes n
     WHERE n.has_side_effect AND (n.finished_at IS NULL OR n.finished_at >= p_since)
    UNION
    SELECT t.id
      FROM (SELECT f.node_id AS id
              FROM capital_transfer_followups f
             WHERE f.followup_state IN ('WAITING', 'FAILED')
                OR (f.followup_state IN ('CREDITED', 'MISMATCH') AND f.resolved_at >= p_since)
            UNION
            SELECT e.parent_node_id
              FROM movement_plan_edges e
             WHERE e.child_node_id IN (
                    -- the bybit_deposit steps not COMPLETED before p_since, a range of
                    -- an index each (as one OR, every step was read and filtered)
                    SELECT k.id FROM movement_request_nodes k
                     WHERE k.executor_key = 'bybit_deposit' AND k.finished_at IS NULL
                    UNION ALL
                    SELECT k.id FROM movement_request_nodes k
                     WHERE k.executor_key = 'bybit_deposit' AND k.finished_at >= p_since
                    UNION ALL
                    SELECT k.id FROM movement_request_nodes k
                     WHERE k.executor_key = 'bybit_deposit' AND k.node_state IN ('FAILED', 'SKIPPED'))
            UNION
            SELECT n.id
              FROM movement_request_nodes n
             WHERE n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED' AND n.external_ref IS NULL
               AND NOT EXISTS (SELECT 1 FROM movement_plan_edges e
                                 JOIN movement_request_nodes k ON k.id = e.child_node_id
                                WHERE e.parent_node_id = n.id AND k.executor_key = 'bybit_deposit')) c
     CROSS JOIN LATERAL (
        -- each a completed transfer into a deposit address, probed by its key
        -- (OFFSET 0: joined, the few deposit addresses were planned as many, and
        -- every transfer into them read instead)
        SELECT n.id
          FROM movement_request_nodes n
         WHERE n.id = c.id AND n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED'
           AND EXISTS (SELECT 1 FROM venue_deposit_addresses d
                        WHERE d.chain_key = n.node_config ->> 'chain' AND d.address = lower(n.node_config ->> 'to'))
        OFFSET 0) t;
$$;
