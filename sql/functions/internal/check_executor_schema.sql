-- check_executor_schema: what an executor's configuration must be, for
-- register_executor and an executor_config proposal (propose_executor_config,
-- approve_proposal, set_executor_config): the node config schema a JSON
-- object in the subset validate_node_config reads (QT002), within the
-- document limit, and its description within the text limit (QT005,
-- engine_limits). The subset, keyword by keyword, so that no plan checked
-- against the schema later fails on the schema itself:
--   "properties"            an object of objects, one per config key
--   "required"              an array of strings
--   "additionalProperties"  true or false
--   per property: "type"    one of string, number, integer, boolean, object,
--                           array, or an array of them
--                 "enum"    an array
--                 "pattern" a string that is a valid regular expression
--                 "minLength", "maxLength"  whole numbers, not negative
--                 "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"
--                           numbers (what a config's number is compared with)
-- Raises, and nothing changes. Internal.
CREATE OR REPLACE FUNCTION check_executor_schema(
    p_call         text,
    p_executor_key text,
    p_schema       jsonb,
    p_description  text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_key     text;
    v_prop    jsonb;
    v_problem text;
BEGIN
    PERFORM check_limits(p_call, p_json => ARRAY[p_schema], p_text => ARRAY[p_description]);
    IF p_schema IS NULL OR jsonb_typeof(p_schema) <> 'object'
       OR (p_schema ? 'properties' AND jsonb_typeof(p_schema -> 'properties') <> 'object')
       OR (p_schema ? 'required' AND jsonb_typeof(p_schema -> 'required') <> 'array') THEN
        RAISE EXCEPTION '%: node config schema for % must be an object with "properties" (object) and "required" (array)',
                        p_call, p_executor_key
            USING ERRCODE = 'QT002';
    END IF;

    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_schema -> 'required') r WHERE jsonb_typeof(r) <> 'string') THEN
        v_problem := '"required" must list key names (strings)';
    ELSIF p_schema ? 'additionalProperties' AND jsonb_typeof(p_schema -> 'additionalProperties') <> 'boolean' THEN
        v_problem := '"additionalProperties" must be true or false';
    END IF;
    FOR v_key, v_prop IN SELECT key, value FROM jsonb_each(p_schema -> 'properties') LOOP
        EXIT WHEN v_problem IS NOT NULL;
        v_problem := CASE
            WHEN jsonb_typeof(v_prop) <> 'object' THEN 'must be an object'
            WHEN v_prop ? 'type' AND NOT (
                     (jsonb_typeof(v_prop -> 'type') = 'string'
                      AND v_prop ->> 'type' IN ('string', 'number', 'integer', 'boolean', 'object', 'array'))
                  OR (jsonb_typeof(v_prop -> 'type') = 'array' AND jsonb_array_length(v_prop -> 'type') > 0
                      AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v_prop -> 'type') t
                                       WHERE jsonb_typeof(t) <> 'string'
                                          OR NOT (t #>> '{}') = ANY (ARRAY['string', 'number', 'integer', 'boolean',
                                                                          'object', 'array']))))
                THEN '"type" must be string, number, integer, boolean, object or array, or a list of them'
            WHEN v_prop ? 'enum' AND jsonb_typeof(v_prop -> 'enum') <> 'array' THEN '"enum" must be an array'
            WHEN v_prop ? 'pattern' AND jsonb_typeof(v_prop -> 'pattern') <> 'string' THEN '"pattern" must be a string'
            WHEN EXISTS (SELECT 1 FROM unnest(ARRAY['minLength', 'maxLength']) k
                          WHERE v_prop ? k AND CASE WHEN jsonb_typeof(v_prop -> k) <> 'number' THEN true
                                                    ELSE (v_prop ->> k)::numeric < 0
                                                      OR (v_prop ->> k)::numeric <> trunc((v_prop ->> k)::numeric)
                                               END)
                THEN '"minLength" and "maxLength" must be whole numbers, not negative'
            WHEN EXISTS (SELECT 1 FROM unnest(ARRAY['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum']) k
                          WHERE v_prop ? k AND jsonb_typeof(v_prop -> k) <> 'number')
                THEN '"minimum", "maximum", "exclusiveMinimum" and "exclusiveMaximum" must be numbers'
        END;
        IF v_problem IS NULL AND v_prop ? 'pattern' THEN
            BEGIN
                PERFORM '' ~ (v_prop ->> 'pattern');
            EXCEPTION WHEN invalid_regular_expression THEN
                v_problem := format('"pattern" is not a valid regular expression: %s', SQLERRM);
            END;
        END IF;
        IF v_problem IS NOT NULL THEN
            v_problem := format('property "%s": %s', left(v_key, 64), v_problem);
        END IF;
    END LOOP;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%: node config schema for %: %', p_call, p_executor_key, v_problem USING ERRCODE = 'QT002',
            HINT = 'The schema is the JSON Schema subset check_executor_schema describes; plans are checked against it.';
    END IF;
END
$$;
