-- audit_row_hash: the SHA-256 link of an audit_log row: sha256(p_prev_hash ||
-- UTF-8 of audit_canonical(row)). The promoter writes it and
-- verify_audit_chain recomputes it: one definition for both. An export
-- (`qtg audit export`) carries each row's canonical text and both hashes, so
-- a copy off the host is checked with nothing but SHA-256. Inlined where it is
-- called, as audit_canonical is: the promoter and the verifier pay no
-- function call per row.
CREATE OR REPLACE FUNCTION audit_row_hash(p_prev_hash bytea, p_row audit_log) RETURNS bytea
LANGUAGE sql STABLE
AS $$
    SELECT sha256(p_prev_hash || convert_to(audit_canonical(p_row), 'UTF8'));
$$;
