-- record_evm_replacement: records a replacement of an intent's transaction (a
-- fee bump at the same nonce, signed by the evm_nonce_reaper) in
-- evm_transactions (purpose 'replacement') and appends its hash to the
-- intent's signed_tx_hashes, BEFORE it is broadcast, so the observer and
-- recovery check it and can rebroadcast its bytes.
-- Refuses, changing nothing:
--   QT002 a malformed hash or raw transaction; a hash that is not the
--         keccak-256 of the bytes (keccak256: a runner login could otherwise
--         add to an intent the hash of any transaction on the chain, a
--         reverted one, say, which the observer would read as the node's);
--         bytes that do not do what the
--         intent's first transaction does (the same chain id, recipient, value
--         and data), or fees above the chain's caps; a hash recorded already
--         for something else;
--   QT005 a raw transaction over 128 KiB;
--   QT011 no such intent;
--   QT021 the intent is not PREPARED or SUBMITTED with a recorded EVM
--         transaction, or its node is finished (COMPLETED, FAILED, SKIPPED) or
--         not working on it (PENDING, READY);
--   QT033 the bytes are at another nonce than the one the intent holds.
-- The same hash again for the same intent changes nothing and answers false.
-- Locks: the node, then the intent (the documented order). Audited:
-- tx_replaced (entity node). Returns true when recorded.
CREATE OR REPLACE FUNCTION record_evm_replacement(p_intent_id bigint, p_tx_hash text, p_raw_tx text) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := clock();
    v_node   movement_request_nodes;
    v_intent node_intents;
    v_chain  chains;
    v_tx     record;
    v_first  record;
BEGIN
    PERFORM check_read_committed('record_evm_replacement');
    IF p_tx_hash IS NULL OR p_tx_hash !~ '^0x[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'record_evm_replacement: a transaction hash is 0x and 64 lower-case hex digits'
            USING ERRCODE = 'QT002', HINT = 'Give the keccak-256 hash of the signed bytes.';
    END IF;
    IF length(p_raw_tx) > 2 + 2 * 131072 THEN
        RAISE EXCEPTION 'record_evm_replacement: a raw transaction is at most 128 KiB, got % bytes',
                        (length(p_raw_tx) - 2) / 2
            USING ERRCODE = 'QT005', HINT = 'A replacement carries its intent''s data again, no more.';
    END IF;
    SELECT * INTO v_tx FROM evm_decode_raw('record_evm_replacement: the raw transaction', p_raw_tx);

    SELECT n.* INTO v_node FROM movement_request_nodes n
     WHERE n.id = (SELECT i.node_id FROM node_intents i WHERE i.id = p_intent_id)
       FOR UPDATE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'record_evm_replacement: intent % does not exist', coalesce(p_intent_id::text, 'NULL')
            USING ERRCODE = 'QT011', HINT = 'Give the intent id evm_stale_transactions listed.';
    END IF;
    SELECT * INTO STRICT v_intent FROM node_intents i WHERE i.id = p_intent_id FOR UPDATE;
    IF v_node.node_state NOT IN ('SUBMITTING', 'SUBMITTED', 'OBSERVING', 'UNKNOWN')
       OR v_intent.intent_state NOT IN ('PREPARED', 'SUBMITTED') OR v_intent.chain_key IS NULL THEN
        RAISE EXCEPTION 'record_evm_replacement: intent % (%, an EVM transaction: %) of node % (%) cannot be replaced',
                        p_intent_id, v_intent.intent_state, v_intent.chain_key IS NOT NULL, v_node.id, v_node.node_state
            USING ERRCODE = 'QT021',
                  HINT = 'Only a prepared or sent transaction of a node still at work is replaced.';
    END IF;
    IF v_tx.nonce <> v_intent.nonce THEN
        RAISE EXCEPTION 'record_evm_replacement: the bytes are at nonce %, intent % holds nonce %', v_tx.nonce,
                        p_intent_id, v_intent.nonce
            USING ERRCODE = 'QT033', HINT = 'A replacement is signed at the nonce its intent holds.';
    END IF;
    IF EXISTS (SELECT 1 FROM evm_transactions x WHERE x.tx_hash = p_tx_hash AND x.intent_id = p_intent_id) THEN
        RETURN false;
    END IF;
    SELECT * INTO v_chain FROM chains c WHERE c.chain_key = v_intent.chain_key;
    SELECT d.* INTO v_first
      FROM evm_transactions x
     CROSS JOIN LATERAL evm_decode_raw('record_evm_replacement: the intent''s transaction', x.raw_tx) d
     WHERE x.intent_id = p_intent_id ORDER BY x.id LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'record_evm_replacement: intent % has no recorded transaction to replace', p_intent_id
            USING ERRCODE = 'QT021', HINT = 'Only a recorded transaction is replaced.';
    END IF;
    IF v_tx.chain_id <> v_chain.chain_id OR v_tx.to_address IS DISTINCT FROM v_first.to_address
       OR v_tx.value <> v_first.value OR v_tx.data <> v_first.data THEN
        RAISE EXCEPTION 'record_evm_replacement: the bytes do not do what intent %''s transaction does '
                        '(the same chain id, recipient, value and data)', p_intent_id
            USING ERRCODE = 'QT002', HINT = 'A fee bump changes the fees only.';
    END IF;
    PERFORM check_fee_caps('record_evm_replacement', 'replacement', v_tx.max_fee_per_gas, v_tx.max_priority_fee_per_gas, v_chain);
    IF EXISTS (SELECT 1 FROM evm_transactions x WHERE x.tx_hash = p_tx_hash) THEN
        RAISE EXCEPTION 'record_evm_replacement: % is recorded already for something else', p_tx_hash
            USING ERRCODE = 'QT002', HINT = 'A replacement is a transaction of its own.';
    END IF;
    -- last, as the dearest check (about a millisecond a 136 bytes)
    IF '0x' || encode(keccak256(decode(substr(p_raw_tx, 3), 'hex')), 'hex') <> p_tx_hash THEN
        RAISE EXCEPTION 'record_evm_replacement: % is not the hash of the raw transaction given', p_tx_hash
            USING ERRCODE = 'QT002', HINT = 'Give the keccak-256 hash of the signed bytes, as signing returned it.';
    END IF;

    INSERT INTO evm_transactions (tx_hash, chain_key, sender, nonce, intent_id, purpose, raw_tx, recorded_by, recorded_at)
    VALUES (p_tx_hash, v_intent.chain_key, v_intent.sender, v_intent.nonce, p_intent_id, 'replacement', p_raw_tx,
            session_user, v_now);
    UPDATE node_intents SET signed_tx_hashes = signed_tx_hashes || p_tx_hash WHERE id = p_intent_id;
    PERFORM write_audit(ARRAY[(NULL, 'node', v_node.id::text, v_node.request_id, 'tx_replaced',
                               v_node.node_state::text, v_node.node_state::text,
                               jsonb_build_object('intent_id', p_intent_id, 'nonce', v_intent.nonce, 'tx_hash', p_tx_hash,
                                                  'max_fee_per_gas', v_tx.max_fee_per_gas,
                                                  'max_priority_fee_per_gas', v_tx.max_priority_fee_per_gas)
                              )::qtg.audit_event]);
    RETURN true;
END
$$;
