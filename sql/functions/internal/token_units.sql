-- token_units: p_amount in p_token's base units (the amount times ten to the
-- token's decimals), the one conversion of every route function from a
-- movement's amount to what is signed or requested; QT002 naming p_what when
-- the amount is finer than the token's decimals, so that nothing is rounded
-- away. Reads nothing.
CREATE OR REPLACE FUNCTION token_units(p_what text, p_amount numeric, p_token chain_tokens) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_units numeric := p_amount * power(10::numeric, p_token.decimals);
BEGIN
    IF v_units <> trunc(v_units) THEN
        RAISE EXCEPTION '%: % is finer than % has decimals (%)', p_what, p_amount, p_token.symbol, p_token.decimals
            USING ERRCODE = 'QT002', HINT = 'Round the amount to the token''s decimals.';
    END IF;
    RETURN trunc(v_units);
END
$$;
