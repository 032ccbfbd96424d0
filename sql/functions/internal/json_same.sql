-- json_same: whether two JSON scalars say the same thing, as the engine's
-- documents write them: numbers compared as numbers whether written as a JSON
-- number or a decimal string ("1000000" and 1000000, 2 and 2.0: a uint256 is
-- written as a string, a block time as a number), anything else as its text;
-- JSON null only as JSON null. Only plain decimals count as numbers (no
-- exponent: "1e999999" is text), so the cast is bounded. A missing value (SQL
-- NULL), an object or an array is never the same as anything. Internal.
CREATE OR REPLACE FUNCTION json_same(p_a jsonb, p_b jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
               WHEN p_a IS NULL OR p_b IS NULL THEN false
               WHEN jsonb_typeof(p_a) IN ('object', 'array') OR jsonb_typeof(p_b) IN ('object', 'array') THEN false
               WHEN jsonb_typeof(p_a) = 'null' OR jsonb_typeof(p_b) = 'null' THEN jsonb_typeof(p_a) = jsonb_typeof(p_b)
               WHEN (p_a #>> '{}') ~ '^-?[0-9]{1,80}(\.[0-9]{1,40})?$'
                    AND (p_b #>> '{}') ~ '^-?[0-9]{1,80}(\.[0-9]{1,40})?$'
                   THEN (p_a #>> '{}')::numeric = (p_b #>> '{}')::numeric
               ELSE (p_a #>> '{}') = (p_b #>> '{}')
           END
$$;
