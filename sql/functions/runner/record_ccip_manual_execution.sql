-- record_ccip_manual_execution: records a manual execution of a stranded CCIP
-- message (OffRamp.manuallyExecute, signed by the reaper's keeper account) in
-- ccip_manual_executions BEFORE the ccip_stranded_reaper broadcasts it.
-- Refuses, changing nothing:
--   QT002 a malformed hash, address, nonce or raw transaction, or bytes that
--         are not a manuallyExecute of p_message_id on the OffRamp of the
--         send's v1.6 lane (its chain id, p_nonce, no value; read from the RLP
--         and the calldata here: OffRamp 1.6's manuallyExecute(
--         ExecutionReport[], GasLimitOverride[][]), selector 0x5e7bb008, of
--         one report of the lane's source selector holding one message, the
--         message's id p_message_id), or fees above the chain's caps;
--   QT005 a raw transaction over 128 KiB;
--   QT011 no such node;
--   QT014 the destination chain, the source chain's CCIP row or the send's
--         v1.6 lane is not registered;
--   QT021 the node is not a stranded CCIP send of that message (a ccip node
--         OBSERVING whose evidence says ccip_state FAILURE for p_message_id,
--         of its own send: ccip_own_evidence),
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
    -- bytes4(keccak256("manuallyExecute((uint64,((bytes32,uint64,uint64,uint64,uint64),bytes,bytes,address,
    -- uint256,(bytes,address,uint32,bytes,uint256)[])[],bytes[][],bytes32[],uint256)[],(uint256,uint32[])[][])"))
    c_selector  CONSTANT bytea := '\x5e7bb008';
    v_now       timestamptz := clock();
    v_what      text := format('record_ccip_manual_execution: node %s', coalesce(p_node_id::text, 'NULL'));
    v_executor  text;
    v_node      movement_request_nodes;
    v_chain     chains;
    v_source    chain_protocols;
    v_lane      ccip_lanes;
    v_newest    text;
    v_tx        record;
BEGIN
    PERFORM check_read_committed('record_ccip_manual_execution');
    v_executor := evm_address('record_ccip_manual_execution: the executor', p_executor);
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
       OR v_node.evidence ->> 'message_id' IS DISTINCT FROM p_message_id
       OR NOT ccip_own_evidence(v_node.id, v_node.node_config, v_node.evidence) THEN
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
    v_source := chain_protocol(v_node.evidence ->> 'source_chain', 'ccip');
    v_lane := ccip_lane(v_source.chain_key, v_chain.chain_key);
    IF v_lane.version <> '1.6' THEN
        RAISE EXCEPTION '%: the send''s lane from % to % is CCIP v%: the engine executes v1.6 OffRamps by hand only',
                        v_what, v_source.chain_key, v_chain.chain_key, v_lane.version
            USING ERRCODE = 'QT014', HINT = 'Execute a v1.5 lane''s message by hand outside the engine.';
    END IF;
    SELECT * INTO v_tx FROM evm_decode_raw(v_what || ': the raw transaction', p_raw_tx);
    -- the canonical ABI layout of one report with one message: the reports'
    -- offset (64), one report at offset 32, its source selector, its messages'
    -- offset (160), one message at offset 32, whose header begins with its id
    IF v_tx.chain_id <> v_chain.chain_id OR v_tx.nonce <> p_nonce
       OR v_tx.to_address IS DISTINCT FROM v_lane.offramp OR v_tx.value <> 0
       OR length(v_tx.data) < 388 OR substr(v_tx.data, 1, 4) <> c_selector
       OR substr(v_tx.data, 5, 32) <> ccip_word(64)
       OR substr(v_tx.data, 69, 32) <> ccip_word(1) OR substr(v_tx.data, 101, 32) <> ccip_word(32)
       OR substr(v_tx.data, 133, 32) <> ccip_word(v_source.remote_id)
       OR substr(v_tx.data, 165, 32) <> ccip_word(160)
       OR substr(v_tx.data, 293, 32) <> ccip_word(1) OR substr(v_tx.data, 325, 32) <> ccip_word(32)
       OR substr(v_tx.data, 357, 32) <> decode(substr(p_message_id, 3), 'hex') THEN
        RAISE EXCEPTION '%: the raw transaction is not a manuallyExecute of % alone on the OffRamp % of % at nonce % '
                        '(it is to %, value %, nonce %, chain id %)', v_what, p_message_id,
                        v_lane.offramp, v_chain.chain_key, p_nonce,
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
