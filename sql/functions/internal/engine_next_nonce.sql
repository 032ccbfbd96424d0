-- engine_next_nonce: the nonce the engine hands out next for account
-- p_address on chain p_chain_key (evm_nonces), NULL before its first: what the
-- EVM route functions and evm_next_nonce answer as next_nonce, so that signing
-- needs no second query. Internal. Reads only; takes no lock (the allocation
-- itself is record_intent_prepared's, under its lock).
CREATE OR REPLACE FUNCTION engine_next_nonce(p_chain_key text, p_address text) RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT e.next_nonce FROM evm_nonces e WHERE e.chain_key = p_chain_key AND e.address = p_address;
$$;
