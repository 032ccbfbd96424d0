-- registered_chain: the chain registry's row for p_chain_key, locked FOR
-- UPDATE (the admin procedures change what hangs off it under that lock);
-- QT014 when the network has no such chain.
CREATE OR REPLACE FUNCTION registered_chain(p_caller text, p_chain_key text) RETURNS chains
LANGUAGE plpgsql
AS $$
DECLARE
    v_chain chains;
BEGIN
    SELECT * INTO v_chain FROM chains WHERE chain_key = p_chain_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: chain % is not registered on this network', p_caller, coalesce(quote_literal(p_chain_key), 'NULL')
            USING ERRCODE = 'QT014',
                  HINT = 'Register it first with upsert_chain (the chains table lists those that are).';
    END IF;
    RETURN v_chain;
END
$$;
