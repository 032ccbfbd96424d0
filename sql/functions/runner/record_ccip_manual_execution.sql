-- record_ccip_manual_execution: records a manual execution of a stranded CCIP
-- message (OffRamp.manuallyExecute, signed by the reaper's keeper account) in
-- ccip_manual_executions BEFORE the ccip_stranded_reaper broadcasts it.
-- Refuses, changing nothing:
--   QT002 a malformed hash, address, nonce or raw transaction, or bytes that
--         are not a manuallyExecute of p_message_id on the destination chain's
--         registered OffRamp (its chain id, p_nonce, no value; read from the
--         RLP and the calldata here), or fees above the chain's caps;
--   QT005 a raw transaction over 128 KiB;
--   QT011 no such node;
--   QT014 the destination chain or its CCIP row is not registered;
--   QT021 the node is not a stranded CCIP send of that message (a ccip node
--         OBSERVING whose evidence says ccip_state FAILURE for p_message_id),
--         or an attempt was recorded for the message and this one does not
--         name the newest (p_replaces): another reaper recorded one meanwhile.
-- The same hash recorded again for the same message changes nothing and
-- answers false. Locks: the node (FOR UPDATE: two reapers record one after
-- the other). Audited: ccip_manual_execution_recorded (entity node). Returns
-- true when recorded.
CREATE OR REPLACE FUNCTION record_ccip_manual_execution(
    p_node_id    bigint,
    p_message_id text,
    p_executor   text,
    p_nonce      bigint,
    p_tx_hash    text,
    p_raw_tx     text,
    p_replaces   text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    -- bytes4(keccak256("manuallyExecute(((bytes32,uint64,uint64,uint64,uint64),bytes,bytes,address,uint256,
    -- (bytes,address,uint32,bytes,uint256)[]),uint256)")), the double's OffRamp
    c_selector  CONSTANT bytea := '\xdcf652b2';
    v_now       timestamptz := clock();
    v_what      text := format('record_ccip_manual_execution: node %s', coalesce(p_node_id::text, 'NULL'));
    v_executor  text := evm_address('record_ccip_manual_execution: the executor', p_executor);
    v_node      movement_request_nodes;
    v_chain     chains;
    v_ccip      chain_protocols;
    v_newest    text;
    v_tx        record;
BEGIN
    IF p_nonce IS NULL OR p_nonce < 0 THEN
        RAISE EXCEPTION '%: a nonce is not negative, got %', v_what, coalesce(p_nonce::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give the keeper account''s nonce the bytes are signed at.';
    END IF;
    IF p_message_id IS NULL OR p_message_id !~ '^0x[0-9a-f]{64}$' OR p_tx_hash IS NULL OR p_tx_hash !~ '^0x[0-9a-f]{64}$'
       OR (p_replaces IS NOT NULL AND p_replaces !~ '^0x[0-9a-f]{64}$') THEN
        RAISE EXCEPTION '%: a message id or transaction hash is 0x and 64 lower-case hex digits', v_what
            USING ERRCODE = 'QT002', HINT = 'Give the message id of the evidence and the keccak-256 hash of the signed bytes.';
    END IF;
    IF length(p_raw_tx) > 2 + 2 * 131072 THEN
        RAISE EXCEPTION '%: a raw transaction is at most 128 KiB, got % bytes', v_what, (length(p_raw_tx) - 2) / 2
            USING ERRCODE = 'QT005', HINT = 'A manual execution of one token message is a few kilobytes.';
    END IF;
    SELECT * INTO v_node FROM movement_request_nodes n WHERE n.id = p_node_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: no such node', v_what
            USING ERRCODE = 'QT011', HINT = 'Pass a node ccip_stranded_sends listed.';
    END IF;
    IF v_node.executor_key <> 'ccip' OR v_node.node_state <> 'OBSERVING'
       OR v_node.evidence ->> 'ccip_state' IS DISTINCT FROM 'FAILURE'
       OR v_node.evidence ->> 'message_id' IS DISTINCT FROM p_message_id THEN
        RAISE EXCEPTION '%: not a stranded CCIP send of message % (a ccip node %, its evidence says %)', v_what,
                        p_message_id, v_node.node_state, coalesce(v_node.evidence ->> 'ccip_state', 'nothing')
            USING ERRCODE = 'QT021', HINT = 'Execute manually only what ccip_stranded_sends lists.';
    END IF;
    SELECT * INTO v_chain FROM chains c WHERE c.chain_key = v_node.evidence ->> 'dest_chain';
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: the destination chain % is not registered', v_what,
                        coalesce(quote_literal(v_node.evidence ->> 'dest_chain'), 'NULL')
            USING ERRCODE = 'QT014', HINT = 'The chains table lists the registered chains.';
    END IF;
    v_ccip := chain_protocol(v_chain.chain_key, 'ccip');
    SELECT * INTO v_tx FROM evm_decode_raw(v_what || ': the raw transaction', p_raw_tx);
    IF v_tx.chain_id <> v_chain.chain_id OR v_tx.nonce <> p_nonce
       OR v_tx.to_address IS DISTINCT FROM v_ccip.contracts ->> 'CcipOffRamp' OR v_tx.value <> 0
       OR length(v_tx.data) < 4 + 96 OR substr(v_tx.data, 1, 4) <> c_selector
       OR substr(v_tx.data, 4 + 64 + 1, 32) <> decode(substr(p_message_id, 3), 'hex') THEN
        RAISE EXCEPTION '%: the raw transaction is not a manuallyExecute of % on the OffRamp % of % at nonce % '
                        '(it is to %, value %, nonce %, chain id %)', v_what, p_message_id,
                        v_ccip.contracts ->> 'CcipOffRamp', v_chain.chain_key, p_nonce,
                        coalesce(v_tx.to_address, 'nobody'), v_tx.value, v_tx.nonce, v_tx.chain_id
            USING ERRCODE = 'QT002', HINT = 'Sign the OffRamp''s manuallyExecute of the message ccip_stranded_sends listed.';
    END IF;
    PERFORM check_fee_caps('record_ccip_manual_execution', 'manual execution', v_tx.max_fee_per_gas,
                           v_tx.max_priority_fee_per_gas, v_chain);

    IF EXISTS (SELECT 1 FROM ccip_manual_executions m WHERE m.tx_hash = p_tx_hash AND m.message_id = p_message_id) THEN
        RETURN false;
    END IF;
    SELECT m.tx_hash INTO v_newest FROM ccip_manual_executions m
     WHERE m.message_id = p_message_id ORDER BY m.id DESC LIMIT 1;
    IF v_newest IS DISTINCT FROM p_replaces THEN
        RAISE EXCEPTION '%: message % %', v_what, p_message_id,
                        CASE WHEN v_newest IS NULL THEN 'has no manual execution to follow'
                             ELSE format('has a manual execution recorded (%s); a new one names it in p_replaces', v_newest) END
            USING ERRCODE = 'QT021', HINT = 'Broadcast the recorded attempt, or follow the newest one naming it.';
    END IF;
    IF EXISTS (SELECT 1 FROM ccip_manual_executions m WHERE m.tx_hash = p_tx_hash) THEN
        RAISE EXCEPTION '%: % is recorded already for another message', v_what, p_tx_hash
            USING ERRCODE = 'QT002', HINT = 'A manual execution is a transaction of its own.';
    END IF;

    INSERT INTO ccip_manual_executions (node_id, message_id, chain_key, executor, nonce, tx_hash, raw_tx,
                                        recorded_by, recorded_at)
    VALUES (p_node_id, p_message_id, v_chain.chain_key, v_executor, p_nonce, p_tx_hash, p_raw_tx, session_user, v_now);
    PERFORM write_audit(ARRAY[(NULL, 'node', p_node_id::text, v_node.request_id, 'ccip_manual_execution_recorded',
                               'OBSERVING', 'OBSERVING',
                               jsonb_build_object('message_id', p_message_id, 'chain_key', v_chain.chain_key,
                                                  'executor', v_executor, 'nonce', p_nonce, 'tx_hash', p_tx_hash,
                                                  'replaces', p_replaces))::qtg.audit_event]);
    RETURN true;
END
$$;
