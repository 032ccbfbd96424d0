-- evm_nonce_closed: whether a nonce of a treasury account is known closed on
-- its chain, as the evm_nonce_reaper reported it (record_nonce_closed, a row
-- of evm_closed_nonces). Internal.
CREATE OR REPLACE FUNCTION evm_nonce_closed(p_chain_key text, p_sender text, p_nonce bigint) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (SELECT 1 FROM evm_closed_nonces c
                    WHERE c.chain_key = p_chain_key AND c.address = p_sender AND c.nonce = p_nonce)
$$;
