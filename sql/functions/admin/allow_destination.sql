-- allow_destination: puts an address on a registered chain's allow-list of
-- destinations (money may be sent there besides our treasury accounts), with
-- a label saying whose it is; allowing it again changes only the label. An
-- admin step: SECURITY INVOKER, no grant. Audited as entity 'chain'.
CREATE OR REPLACE FUNCTION allow_destination(
    p_chain_key text,
    p_address   text,
    p_label     text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_address  text := registry_address('allow_destination', p_chain_key, p_address);
    v_previous allowed_destinations;
BEGIN
    IF p_label IS NULL OR btrim(p_label) = '' OR length(p_label) > 200 THEN
        RAISE EXCEPTION 'allow_destination: % needs a label of 1 to 200 characters', v_address
            USING ERRCODE = 'QT002', HINT = 'Say whose address it is (e.g. Bybit deposit, main account).';
    END IF;
    SELECT * INTO v_previous FROM allowed_destinations
     WHERE chain_key = p_chain_key AND address = v_address FOR UPDATE;
    IF v_previous.label IS NOT DISTINCT FROM p_label THEN
        RETURN;
    END IF;
    INSERT INTO allowed_destinations (chain_key, address, label, added_by, added_at)
    VALUES (p_chain_key, v_address, p_label, session_user, clock())
    ON CONFLICT (chain_key, address) DO UPDATE SET label = excluded.label;
    PERFORM audit_registry(p_chain_key, 'destination_allowed',
                           jsonb_build_object('address', v_address, 'label', p_label, 'previous_label', v_previous.label));
END
$$;
