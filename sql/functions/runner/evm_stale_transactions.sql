-- evm_stale_transactions: the signed transactions the evm_nonce_reaper looks
-- at again because they have waited long: the newest recorded transaction of
-- each sent intent (intent SUBMITTED, node SUBMITTED or OBSERVING, not
-- quarantined), and the newest fill of each nonce not reported closed
-- (record_nonce_closed), recorded more than max(p_blocks block times of its
-- chain, p_min_seconds) ago by clock(). The reaper reads the chain for each:
-- mined or the nonce consumed -> nothing to do (the observer decides for an
-- intent; a fill is reported closed); not mined and the nonce free -> a fee
-- bump (record_evm_replacement / record_nonce_fill with p_replaces, recorded
-- before it is broadcast), or the recorded bytes again when they were dropped.
-- kind: 'intent' (intent_id and node_id set) or 'fill'. tx_hashes: every hash
-- recorded at that nonce of the account, oldest first, and tx_purposes what
-- each is (intent, replacement, fill).
-- p_blocks 1..100000, p_min_seconds 0..86400, p_max 1..1000 (QT002).
-- Oldest first. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION evm_stale_transactions(
    p_blocks      integer DEFAULT 20,
    p_min_seconds integer DEFAULT 60,
    p_max         integer DEFAULT 100
)
RETURNS TABLE (
    kind                     text,
    intent_id                bigint,
    node_id                  bigint,
    chain_key                text,
    sender                   text,
    nonce                    bigint,
    tx_hash                  text,
    raw_tx                   text,
    recorded_at              timestamptz,
    tx_hashes                text[],
    tx_purposes              text[],
    signer_id                text,
    rpc_url_env              text,
    max_fee_per_gas          numeric,
    max_priority_fee_per_gas numeric,
    chain_id                 bigint
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock();
BEGIN
    PERFORM check_args('evm_stale_transactions', p_max => p_max, p_max_limit => 1000);
    IF p_blocks IS NULL OR p_blocks < 1 OR p_blocks > 100000 THEN
        RAISE EXCEPTION 'evm_stale_transactions: p_blocks must be between 1 and 100000, got %', coalesce(p_blocks::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'How many block times a transaction waits before it is bumped.';
    END IF;
    IF p_min_seconds IS NULL OR p_min_seconds < 0 OR p_min_seconds > 86400 THEN
        RAISE EXCEPTION 'evm_stale_transactions: p_min_seconds must be between 0 and 86400, got %',
                        coalesce(p_min_seconds::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'The least wait before a bump, whatever the block time.';
    END IF;
    RETURN QUERY
    WITH newest AS (
        SELECT 'intent'::text AS kind, i.id AS intent_id, n.id AS node_id, x.chain_key, x.sender, x.nonce,
               x.tx_hash, x.raw_tx, x.recorded_at
          FROM node_intents i
          JOIN movement_request_nodes n ON n.id = i.node_id
          CROSS JOIN LATERAL (SELECT * FROM evm_transactions x WHERE x.intent_id = i.id ORDER BY x.id DESC LIMIT 1) x
         WHERE i.intent_state = 'SUBMITTED' AND i.chain_key IS NOT NULL
           AND n.node_state IN ('SUBMITTED', 'OBSERVING') AND n.quarantined_at IS NULL
        UNION ALL
        SELECT * FROM (
            SELECT DISTINCT ON (f.chain_key, f.sender, f.nonce)
                   'fill', NULL::bigint, NULL::bigint, f.chain_key, f.sender, f.nonce, f.tx_hash, f.raw_tx, f.recorded_at
              FROM evm_transactions f
             WHERE f.purpose = 'fill' AND NOT evm_nonce_closed(f.chain_key, f.sender, f.nonce)
             ORDER BY f.chain_key, f.sender, f.nonce, f.id DESC) fills
    )
    SELECT w.kind, w.intent_id, w.node_id, w.chain_key, w.sender, w.nonce, w.tx_hash, w.raw_tx, w.recorded_at,
           ARRAY(SELECT y.tx_hash FROM evm_transactions y
                  WHERE y.chain_key = w.chain_key AND y.sender = w.sender AND y.nonce = w.nonce ORDER BY y.id),
           ARRAY(SELECT y.purpose FROM evm_transactions y
                  WHERE y.chain_key = w.chain_key AND y.sender = w.sender AND y.nonce = w.nonce ORDER BY y.id),
           t.signer_id, c.rpc_url_env, c.max_fee_per_gas, c.max_priority_fee_per_gas, c.chain_id
      FROM newest w
      JOIN chains c ON c.chain_key = w.chain_key
      JOIN treasury_accounts t ON t.chain_key = w.chain_key AND t.address = w.sender
     WHERE w.recorded_at <= v_now - greatest(make_interval(secs => p_blocks * c.block_time_ms / 1000.0),
                                            make_interval(secs => p_min_seconds))
     ORDER BY w.recorded_at, w.chain_key, w.sender, w.nonce
     LIMIT p_max;
END
$$;
