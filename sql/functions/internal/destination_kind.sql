-- destination_kind: why p_address may receive on chain p_chain_key: 'treasury'
-- (a treasury account of the chain) or 'allowed' (allow-listed there); QT032
-- naming p_what when neither, so nothing is signed or requested for it. The
-- allow-list rule of every route function that sends money to an address (on
-- the chain the money lands on: a bridge's destination, a withdrawal's chain),
-- in this one place. Reads only.
CREATE OR REPLACE FUNCTION destination_kind(p_what text, p_chain_key text, p_address text) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM treasury_accounts a WHERE a.chain_key = p_chain_key AND a.address = p_address) THEN
        RETURN 'treasury';
    ELSIF EXISTS (SELECT 1 FROM allowed_destinations d WHERE d.chain_key = p_chain_key AND d.address = p_address) THEN
        RETURN 'allowed';
    END IF;
    RAISE EXCEPTION '%: % is neither a treasury account nor an allowed destination on chain %', p_what, p_address,
                    p_chain_key
        USING ERRCODE = 'QT032',
              HINT = 'The admin adds a destination with allow_destination on the chain the money lands on; '
                     'until then nothing is signed or requested for it.';
END
$$;
