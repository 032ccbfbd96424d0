-- ccip_own_evidence: whether the evidence a ccip node's observer reported
-- speaks of the node's own send: its source chain the node's chain, its
-- destination the node's destination_chain, and its source transaction one
-- the node's intents signed. What the stranded reaper executes by hand, and
-- pays the gas of, is read from that evidence (ccip_stranded_sends,
-- record_ccip_manual_execution): a runner login must not point it at another
-- sender's failed message. Internal; reads the node's intents.
CREATE OR REPLACE FUNCTION ccip_own_evidence(p_node_id bigint, p_config jsonb, p_evidence jsonb)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(p_evidence ->> 'source_chain' = p_config ->> 'chain'
                    AND p_evidence ->> 'dest_chain' = p_config ->> 'destination_chain'
                    AND EXISTS (SELECT 1 FROM node_intents i
                                 WHERE i.node_id = p_node_id
                                   AND p_evidence ->> 'source_tx' = ANY (i.signed_tx_hashes)), false);
$$;
