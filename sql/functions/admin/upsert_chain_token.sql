-- upsert_chain_token: records a token contract on a registered chain (its
-- symbol, address and decimals), or changes one. An admin step (`qtg chains
-- up` records the local MockUSDC through it): SECURITY INVOKER, no grant.
-- Audited as entity 'chain' when something changed.
CREATE OR REPLACE FUNCTION upsert_chain_token(
    p_chain_key text,
    p_symbol    text,
    p_address   text,
    p_decimals  integer
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_address  text;
    v_previous chain_tokens;
BEGIN
    PERFORM registered_chain('upsert_chain_token', p_chain_key);
    PERFORM check_registry_name('upsert_chain_token: symbol must be 1 to 16 letters, digits or dots', p_symbol,
                                '^[A-Za-z0-9.]{1,16}$', 'Use the token''s ticker, e.g. USDC.');
    v_address := evm_address('upsert_chain_token: token address', p_address);
    IF p_decimals IS NULL OR p_decimals NOT BETWEEN 0 AND 36 THEN
        RAISE EXCEPTION 'upsert_chain_token: decimals of % must be 0 to 36, got %', p_symbol, coalesce(p_decimals::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give what the contract''s decimals() answers (USDC: 6).';
    END IF;
    IF EXISTS (SELECT 1 FROM chain_tokens
                WHERE chain_key = p_chain_key AND address = v_address AND symbol <> p_symbol) THEN
        RAISE EXCEPTION 'upsert_chain_token: % on % is recorded under another symbol', v_address, p_chain_key
            USING ERRCODE = 'QT002', HINT = 'Change that token under its own symbol.';
    END IF;

    SELECT * INTO v_previous FROM chain_tokens WHERE chain_key = p_chain_key AND symbol = p_symbol FOR UPDATE;
    IF v_previous.symbol IS NOT NULL AND (v_previous.address, v_previous.decimals) = (v_address, p_decimals) THEN
        RETURN;
    END IF;
    INSERT INTO chain_tokens (chain_key, symbol, address, decimals, updated_at)
    VALUES (p_chain_key, p_symbol, v_address, p_decimals, clock())
    ON CONFLICT (chain_key, symbol) DO UPDATE
       SET address = excluded.address, decimals = excluded.decimals, updated_at = excluded.updated_at;
    PERFORM audit_registry(p_chain_key, 'token_set',
                           jsonb_build_object('symbol', p_symbol, 'address', v_address, 'decimals', p_decimals,
                                              'previous_address', v_previous.address));
END
$$;
