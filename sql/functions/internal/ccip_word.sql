-- ccip_word: one 32-byte ABI word, a whole number from 0 to 2^256 - 1 (big
-- endian). Internal, for ccip_send_tx_problem's expected calldata.
CREATE OR REPLACE FUNCTION ccip_word(p_value numeric) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_hex text := '';
    v_n   numeric := p_value;
BEGIN
    IF v_n IS NULL OR v_n < 0 OR v_n <> trunc(v_n) OR v_n >= 2::numeric ^ 256 THEN
        RAISE EXCEPTION 'ccip_word: % is not a uint256', coalesce(p_value::text, 'NULL') USING ERRCODE = 'QT002';
    END IF;
    WHILE v_n > 0 LOOP
        v_hex := substr('0123456789abcdef', (v_n % 16)::integer + 1, 1) || v_hex;
        v_n := div(v_n, 16);  -- not v_n / 16: numeric division rounds a 19-digit quotient
    END LOOP;
    RETURN decode(lpad(v_hex, 64, '0'), 'hex');
END
$$;
