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
    v_address text := registry_address('disallow_destination', p_chain_key, p_address);
    v_removed allowed_destinations;
BEGIN
    DELETE FROM allowed_destinations WHERE chain_key = p_chain_key AND address = v_address
    RETURNING * INTO v_removed;
    IF v_removed.address IS NULL THEN
        RETURN false;
    END IF;
    PERFORM audit_registry(p_chain_key, 'destination_removed',
                           jsonb_build_object('address', v_address, 'label', v_removed.label));
    RETURN true;
END
$$;
