-- qtg.validate_node_config(schema, config): checks a node_config against its
-- executor's schema and returns the first problem as text, or NULL when valid.
--
-- The schema is the JSON Schema subset an executor registers:
--   {"type": "object",
--    "required": ["lane", "amount"],
--    "properties": {"lane": {"type": "string", "enum": [...], "pattern": "...", "minLength": 1, "maxLength": 64},
--                   "amount": {"type": "number", "exclusiveMinimum": 0, "minimum": 0, "maximum": 10,
--                              "exclusiveMaximum": 11}},
--    "additionalProperties": false}
-- Types: string, number, integer, boolean, object, array (a list of types is accepted).
-- Every number in the config, at any depth, must be one an executor can hold
-- as a double: at most 1.7976931348623157e308 in magnitude, and not so close
-- to zero that it reads as 0 (under 2.2250738585072014e-308 in magnitude,
-- and not 0). JSON has no NaN or Infinity; a number beyond a double is what
-- becomes one in the runner. (check_executor_schema checks the schema's own
-- keywords when it is registered.)
CREATE OR REPLACE FUNCTION validate_node_config(p_schema jsonb, p_config jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_key      text;
    v_prop     jsonb;
    v_value    jsonb;
    v_types    jsonb;
    v_actual   text;
    v_number   numeric;
BEGIN
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        RETURN 'node config must be a JSON object';
    END IF;
    SELECT n::text INTO v_actual
      FROM jsonb_path_query(p_config, 'strict $.**') AS n
     WHERE jsonb_typeof(n) = 'number'
       AND (abs(n::text::numeric) > 1.7976931348623157e308
            OR (n::text::numeric <> 0 AND abs(n::text::numeric) < 2.2250738585072014e-308))
     LIMIT 1;
    IF FOUND THEN
        RETURN format('the number %s is not a finite double (beyond 1.8e308 in magnitude, or too close to zero)',
                      left(v_actual, 30));
    END IF;

    FOR v_key IN SELECT jsonb_array_elements_text(coalesce(p_schema -> 'required', '[]')) LOOP
        IF NOT p_config ? v_key THEN
            RETURN format('missing required key "%s"', v_key);
        END IF;
    END LOOP;

    FOR v_key, v_value IN SELECT key, value FROM jsonb_each(p_config) LOOP
        v_prop := p_schema -> 'properties' -> v_key;
        IF v_prop IS NULL THEN
            IF coalesce((p_schema ->> 'additionalProperties')::boolean, true) THEN
                CONTINUE;
            END IF;
            RETURN format('unknown key "%s"', v_key);
        END IF;

        v_actual := jsonb_typeof(v_value);
        IF v_actual = 'number' AND v_value::text::numeric = trunc(v_value::text::numeric) THEN
            v_actual := 'integer';
        END IF;
        v_types := CASE jsonb_typeof(v_prop -> 'type')
                       WHEN 'array' THEN v_prop -> 'type'
                       WHEN 'string' THEN jsonb_build_array(v_prop -> 'type')
                       ELSE NULL
                   END;
        IF v_types IS NOT NULL
           AND NOT v_types ? v_actual
           AND NOT (v_actual = 'integer' AND v_types ? 'number') THEN
            RETURN format('key "%s" must be of type %s, got %s', v_key, v_types #>> '{}', jsonb_typeof(v_value));
        END IF;

        IF v_prop ? 'enum' AND NOT (v_prop -> 'enum') @> jsonb_build_array(v_value) THEN
            RETURN format('key "%s" must be one of %s', v_key, v_prop -> 'enum');
        END IF;

        IF jsonb_typeof(v_value) = 'string' THEN
            IF v_prop ? 'pattern' AND NOT (v_value #>> '{}') ~ (v_prop ->> 'pattern') THEN
                RETURN format('key "%s" does not match pattern %s', v_key, v_prop ->> 'pattern');
            END IF;
            IF v_prop ? 'minLength' AND length(v_value #>> '{}') < (v_prop ->> 'minLength')::numeric THEN
                RETURN format('key "%s" is shorter than %s characters', v_key, v_prop ->> 'minLength');
            END IF;
            IF v_prop ? 'maxLength' AND length(v_value #>> '{}') > (v_prop ->> 'maxLength')::numeric THEN
                RETURN format('key "%s" is longer than %s characters', v_key, v_prop ->> 'maxLength');
            END IF;
        END IF;

        IF jsonb_typeof(v_value) = 'number' THEN
            v_number := (v_value #>> '{}')::numeric;
            IF v_prop ? 'exclusiveMinimum' AND v_number <= (v_prop ->> 'exclusiveMinimum')::numeric THEN
                RETURN format('key "%s" must be greater than %s', v_key, v_prop ->> 'exclusiveMinimum');
            END IF;
            IF v_prop ? 'minimum' AND v_number < (v_prop ->> 'minimum')::numeric THEN
                RETURN format('key "%s" must be at least %s', v_key, v_prop ->> 'minimum');
            END IF;
            IF v_prop ? 'maximum' AND v_number > (v_prop ->> 'maximum')::numeric THEN
                RETURN format('key "%s" must be at most %s', v_key, v_prop ->> 'maximum');
            END IF;
            IF v_prop ? 'exclusiveMaximum' AND v_number >= (v_prop ->> 'exclusiveMaximum')::numeric THEN
                RETURN format('key "%s" must be less than %s', v_key, v_prop ->> 'exclusiveMaximum');
            END IF;
        END IF;
    END LOOP;

    RETURN NULL;
END
$$;
