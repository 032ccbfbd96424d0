-- upsert_treasury_account: records one of our own accounts on a registered
-- chain with the id of the signer that holds its key (an identifier the
-- runner's signer configuration resolves; the key itself never enters the
-- database), or changes its signer. An admin step: SECURITY INVOKER, no grant.
-- Audited as entity 'chain' when something changed.
CREATE OR REPLACE FUNCTION upsert_treasury_account(
    p_chain_key text,
    p_address   text,
    p_signer_id text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_address  text := registry_address('upsert_treasury_account', p_chain_key, p_address);
    v_previous treasury_accounts;
BEGIN
    IF p_signer_id IS NULL OR p_signer_id !~ '^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$' THEN
        -- not echoed: a key pasted here by mistake must not reach a log
        RAISE EXCEPTION 'upsert_treasury_account: the signer id of % must be up to 128 letters, digits and _.:/-', v_address
            USING ERRCODE = 'QT002',
                  HINT = 'Give the name of the signer that holds the key (e.g. local:treasury-1), never the key.';
    END IF;
    -- anywhere in the id: env:<key> is as much a key as the key
    IF p_signer_id ~ '[0-9a-fA-F]{64}' THEN
        RAISE EXCEPTION 'upsert_treasury_account: the signer id of % holds what looks like a private key', v_address
            USING ERRCODE = 'QT002',
                  HINT = 'Give the name of the signer that holds the key, never the key; treat this key as exposed.';
    END IF;

    SELECT * INTO v_previous FROM treasury_accounts
     WHERE chain_key = p_chain_key AND address = v_address FOR UPDATE;
    IF v_previous.signer_id IS NOT DISTINCT FROM p_signer_id THEN
        RETURN;
    END IF;
    INSERT INTO treasury_accounts (chain_key, address, signer_id, updated_at)
    VALUES (p_chain_key, v_address, p_signer_id, clock())
    ON CONFLICT (chain_key, address) DO UPDATE
       SET signer_id = excluded.signer_id, updated_at = excluded.updated_at;
    PERFORM audit_registry(p_chain_key, 'treasury_account_set',
                           jsonb_build_object('address', v_address, 'signer_id', p_signer_id,
                                              'previous_signer_id', v_previous.signer_id));
END
$$;
