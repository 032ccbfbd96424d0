-- abandoned_transactions: the EVM transactions a node abandoned (the intents two
-- operators requeued it from: ABANDONED, holding a nonce), each with its
-- chain, the NAME of its RPC URL's environment variable, the account, the
-- nonce and every hash recorded for the intent (replacements included). The
-- dispatcher reads each on the chain before it signs anything again for the
-- node: the nonce must be used, and by none of these hashes. That the nonce
-- is closed is, in SQL, a runner's report (record_nonce_closed), and a login
-- that lied to release the node's hold (requeue_node) must not make the
-- honest dispatcher sign a second payment. QT011 no such node. Reads only;
-- takes no lock.
CREATE OR REPLACE FUNCTION abandoned_transactions(p_node_id bigint)
RETURNS TABLE (
    chain_key   text,
    rpc_url_env text,
    sender      text,
    nonce       bigint,
    tx_hashes   text[]
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT 1 FROM movement_request_nodes n WHERE n.id = p_node_id) THEN
        RAISE EXCEPTION 'abandoned_transactions: node % does not exist', coalesce(p_node_id::text, 'NULL')
            USING ERRCODE = 'QT011', HINT = 'Pass the id of a node the dispatcher claimed.';
    END IF;
    RETURN QUERY
    SELECT i.chain_key, c.rpc_url_env, i.sender, i.nonce,
           ARRAY(SELECT x.tx_hash FROM evm_transactions x WHERE x.intent_id = i.id ORDER BY x.id)
      FROM node_intents i
      JOIN chains c ON c.chain_key = i.chain_key
     WHERE i.node_id = p_node_id AND i.intent_state = 'ABANDONED' AND i.nonce IS NOT NULL
     ORDER BY i.id;
END
$$;
