-- abi_uint: the 32-byte ABI word at byte offset p_at (0-based) of p_data as a
-- whole number (big endian); NULL when the data ends before the word.
-- Internal: reading the offsets and lengths of calldata (cctp_received_message).
CREATE OR REPLACE FUNCTION abi_uint(p_data bytea, p_at integer) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_n numeric := 0;
    i   integer;
BEGIN
    IF p_at < 0 OR length(p_data) < p_at + 32 THEN
        RETURN NULL;
    END IF;
    FOR i IN p_at .. p_at + 31 LOOP
        v_n := v_n * 256 + get_byte(p_data, i);
    END LOOP;
    RETURN v_n;
END
$$;
