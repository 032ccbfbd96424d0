-- treasury_signer: the id of the signer holding the key of p_address, a
-- treasury account of chain p_chain_key; QT014 naming p_what when it is none
-- (money leaves only from a treasury account). Reads only.
CREATE OR REPLACE FUNCTION treasury_signer(p_what text, p_chain_key text, p_address text) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_signer text;
BEGIN
    SELECT a.signer_id INTO v_signer FROM treasury_accounts a
     WHERE a.chain_key = p_chain_key AND a.address = p_address;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: % is not a treasury account of chain %', p_what, p_address, p_chain_key
            USING ERRCODE = 'QT014', HINT = 'Money leaves only from a treasury account (treasury_accounts).';
    END IF;
    RETURN v_signer;
END
$$;
