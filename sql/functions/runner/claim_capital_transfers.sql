-- claim_capital_transfers: the capital_transfer_followup sidecar's claim.
--   1. found: evm_transfer nodes COMPLETED into a venue's deposit address (the
--      node's chain and recipient are a row of venue_deposit_addresses for its
--      token), not followed yet, whose movement has no bybit_deposit step
--      depending on them (that step follows its own transfer): each becomes a
--      WAITING followup (the transaction hash, the movement's amount, the
--      landing time, a deadline three bybit-deposit lane baselines after it),
--      up to p_max a call;
--   2. due: up to p_max WAITING followups whose next check is due, oldest
--      first, skipping rows another instance holds; each is put out of reach
--      for p_lease_seconds (a check reported earlier sets its next time) and
--      counted.
-- Returns the due rows with the venue's kind and the NAMES of the environment
-- variables of its base URL and key file, and the venue's name for the chain.
-- Found by the partial index movement_request_nodes_transfer_to_idx: the cost
-- grows with the transfers ever made into deposit addresses, not with all
-- nodes. p_max 1..1000, p_lease_seconds within the lease bounds (QT002,
-- QT005). Locks: the followup rows (SKIP LOCKED).
CREATE OR REPLACE FUNCTION claim_capital_transfers(p_max integer DEFAULT 50, p_lease_seconds numeric DEFAULT 60)
RETURNS TABLE (
    node_id         bigint,
    request_id      bigint,
    venue_key       text,
    kind            text,
    base_url_env    text,
    key_file_env    text,
    chain_key       text,
    venue_chain     text,
    coin            text,
    deposit_address text,
    tx_hash         text,
    expected_amount numeric,
    landed_at       timestamptz,
    deadline_at     timestamptz,
    checks          integer
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := clock();
    v_baseline numeric;
BEGIN
    PERFORM check_args('claim_capital_transfers', p_max => p_max, p_max_limit => 1000);
    IF p_lease_seconds IS NULL THEN
        RAISE EXCEPTION 'claim_capital_transfers: a lease is required' USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_limits('claim_capital_transfers', p_lease => p_lease_seconds);
    v_baseline := (lane_of('bybit-deposit')).baseline_seconds;

    INSERT INTO capital_transfer_followups AS f
           (node_id, request_id, venue_key, chain_key, coin, deposit_address, tx_hash, expected_amount,
            followup_state, landed_at, deadline_at, next_check_at)
    SELECT n.id, n.request_id, d.venue_key, d.chain_key, d.coin, d.address, n.external_ref, r.amount,
           'WAITING', n.finished_at, n.finished_at + make_interval(secs => (3 * v_baseline)::double precision), v_now
      FROM venue_deposit_addresses d
      JOIN movement_request_nodes n
        ON n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED'
       AND (n.node_config ->> 'chain') = d.chain_key AND lower(n.node_config ->> 'to') = d.address
       AND coalesce(n.node_config ->> 'token', 'USDC') = d.coin
      JOIN movement_requests r ON r.id = n.request_id
     WHERE n.external_ref IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM capital_transfer_followups f2 WHERE f2.node_id = n.id)
       AND NOT EXISTS (SELECT 1 FROM movement_plan_edges e
                         JOIN movement_request_nodes c ON c.id = e.child_node_id
                        WHERE e.parent_node_id = n.id AND c.executor_key = 'bybit_deposit')
     ORDER BY n.id
     LIMIT p_max
    ON CONFLICT (node_id) DO NOTHING;

    RETURN QUERY
    WITH due AS (
        SELECT f.node_id FROM capital_transfer_followups f
         WHERE f.followup_state = 'WAITING' AND f.next_check_at <= v_now
         ORDER BY f.next_check_at, f.node_id
         LIMIT p_max
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE capital_transfer_followups f
           SET next_check_at = v_now + make_interval(secs => p_lease_seconds::double precision),
               checks = f.checks + 1
          FROM due
         WHERE f.node_id = due.node_id
        RETURNING f.*
    )
    SELECT c.node_id, c.request_id, c.venue_key, v.kind, v.base_url_env, v.key_file_env, c.chain_key,
           vc.venue_chain, c.coin, c.deposit_address, c.tx_hash, c.expected_amount, c.landed_at, c.deadline_at,
           c.checks
      FROM claimed c
      JOIN exchange_venues v ON v.venue_key = c.venue_key
      JOIN venue_chains vc ON vc.venue_key = c.venue_key AND vc.chain_key = c.chain_key
     ORDER BY c.node_id;
END
$$;
