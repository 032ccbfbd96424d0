-- verify_audit_chain: recomputes the audit log's hash chain and says where it
-- first breaks. Every row must follow the one before (seq without a gap), hold
-- the row before's hash as its prev_hash (32 zero bytes for the first), and
-- hash to its row_hash (audit_row_hash over its columns); the chain's head
-- (audit_chain_head) must be the last row. p_expected_seq / p_expected_hash
-- (hex, with or without \x or 0x): a head exported earlier off the host (`qtg
-- audit export`); the row at that seq must still have that hash, which catches
-- an owner who edited a row and rewrote every hash after it.
-- One row: ok, how many rows were checked, the first broken seq (NULL when
-- ok), what is wrong there, and the head (seq and hash, hex). Reads only.
CREATE OR REPLACE FUNCTION verify_audit_chain(
    p_expected_seq  bigint DEFAULT NULL,
    p_expected_hash text DEFAULT NULL
) RETURNS TABLE (ok boolean, checked bigint, first_bad_seq bigint, problem text, head_seq bigint, head_hash text)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_zero     bytea := decode(repeat('00', 32), 'hex');
    v_expected bytea;
    v_checked  bigint;
    v_bad      bigint;
    v_problem  text;
    v_head     audit_chain_head;
    v_last     audit_log;
BEGIN
    IF (p_expected_seq IS NULL) <> (p_expected_hash IS NULL) THEN
        RAISE EXCEPTION 'verify_audit_chain: give the expected seq and hash together, or neither'
            USING ERRCODE = 'QT002', HINT = 'Both come from the last line of an earlier `qtg audit export`.';
    END IF;
    IF p_expected_hash IS NOT NULL THEN
        IF p_expected_hash !~* '^(\\x|0x)?[0-9a-f]{64}$' THEN
            RAISE EXCEPTION 'verify_audit_chain: the expected hash is 64 hexadecimal digits, got %',
                            quote_literal(left(p_expected_hash, 80))
                USING ERRCODE = 'QT002', HINT = 'Give the row_hash of an exported row.';
        END IF;
        v_expected := decode(right(p_expected_hash, 64), 'hex');
    END IF;

    WITH chain AS (
        SELECT l.seq, l.prev_hash, l.row_hash, audit_row_hash(l.prev_hash, l) AS computed,
               lag(l.seq) OVER w AS before_seq, lag(l.row_hash) OVER w AS before_hash
          FROM audit_log l
        WINDOW w AS (ORDER BY l.seq)
    ), judged AS (
        SELECT c.seq,
               CASE
                   WHEN c.seq <> coalesce(c.before_seq, 0) + 1 THEN
                       format('rows %s to %s are missing', coalesce(c.before_seq, 0) + 1, c.seq - 1)
                   WHEN c.prev_hash <> coalesce(c.before_hash, v_zero) THEN
                       'its prev_hash is not the hash of the row before (a row was inserted, removed or rewritten)'
                   WHEN c.computed <> c.row_hash THEN
                       'its columns do not hash to its row_hash (the row was changed)'
               END AS problem
          FROM chain c
    )
    SELECT (SELECT count(*) FROM audit_log), j.seq, j.problem
      INTO v_checked, v_bad, v_problem
      FROM judged j
     WHERE j.problem IS NOT NULL
     ORDER BY j.seq
     LIMIT 1;
    IF v_checked IS NULL THEN
        SELECT count(*) INTO v_checked FROM audit_log;
    END IF;

    SELECT * INTO v_head FROM audit_chain_head;
    SELECT * INTO v_last FROM audit_log ORDER BY seq DESC LIMIT 1;
    IF v_bad IS NULL AND (v_head.seq <> coalesce(v_last.seq, 0)
                          OR v_head.row_hash <> coalesce(v_last.row_hash, v_zero)) THEN
        v_bad := coalesce(v_last.seq, 0) + 1;
        v_problem := format('the chain''s head is row %s, the log ends at row %s (rows were removed from the end)',
                            v_head.seq, coalesce(v_last.seq, 0));
    END IF;
    IF v_bad IS NULL AND p_expected_seq IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM audit_log WHERE seq = p_expected_seq AND row_hash = v_expected) THEN
        v_bad := p_expected_seq;
        v_problem := CASE WHEN EXISTS (SELECT 1 FROM audit_log WHERE seq = p_expected_seq)
                          THEN 'its hash is not the one exported earlier (the chain was rewritten from here or before)'
                          ELSE 'the row exported earlier is gone' END;
    END IF;
    RETURN QUERY SELECT v_bad IS NULL, v_checked, v_bad, v_problem, v_head.seq, encode(v_head.row_hash, 'hex');
END
$$;
