-- record_nonce_fill: records a fill (a zero-value self-transfer closing a gap
-- that evm_nonce_gaps lists) in evm_transactions (purpose 'fill', no intent),
-- BEFORE the evm_nonce_reaper broadcasts it, as every signed transaction is.
-- Refuses, changing nothing:
--   QT002 a malformed address, hash or raw transaction, or bytes that are not a
--         zero-value self-transfer of p_sender with no data at p_nonce on the
--         chain's id, under the chain's fee caps (read from the RLP here);
--   QT005 a raw transaction over 128 KiB;
--   QT014 not a treasury account of a registered chain;
--   QT033 p_nonce is not a gap: the account's next nonce is not above it, it is
--         below the first nonce the engine recorded for the account, a live
--         intent (CLAIMED, PREPARED, SUBMITTED) holds it, or it is reported
--         closed on the chain; or a fill is recorded there already and this
--         one is not its replacement (p_replaces names the newest fill at
--         that nonce: a fee bump, or its bytes again).
-- So a runner's login cannot record a fill over a live intent's nonce. The
-- same hash recorded again as the same fill changes nothing and answers false.
-- Locks the account's evm_nonces row (the allocation takes it too, so no
-- intent is recorded at that nonce meanwhile). Audited: nonce_fill_recorded
-- (entity chain). Returns true when recorded.
CREATE OR REPLACE FUNCTION record_nonce_fill(
    p_chain_key text,
    p_sender    text,
    p_nonce     bigint,
    p_tx_hash   text,
    p_raw_tx    text,
    p_replaces  text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := clock();
    v_sender text;
    v_chain  chains;
    v_next   bigint;
    v_first  bigint;
    v_newest text;
    v_tx     record;
BEGIN
    PERFORM check_read_committed('record_nonce_fill');
    v_sender := evm_address('record_nonce_fill: the sender', p_sender);
    IF p_nonce IS NULL OR p_nonce < 0 THEN
        RAISE EXCEPTION 'record_nonce_fill: a nonce is not negative, got %', coalesce(p_nonce::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give the nonce evm_nonce_gaps listed.';
    END IF;
    IF p_tx_hash IS NULL OR p_tx_hash !~ '^0x[0-9a-f]{64}$' OR (p_replaces IS NOT NULL AND p_replaces !~ '^0x[0-9a-f]{64}$') THEN
        RAISE EXCEPTION 'record_nonce_fill: a transaction hash is 0x and 64 lower-case hex digits'
            USING ERRCODE = 'QT002', HINT = 'Give the keccak-256 hash of the signed bytes.';
    END IF;
    IF length(p_raw_tx) > 2 + 2 * 131072 THEN
        RAISE EXCEPTION 'record_nonce_fill: a raw transaction is at most 128 KiB, got % bytes', (length(p_raw_tx) - 2) / 2
            USING ERRCODE = 'QT005', HINT = 'A fill is a plain self-transfer of about a hundred bytes.';
    END IF;
    SELECT * INTO v_chain FROM chains c WHERE c.chain_key = p_chain_key;
    IF NOT FOUND OR NOT EXISTS (SELECT 1 FROM treasury_accounts a WHERE a.chain_key = p_chain_key AND a.address = v_sender) THEN
        RAISE EXCEPTION 'record_nonce_fill: % is not a treasury account of chain % on this network', v_sender,
                        coalesce(quote_literal(p_chain_key), 'NULL')
            USING ERRCODE = 'QT014', HINT = 'The treasury_accounts table lists the accounts the engine signs for.';
    END IF;
    SELECT * INTO v_tx FROM evm_decode_raw('record_nonce_fill: the raw transaction', p_raw_tx);
    IF v_tx.chain_id <> v_chain.chain_id OR v_tx.nonce <> p_nonce OR v_tx.to_address IS DISTINCT FROM v_sender
       OR v_tx.value <> 0 OR length(v_tx.data) <> 0 OR v_tx.gas > 21000 THEN
        RAISE EXCEPTION 'record_nonce_fill: the raw transaction is not a zero-value self-transfer of % at nonce % on chain id % '
                        '(it is to %, value %, % bytes of data, nonce %, chain id %)', v_sender, p_nonce, v_chain.chain_id,
                        coalesce(v_tx.to_address, 'nobody'), v_tx.value, length(v_tx.data), v_tx.nonce, v_tx.chain_id
            USING ERRCODE = 'QT002', HINT = 'A fill sends nothing to nobody else: evm.self_transfer signs one.';
    END IF;
    PERFORM check_fee_caps('record_nonce_fill', 'fill', v_tx.max_fee_per_gas, v_tx.max_priority_fee_per_gas, v_chain);

    SELECT e.next_nonce INTO v_next FROM evm_nonces e
     WHERE e.chain_key = p_chain_key AND e.address = v_sender FOR UPDATE;
    IF EXISTS (SELECT 1 FROM evm_transactions x WHERE x.tx_hash = p_tx_hash AND x.purpose = 'fill'
                  AND x.chain_key = p_chain_key AND x.sender = v_sender AND x.nonce = p_nonce) THEN
        RETURN false;
    END IF;
    SELECT min(i.nonce) INTO v_first FROM node_intents i WHERE i.chain_key = p_chain_key AND i.sender = v_sender;
    IF v_next IS NULL OR p_nonce >= v_next OR v_first IS NULL OR p_nonce < v_first
       OR EXISTS (SELECT 1 FROM node_intents i
                   WHERE i.chain_key = p_chain_key AND i.sender = v_sender AND i.nonce = p_nonce
                     AND i.intent_state IN ('CLAIMED', 'PREPARED', 'SUBMITTED'))
       OR evm_nonce_closed(p_chain_key, v_sender, p_nonce) THEN
        RAISE EXCEPTION 'record_nonce_fill: nonce % of % on % is not a gap (the engine has allocated below %, from %; '
                        'a live intent may hold it, or it is closed on the chain)', p_nonce, v_sender, p_chain_key,
                        coalesce(v_next::text, 'none yet'), coalesce(v_first::text, 'none')
            USING ERRCODE = 'QT033', HINT = 'Fill only a nonce evm_nonce_gaps lists.';
    END IF;
    SELECT x.tx_hash INTO v_newest FROM evm_transactions x
     WHERE x.chain_key = p_chain_key AND x.sender = v_sender AND x.nonce = p_nonce AND x.purpose = 'fill'
     ORDER BY x.id DESC LIMIT 1;
    IF v_newest IS DISTINCT FROM p_replaces THEN
        RAISE EXCEPTION 'record_nonce_fill: nonce % of % on % %', p_nonce, v_sender, p_chain_key,
                        CASE WHEN v_newest IS NULL THEN 'has no fill to replace'
                             ELSE 'has a fill already; a second one only replaces the newest (p_replaces)' END
            USING ERRCODE = 'QT033', HINT = 'Rebroadcast the recorded fill, or bump it naming it in p_replaces.';
    END IF;
    IF EXISTS (SELECT 1 FROM evm_transactions x WHERE x.tx_hash = p_tx_hash) THEN
        RAISE EXCEPTION 'record_nonce_fill: % is recorded already as another transaction', p_tx_hash
            USING ERRCODE = 'QT033', HINT = 'A fill is a transaction of its own.';
    END IF;

    INSERT INTO evm_transactions (tx_hash, chain_key, sender, nonce, intent_id, purpose, raw_tx, recorded_by, recorded_at)
    VALUES (p_tx_hash, p_chain_key, v_sender, p_nonce, NULL, 'fill', p_raw_tx, session_user, v_now);
    PERFORM write_audit(ARRAY[(NULL, 'chain', p_chain_key, NULL, 'nonce_fill_recorded', NULL, NULL,
                               jsonb_build_object('sender', v_sender, 'nonce', p_nonce, 'tx_hash', p_tx_hash,
                                                  'replaces', p_replaces,
                                                  'max_fee_per_gas', v_tx.max_fee_per_gas,
                                                  'max_priority_fee_per_gas', v_tx.max_priority_fee_per_gas)
                              )::qtg.audit_event]);
    RETURN true;
END
$$;
