-- chain_protocol: the registry's row of a bridge protocol on a chain (its id in
-- the protocol and its contracts there), for the route functions; QT014 when
-- the chain has none.
CREATE OR REPLACE FUNCTION chain_protocol(p_chain_key text, p_protocol text) RETURNS chain_protocols
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_row chain_protocols;
BEGIN
    SELECT * INTO v_row FROM chain_protocols WHERE chain_key = p_chain_key AND protocol = p_protocol;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'chain_protocol: % is not registered on chain %', coalesce(p_protocol, 'NULL'),
                        coalesce(quote_literal(p_chain_key), 'NULL')
            USING ERRCODE = 'QT014',
                  HINT = 'Register the protocol''s contracts on the chain with upsert_chain_protocol (chain_protocols lists those that are).';
    END IF;
    RETURN v_row;
END
$$;
