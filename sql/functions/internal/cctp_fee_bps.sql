-- cctp_fee_bps: the most fee a CCTP v2 leg allows, in basis points of its
-- amount, from the node's max_fee_bps (p_bps; 10 when not given): the one
-- rule of cctp_burn_route (the burn's maxFee) and cctp_mint_route (the fee
-- the mint accepts), which must agree. QT002 naming p_what, HINT p_hint (the
-- leg's own words), unless a whole number from 0 to 100. Internal; reads
-- nothing.
CREATE OR REPLACE FUNCTION cctp_fee_bps(p_what text, p_bps text, p_hint text) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_bps numeric := coalesce(p_bps::numeric, 10);
BEGIN
    IF v_bps < 0 OR v_bps > 100 OR v_bps <> trunc(v_bps) THEN
        RAISE EXCEPTION '%: max_fee_bps % is not a whole number of basis points from 0 to 100', p_what, v_bps
            USING ERRCODE = 'QT002', HINT = p_hint;
    END IF;
    RETURN v_bps;
END
$$;
