-- claim_capital_transfers: the capital_transfer_followup sidecar's claim: up to
-- p_max WAITING followups whose next check is due, oldest first, skipping rows
-- another instance holds; each is put out of reach for p_lease_seconds (a
-- check reported earlier sets its next time) and counted. A followup is made
-- as its transfer lands (follow_capital_transfers, from finish_nodes: an
-- evm_transfer node COMPLETED into a venue's deposit address, with no
-- bybit_deposit step after it), so the claim reads the due followups alone,
-- whatever the history of transfers.
-- Returns the due rows with the venue's kind and the NAMES of the environment
-- variables of its base URL and key file, and the venue's name for the chain.
-- p_max 1..1000, p_lease_seconds within the lease bounds (QT002, QT005).
-- Locks: the followup rows (SKIP LOCKED).
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
    v_now timestamptz := clock();
BEGIN
    PERFORM check_read_committed('claim_capital_transfers');
    PERFORM check_args('claim_capital_transfers', p_max => p_max, p_max_limit => 1000);
    IF p_lease_seconds IS NULL THEN
        RAISE EXCEPTION 'claim_capital_transfers: a lease is required' USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_limits('claim_capital_transfers', p_lease => p_lease_seconds);
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
