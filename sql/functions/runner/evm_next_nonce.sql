-- evm_next_nonce: the nonce the engine hands out next for a treasury account
-- on a chain (NULL when the account has not signed through the engine yet:
-- then the chain's own transaction count is the floor). A dispatcher signs at
-- the greater of this and the chain's pending count; record_intent_prepared
-- allocates it (or refuses with QT031 if another dispatcher took it first).
-- QT002 a malformed address; QT014 not a treasury account of a registered
-- chain. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION evm_next_nonce(p_chain_key text, p_sender text) RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_sender text := evm_address('evm_next_nonce: the sender', p_sender);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM treasury_accounts a WHERE a.chain_key = p_chain_key AND a.address = v_sender) THEN
        RAISE EXCEPTION 'evm_next_nonce: % is not a treasury account of chain % on this network',
                        v_sender, coalesce(quote_literal(p_chain_key), 'NULL')
            USING ERRCODE = 'QT014',
                  HINT = 'The treasury_accounts table lists the accounts the engine signs for.';
    END IF;
    RETURN engine_next_nonce(p_chain_key, v_sender);
END
$$;
