-- check_registry_name: the check of a name an admin step writes into the chain
-- registry (a chain's or a venue's key, a token's symbol, a venue's coin, its
-- name for a chain, a protocol, a venue's kind): QT002 p_problem, then the
-- name as given (at most 80 characters of it, or NULL), HINT p_hint, when
-- p_name is NULL or does not match p_pattern. The one refusal of the
-- registry's names. Internal; reads nothing.
CREATE OR REPLACE FUNCTION check_registry_name(p_problem text, p_name text, p_pattern text, p_hint text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ p_pattern THEN
        RAISE EXCEPTION '%, got %', p_problem, coalesce(quote_literal(left(p_name, 80)), 'NULL')
            USING ERRCODE = 'QT002', HINT = p_hint;
    END IF;
END
$$;
