-- ccip_lane: the registry's CCIP lane from p_source_chain_key to
-- p_dest_chain_key (ccip_lanes: version, ramps, token pool data, fee rule),
-- for the ccip route; QT014 when the lane is not recorded (nothing is sent on
-- a lane the admin has not recorded, whatever its chains are).
CREATE OR REPLACE FUNCTION ccip_lane(p_source_chain_key text, p_dest_chain_key text) RETURNS ccip_lanes
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_row ccip_lanes;
BEGIN
    SELECT * INTO v_row FROM ccip_lanes
     WHERE source_chain_key = p_source_chain_key AND dest_chain_key = p_dest_chain_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ccip_lane: no CCIP lane from % to % is recorded', coalesce(quote_literal(p_source_chain_key), 'NULL'),
                        coalesce(quote_literal(p_dest_chain_key), 'NULL')
            USING ERRCODE = 'QT014',
                  HINT = 'The admin records a lane, its CCIP version and ramps, with upsert_ccip_lane (ccip_lanes lists those that are).';
    END IF;
    RETURN v_row;
END
$$;
