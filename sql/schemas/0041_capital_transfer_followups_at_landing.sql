-- depends: 0040_evm_nonce_marks
--
-- A capital transfer's followup is now made as the transfer lands
-- (follow_capital_transfers, from finish_nodes, in the transaction that
-- completes it). Until now the capital_transfer_followup sidecar searched,
-- every 15 s, every evm_transfer ever COMPLETED into a venue's deposit address
-- for the ones not followed yet: a read that grew with the history. The
-- transfers that landed since its last search are followed here, once, as that
-- search would have followed them (due at once; the deadline three
-- bybit-deposit lane baselines after the landing, the 'default' lane's when
-- that lane has none).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
INSERT INTO capital_transfer_followups
       (node_id, request_id, venue_key, chain_key, coin, deposit_address, tx_hash, expected_amount,
        followup_state, landed_at, deadline_at, next_check_at)
SELECT n.id, n.request_id, d.venue_key, d.chain_key, d.coin, d.address, n.external_ref, r.amount,
       'WAITING', n.finished_at,
       n.finished_at + make_interval(secs => (3 * (SELECT b.baseline_seconds FROM lane_baselines b
                                                     WHERE b.lane IN ('bybit-deposit', 'default')
                                                     ORDER BY b.lane = 'bybit-deposit' DESC
                                                     LIMIT 1))::double precision),
       n.finished_at
  FROM venue_deposit_addresses d
  JOIN movement_request_nodes n
    ON n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED'
   AND (n.node_config ->> 'chain') = d.chain_key AND lower(n.node_config ->> 'to') = d.address
   AND coalesce(n.node_config ->> 'token', 'USDC') = d.coin
  JOIN movement_requests r ON r.id = n.request_id
 WHERE n.external_ref IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM capital_transfer_followups f WHERE f.node_id = n.id)
   AND NOT EXISTS (SELECT 1 FROM movement_plan_edges e
                     JOIN movement_request_nodes c ON c.id = e.child_node_id
                    WHERE e.parent_node_id = n.id AND c.executor_key = 'bybit_deposit')
 ORDER BY n.id;
$ddl$);
