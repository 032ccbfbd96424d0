-- balance_candidates: the nodes that may have an effect on a treasury account
-- not decided (certain or void) before p_since: every side-effect node not
-- finished before it (movement_request_nodes_balance_idx), and every transfer
-- into a venue's deposit address whose credit was not certain by then (the
-- partial index movement_request_nodes_transfer_to_idx; its bybit_deposit
-- step, or its capital transfer followup, says when the venue credited it).
-- A superset: node_balance_effects says what each node does, and when.
-- Internal; reads only (balance_expectations, advance_balance_anchors).
CREATE OR REPLACE FUNCTION balance_candidates(p_since timestamptz) RETURNS SETOF bigint
LANGUAGE sql STABLE
AS $$
    SELECT n.id
      FROM movement_request_nodes n
     WHERE n.has_side_effect AND (n.finished_at IS NULL OR n.finished_at >= p_since)
    UNION
    SELECT t.id
      FROM venue_deposit_addresses d
     CROSS JOIN LATERAL (
        -- by each address (OFFSET 0 keeps it a probe of the index per address: a
        -- few addresses, never analyzed, were planned as many, and the join read
        -- every completed transfer instead)
        SELECT n.id
          FROM movement_request_nodes n
         WHERE n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED'
           AND n.node_config ->> 'chain' = d.chain_key AND lower(n.node_config ->> 'to') = d.address
           AND NOT EXISTS (SELECT 1 FROM capital_transfer_followups f
                            WHERE f.node_id = n.id AND f.followup_state IN ('CREDITED', 'MISMATCH')
                              AND f.resolved_at < p_since)
           AND NOT EXISTS (SELECT 1 FROM movement_plan_edges e
                             JOIN movement_request_nodes k ON k.id = e.child_node_id
                            WHERE e.parent_node_id = n.id AND k.executor_key = 'bybit_deposit'
                              AND k.node_state = 'COMPLETED' AND k.finished_at < p_since)
        OFFSET 0) t;
$$;
