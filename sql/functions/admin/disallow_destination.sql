-- disallow_destination: takes an address off a registered chain's allow-list;
-- returns whether it was on it (false changes nothing). An admin step:
-- SECURITY INVOKER, no grant. Audited as entity 'chain'.
CREATE OR REPLACE FUNCTION disallow_destination(
    p_chain_key text,
    p_address   text
) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_address text;
    v_removed allowed_destinations;
BEGIN
    PERFORM registered_chain('disallow_destination', p_chain_key);
    v_address := evm_address('disallow_destination: address', p_address);
    DELETE FROM allowed_destinations WHERE chain_key = p_chain_key AND address = v_address
    RETURNING * INTO v_removed;
    IF v_removed.address IS NULL THEN
        RETURN false;
    END IF;
    PERFORM write_audit(ARRAY[(NULL, 'chain', p_chain_key, NULL, 'destination_removed', NULL, NULL,
                               jsonb_build_object('address', v_address, 'label', v_removed.label))::qtg.audit_event]);
    RETURN true;
END
$$;
