-- jsonb_pick: the keys of a JSON object that are named, and no others (a named
-- key the object lacks is left out). Internal.
CREATE OR REPLACE FUNCTION jsonb_pick(p_object jsonb, p_keys text[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}'::jsonb)
      FROM jsonb_each(p_object) e
     WHERE e.key = ANY (p_keys)
$$;
