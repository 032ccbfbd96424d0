-- evm_decode_raw: what a signed EIP-1559 (type 2) raw transaction (0x hex)
-- does, read from its RLP in SQL so that a procedure can check the bytes a
-- runner records against what it claims they are (a fill is a zero-value
-- self-transfer at its nonce; a replacement keeps its intent's nonce,
-- recipient, value and data). The sender is not recovered here (no ecrecover
-- in SQL): the runner signs with the account's signer. QT002 (naming p_what)
-- for anything that is not a well-formed type-2 transaction.
CREATE OR REPLACE FUNCTION evm_decode_raw(p_what text, p_raw text)
RETURNS TABLE (chain_id numeric, nonce numeric, max_priority_fee_per_gas numeric, max_fee_per_gas numeric,
               gas numeric, to_address text, value numeric, data bytea)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_raw    bytea;
    v_pos    integer;   -- 0-based offset of the next item
    v_end    integer;   -- end of the list's payload
    v_b      integer;
    v_len    integer;
    v_lenlen integer;
    v_items  bytea[] := '{}';
    v_num    numeric[] := '{}';
    v_n      numeric;
    i        integer;
BEGIN
    IF p_raw IS NULL OR p_raw !~ '^0x([0-9a-f]{2})+$' THEN
        RAISE EXCEPTION '%: not a raw transaction (0x and lower-case hex bytes)', p_what
            USING ERRCODE = 'QT002', HINT = 'Give the signed bytes the node is sent.';
    END IF;
    v_raw := decode(substr(p_raw, 3), 'hex');
    IF get_byte(v_raw, 0) <> 2 OR length(v_raw) < 3 THEN
        RAISE EXCEPTION '%: not an EIP-1559 (type 2) transaction', p_what
            USING ERRCODE = 'QT002', HINT = 'The engine signs type-2 transactions only.';
    END IF;
    -- the list header
    v_b := get_byte(v_raw, 1);
    IF v_b BETWEEN 192 AND 247 THEN
        v_pos := 2; v_end := 2 + (v_b - 192);
    ELSIF v_b >= 248 THEN
        v_lenlen := v_b - 247; v_len := 0;
        IF v_lenlen > 3 OR length(v_raw) < 2 + v_lenlen THEN
            RAISE EXCEPTION '%: a malformed transaction (list length)', p_what USING ERRCODE = 'QT002',
                HINT = 'Give the signed bytes the node is sent.';
        END IF;
        FOR i IN 0 .. v_lenlen - 1 LOOP
            v_len := v_len * 256 + get_byte(v_raw, 2 + i);
        END LOOP;
        v_pos := 2 + v_lenlen; v_end := v_pos + v_len;
    ELSE
        RAISE EXCEPTION '%: a malformed transaction (no list)', p_what USING ERRCODE = 'QT002',
            HINT = 'Give the signed bytes the node is sent.';
    END IF;
    IF v_end <> length(v_raw) THEN
        RAISE EXCEPTION '%: a malformed transaction (its length)', p_what USING ERRCODE = 'QT002',
            HINT = 'Give the signed bytes the node is sent.';
    END IF;
    -- the items: eight strings, the access list, then v, r, s
    WHILE v_pos < v_end LOOP
        v_b := get_byte(v_raw, v_pos);
        IF v_b < 128 THEN
            v_items := v_items || substring(v_raw FROM v_pos + 1 FOR 1); v_pos := v_pos + 1;
            CONTINUE;
        ELSIF v_b <= 183 THEN
            v_len := v_b - 128; v_pos := v_pos + 1;
        ELSIF v_b <= 191 OR v_b >= 248 THEN
            v_lenlen := CASE WHEN v_b <= 191 THEN v_b - 183 ELSE v_b - 247 END; v_len := 0;
            IF v_lenlen > 3 OR v_pos + 1 + v_lenlen > v_end THEN
                RAISE EXCEPTION '%: a malformed transaction (item length)', p_what USING ERRCODE = 'QT002',
                    HINT = 'Give the signed bytes the node is sent.';
            END IF;
            FOR i IN 1 .. v_lenlen LOOP
                v_len := v_len * 256 + get_byte(v_raw, v_pos + i);
            END LOOP;
            v_pos := v_pos + 1 + v_lenlen;
        ELSE
            v_len := v_b - 192; v_pos := v_pos + 1;
        END IF;
        IF v_pos + v_len > v_end THEN
            RAISE EXCEPTION '%: a malformed transaction (an item past its end)', p_what USING ERRCODE = 'QT002',
                HINT = 'Give the signed bytes the node is sent.';
        END IF;
        v_items := v_items || substring(v_raw FROM v_pos + 1 FOR v_len);
        v_pos := v_pos + v_len;
    END LOOP;
    IF cardinality(v_items) <> 12 THEN
        RAISE EXCEPTION '%: a signed type-2 transaction has 12 fields, got %', p_what, cardinality(v_items)
            USING ERRCODE = 'QT002', HINT = 'Give the signed bytes the node is sent.';
    END IF;
    FOR i IN 1 .. 7 LOOP
        CONTINUE WHEN i = 6;
        IF length(v_items[i]) > 32 THEN
            RAISE EXCEPTION '%: a number of more than 32 bytes', p_what USING ERRCODE = 'QT002',
                HINT = 'Give the signed bytes the node is sent.';
        END IF;
        v_n := 0;
        FOR v_len IN 0 .. length(v_items[i]) - 1 LOOP
            v_n := v_n * 256 + get_byte(v_items[i], v_len);
        END LOOP;
        v_num[i] := v_n;
    END LOOP;
    IF length(v_items[6]) NOT IN (0, 20) THEN
        RAISE EXCEPTION '%: a recipient is 20 bytes', p_what USING ERRCODE = 'QT002',
            HINT = 'Give the signed bytes the node is sent.';
    END IF;
    RETURN QUERY SELECT v_num[1], v_num[2], v_num[3], v_num[4], v_num[5],
                        CASE WHEN length(v_items[6]) = 20 THEN '0x' || encode(v_items[6], 'hex') END,
                        v_num[7], v_items[8];
END
$$;
