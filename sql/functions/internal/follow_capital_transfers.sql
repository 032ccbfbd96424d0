-- follow_capital_transfers: a capital transfer's followup, made as the transfer
-- lands. For each of p_node_ids that is an evm_transfer node COMPLETED into a
-- venue's deposit address (the node's chain and recipient are a row of
-- venue_deposit_addresses for its token), with a transaction hash, and whose
-- movement has no bybit_deposit step depending on it (that step follows its
-- own transfer): a WAITING capital_transfer_followups row with the hash, the
-- movement's amount, the landing time (the node's finished_at), a deadline
-- three bybit-deposit lane baselines after it, due at once. Any other node,
-- and a node followed already, is left as it is. Internal: finish_nodes calls
-- it for the transfers it is given COMPLETED, in the transaction that
-- completes them, so the capital_transfer_followup sidecar never searches the
-- history for them; upsert_venue_deposit_address for the transfers that
-- landed in an address before it was registered.
-- Locks: the new followup rows.
CREATE OR REPLACE FUNCTION follow_capital_transfers(p_node_ids bigint[]) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO capital_transfer_followups AS f
           (node_id, request_id, venue_key, chain_key, coin, deposit_address, tx_hash, expected_amount,
            followup_state, landed_at, deadline_at, next_check_at)
    SELECT n.id, n.request_id, d.venue_key, d.chain_key, d.coin, d.address, n.external_ref, r.amount,
           'WAITING', n.finished_at,
           n.finished_at + make_interval(secs => (3 * (lane_of('bybit-deposit')).baseline_seconds)::double precision),
           clock()
      FROM movement_request_nodes n
      JOIN venue_deposit_addresses d
        ON d.chain_key = (n.node_config ->> 'chain') AND d.address = lower(n.node_config ->> 'to')
       AND d.coin = coalesce(n.node_config ->> 'token', 'USDC')
      JOIN movement_requests r ON r.id = n.request_id
     WHERE n.id = ANY (p_node_ids)
       AND n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED' AND n.external_ref IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM movement_plan_edges e
                         JOIN movement_request_nodes c ON c.id = e.child_node_id
                        WHERE e.parent_node_id = n.id AND c.executor_key = 'bybit_deposit')
     ORDER BY n.id
    ON CONFLICT (node_id) DO NOTHING;
END
$$;
