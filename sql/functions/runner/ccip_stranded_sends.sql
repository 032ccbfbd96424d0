-- ccip_stranded_sends: the CCIP sends whose destination execution FAILED and
-- that wait for a manual execution, for the ccip_stranded_reaper: ccip nodes
-- still OBSERVING whose last evidence says ccip_state FAILURE (the executor
-- writes it from the OffRamp's ExecutionStateChanged), on a v1.6 lane (the
-- reaper executes v1.6 OffRamps; a v1.5 lane's stranded send is left to an
-- operator, the node stays OBSERVING with its evidence). Each with what the
-- evidence is the node's own send (ccip_own_evidence: its chains and a
-- transaction its intents signed; any other is not listed), each with what
-- the reaper needs from the registry (never from the evidence): the source chain's
-- RPC URL's variable and the lane's OnRamp, to read the message again from
-- the source transaction; what the destination's token pool needs with it
-- (token_data: 'cctp', the burn's CCTP attestation, or 'none'); the
-- destination chain (id, RPC URL's variable, fee caps) and the lane's
-- OffRamp; the node's sender (its config's from: the source transaction's
-- receipt must be its, since SQL checks what recorded bytes do, not who signed
-- them); and the manual executions recorded for the message so far,
-- oldest first ({tx_hash, nonce, executor, raw_tx}), so a reaper that died
-- before its broadcast sends the recorded bytes instead of new ones.
-- QT002 p_max outside 1..1000. Reads only (the partial index
-- movement_request_nodes_ccip_stranded: the OBSERVING ccip nodes, whose
-- evidence it then reads); takes no lock.
CREATE OR REPLACE FUNCTION ccip_stranded_sends(p_max integer DEFAULT 50)
RETURNS TABLE (
    node_id                  bigint,
    message_id               text,
    source_chain_key         text,
    source_rpc_url_env       text,
    source_tx                text,
    source_onramp            text,
    token_data               text,
    dest_chain_key           text,
    dest_chain_id            bigint,
    dest_rpc_url_env         text,
    dest_offramp             text,
    max_fee_per_gas          numeric,
    max_priority_fee_per_gas numeric,
    attempts                 jsonb,
    sender                   text
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    IF p_max IS NULL OR p_max < 1 OR p_max > 1000 THEN
        RAISE EXCEPTION 'ccip_stranded_sends: p_max must be from 1 to 1000, got %', coalesce(p_max::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Ask for a batch of at most 1000 sends.';
    END IF;
    RETURN QUERY
    SELECT n.id, n.evidence ->> 'message_id', s.chain_key, s.rpc_url_env, n.evidence ->> 'source_tx',
           l.onramp, l.token_data, d.chain_key, d.chain_id, d.rpc_url_env, l.offramp,
           d.max_fee_per_gas, d.max_priority_fee_per_gas,
           coalesce((SELECT jsonb_agg(jsonb_build_object('tx_hash', m.tx_hash, 'nonce', m.nonce,
                                                         'executor', m.executor, 'raw_tx', m.raw_tx) ORDER BY m.id)
                       FROM ccip_manual_executions m
                      WHERE m.message_id = n.evidence ->> 'message_id'), '[]'::jsonb),
           n.node_config ->> 'from'
      FROM movement_request_nodes n
      JOIN chains s ON s.chain_key = n.evidence ->> 'source_chain'
      JOIN chains d ON d.chain_key = n.evidence ->> 'dest_chain'
      JOIN ccip_lanes l ON l.source_chain_key = s.chain_key AND l.dest_chain_key = d.chain_key AND l.version = '1.6'
     WHERE n.executor_key = 'ccip' AND n.node_state = 'OBSERVING' AND n.evidence ->> 'ccip_state' = 'FAILURE'
       AND ccip_own_evidence(n.id, n.node_config, n.evidence)
     ORDER BY n.id
     LIMIT p_max;
END
$$;
