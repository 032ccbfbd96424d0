-- claim_hash: what a node stores of its claim's secret, and what a completion's
-- secret is compared by: its SHA-256 (core sha256()). Internal. NULL for what
-- cannot be a secret (NULL, or not the 64 characters claim_secret makes), so
-- the guard refuses it as malformed without hashing a huge text.
CREATE OR REPLACE FUNCTION claim_hash(p_secret text) RETURNS bytea
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT CASE WHEN octet_length(p_secret) = 64 THEN sha256(convert_to(p_secret, 'UTF8')) END
$$;
