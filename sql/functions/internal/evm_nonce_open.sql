-- evm_nonce_open: whether an intent's signed transaction may still be mined,
-- and so pay a second time beside a fresh one: the intent holds a nonce of
-- a treasury account (its chain, sender and nonce are recorded), its node's
-- call pays each time it is mined (evm_transfer, cctp_burn, ccip, stargate:
-- a cctp_mint's message is minted once by the chain, a second mint reverts),
-- and the nonce is not recorded consumed (evm_closed_nonces: by our fill or
-- by a transaction the engine never recorded). Signed bytes at an open nonce
-- are valid for as long as the nonce is, for anyone who holds them: a
-- dropped transaction can come back. Internal: requeue_node,
-- record_nonce_closed.
CREATE OR REPLACE FUNCTION evm_nonce_open(p_intent node_intents) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_intent.nonce IS NOT NULL AND p_intent.chain_key IS NOT NULL
       AND (SELECT signs_evm(n.executor_key) AND n.executor_key <> 'cctp_mint'
              FROM movement_request_nodes n WHERE n.id = p_intent.node_id)
       AND NOT EXISTS (SELECT 1 FROM evm_closed_nonces c
                        WHERE (c.chain_key, c.address, c.nonce) = (p_intent.chain_key, p_intent.sender, p_intent.nonce)
                          AND c.how IN ('fill_mined', 'consumed'));
$$;
