-- audit_export: the audit log's rows after p_after_seq (up to p_max, in order)
-- as an export carries them, for storage off the database host: seq, the
-- canonical text the hash is taken over (audit_canonical), prev_hash and
-- row_hash (hex). A copy is checked with SHA-256 alone: each row_hash is
-- sha256(prev_hash || the canonical text's UTF-8) and each prev_hash the row
-- before's row_hash. Reads only.
CREATE OR REPLACE FUNCTION audit_export(p_after_seq bigint DEFAULT 0, p_max integer DEFAULT 1000)
RETURNS TABLE (seq bigint, canonical text, prev_hash text, row_hash text)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    PERFORM check_args('audit_export', p_max => p_max, p_max_limit => 10000);
    IF p_after_seq IS NULL OR p_after_seq < 0 THEN
        RAISE EXCEPTION 'audit_export: p_after_seq is a row number, 0 or more, got %', coalesce(p_after_seq::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give 0 for the whole log, or the last seq of an earlier export.';
    END IF;
    RETURN QUERY
    SELECT l.seq, audit_canonical(l), encode(l.prev_hash, 'hex'), encode(l.row_hash, 'hex')
      FROM audit_log l
     WHERE l.seq > p_after_seq
     ORDER BY l.seq
     LIMIT p_max;
END
$$;
