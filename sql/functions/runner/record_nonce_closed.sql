-- record_nonce_closed: the evm_nonce_reaper's report that a nonce of a
-- treasury account is consumed on its chain, so evm_nonce_gaps and
-- evm_stale_transactions stop listing it: a row of evm_closed_nonces, and an
-- audit row (entity chain, the chain key; detail: sender, nonce, the evidence):
--   fill_mined   nonce_closed: a fill recorded at that nonce is mined
--                (p_evidence names its tx_hash);
--   consumed     nonce_consumed: the chain's count is past the nonce and
--                none of the hashes recorded at it is mined (a transaction the
--                engine never recorded took it);
--   found_mined  nonce_found_mined: a transaction of a FAILED or
--                ABANDONED intent is mined (p_evidence names its tx_hash):
--                money moved for a node the engine holds failed; an operator
--                looks at it.
-- Refuses: QT002 an unknown p_how, a malformed address or nonce, evidence that
-- is not an object or lacks the tx_hash it must name; QT005 evidence over the
-- document limit; QT014 not a treasury account; QT033 the nonce was never
-- allocated by the engine (not below the account's next nonce), or the hash
-- named is not recorded at that nonce as what p_how says (a fill, or a failed
-- or abandoned intent's transaction). A nonce reported closed already changes
-- nothing and answers false; true when recorded. A node requeue_node holds
-- for this nonce (READY, awaits_nonce_of its intent) is released when it was
-- taken by our fill, a transaction the engine never recorded, or its own
-- abandoned transaction that reverted (evidence status 0); taken by that
-- transaction and succeeded (found_mined), it stays held and its last_error
-- says so. Locks: the account's nonce row, then the nodes.
CREATE OR REPLACE FUNCTION record_nonce_closed(
    p_chain_key text,
    p_sender    text,
    p_nonce     bigint,
    p_how       text,
    p_evidence  jsonb DEFAULT '{}'
) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_sender text;
    v_next   bigint;
    v_hash   text := p_evidence ->> 'tx_hash';
    v_paid   boolean;
BEGIN
    PERFORM check_read_committed('record_nonce_closed');
    v_sender := evm_address('record_nonce_closed: the sender', p_sender);
    PERFORM check_args('record_nonce_closed', p_outcome => p_how,
                       p_outcomes => ARRAY['fill_mined', 'consumed', 'found_mined']);
    IF p_nonce IS NULL OR p_nonce < 0 THEN
        RAISE EXCEPTION 'record_nonce_closed: a nonce is not negative, got %', coalesce(p_nonce::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give the nonce evm_nonce_gaps or evm_stale_transactions listed.';
    END IF;
    IF p_evidence IS NULL OR jsonb_typeof(p_evidence) <> 'object' THEN
        RAISE EXCEPTION 'record_nonce_closed: the evidence is a JSON object' USING ERRCODE = 'QT002',
            HINT = 'Say what the chain showed: counts, hashes, receipts.';
    END IF;
    PERFORM check_limits('record_nonce_closed', p_json => ARRAY[p_evidence]);
    IF p_how <> 'consumed' AND (v_hash IS NULL OR v_hash !~ '^0x[0-9a-f]{64}$') THEN
        RAISE EXCEPTION 'record_nonce_closed: % names the mined transaction (evidence tx_hash)', p_how
            USING ERRCODE = 'QT002', HINT = 'Put the hash whose receipt was found in the evidence.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM treasury_accounts a WHERE a.chain_key = p_chain_key AND a.address = v_sender) THEN
        RAISE EXCEPTION 'record_nonce_closed: % is not a treasury account of chain % on this network', v_sender,
                        coalesce(quote_literal(p_chain_key), 'NULL')
            USING ERRCODE = 'QT014', HINT = 'The treasury_accounts table lists the accounts the engine signs for.';
    END IF;
    SELECT e.next_nonce INTO v_next FROM evm_nonces e
     WHERE e.chain_key = p_chain_key AND e.address = v_sender FOR UPDATE;
    IF v_next IS NULL OR p_nonce >= v_next THEN
        RAISE EXCEPTION 'record_nonce_closed: nonce % of % on % was never allocated by the engine (next: %)', p_nonce,
                        v_sender, p_chain_key, coalesce(v_next::text, 'none yet')
            USING ERRCODE = 'QT033', HINT = 'Report only a nonce the engine listed.';
    END IF;
    IF p_how = 'fill_mined' AND NOT EXISTS (
           SELECT 1 FROM evm_transactions x
            WHERE x.tx_hash = v_hash AND x.purpose = 'fill' AND x.chain_key = p_chain_key
              AND x.sender = v_sender AND x.nonce = p_nonce)
       OR p_how = 'found_mined' AND NOT EXISTS (
           SELECT 1 FROM evm_transactions x JOIN node_intents i ON i.id = x.intent_id
            WHERE x.tx_hash = v_hash AND x.chain_key = p_chain_key AND x.sender = v_sender AND x.nonce = p_nonce
              AND i.intent_state IN ('FAILED', 'ABANDONED')) THEN
        RAISE EXCEPTION 'record_nonce_closed: % is not recorded at nonce % of % on % as % says', v_hash, p_nonce,
                        v_sender, p_chain_key, p_how
            USING ERRCODE = 'QT033', HINT = 'Name the recorded hash whose receipt the chain shows.';
    END IF;
    INSERT INTO evm_closed_nonces (chain_key, address, nonce, how, tx_hash, evidence, closed_by, closed_at)
    VALUES (p_chain_key, v_sender, p_nonce, p_how, v_hash, p_evidence, session_user, clock())
    ON CONFLICT (chain_key, address, nonce) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- (a transaction of ours that reverted moved nothing but its gas; the
    -- dispatcher reads the receipt itself before it signs again)
    v_paid := p_how = 'found_mined' AND coalesce(p_evidence ->> 'status', '1') <> '0';
    -- a node requeued from an intent at this nonce waited for it (requeue_node):
    -- consumed by our fill or by another transaction, its fresh side effect may
    -- start; taken by the intent's own transaction, it paid, and stays held
    UPDATE movement_request_nodes n
       SET awaits_nonce_of = CASE WHEN v_paid THEN n.awaits_nonce_of END,
           last_error      = CASE WHEN NOT v_paid THEN NULL
                                  ELSE format('requeued, but nonce %s of %s on %s was taken by its abandoned '
                                              'intent''s own transaction %s: its side effect happened; settle '
                                              'the movement, do not sign again', p_nonce, v_sender, p_chain_key,
                                              v_hash)
                             END,
           updated_at      = clock()
      FROM node_intents i
     WHERE (i.chain_key, i.sender, i.nonce) = (p_chain_key, v_sender, p_nonce)
       AND n.id = i.node_id AND n.awaits_nonce_of = i.id;
    PERFORM write_audit(ARRAY[(NULL, 'chain', p_chain_key, NULL,
                               CASE p_how WHEN 'fill_mined' THEN 'nonce_closed' WHEN 'consumed' THEN 'nonce_consumed'
                                          ELSE 'nonce_found_mined' END, NULL, NULL,
                               p_evidence || jsonb_build_object('sender', v_sender, 'nonce', p_nonce)
                              )::qtg.audit_event]);
    RETURN true;
END
$$;
