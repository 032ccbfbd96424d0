-- qtg.substitute_params(value, params): replaces every {"$param": "name"} in a
-- template plan with params->name. Raises QT003 when a named param is missing.
CREATE OR REPLACE FUNCTION substitute_params(p_value jsonb, p_params jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_name text;
BEGIN
    CASE jsonb_typeof(p_value)
        WHEN 'object' THEN
            IF p_value ? '$param' AND (SELECT count(*) FROM jsonb_object_keys(p_value)) = 1 THEN
                v_name := p_value ->> '$param';
                IF p_params IS NULL OR NOT p_params ? v_name THEN
                    RAISE EXCEPTION 'template parameter "%" is missing', v_name
                        USING ERRCODE = 'QT003',
                              HINT = 'Pass it in the params object, e.g. {"' || v_name || '": ...}.';
                END IF;
                RETURN p_params -> v_name;
            END IF;
            RETURN coalesce(
                (SELECT jsonb_object_agg(key, substitute_params(value, p_params)) FROM jsonb_each(p_value)),
                '{}'::jsonb);
        WHEN 'array' THEN
            RETURN coalesce(
                (SELECT jsonb_agg(substitute_params(value, p_params) ORDER BY ordinality)
                   FROM jsonb_array_elements(p_value) WITH ORDINALITY),
                '[]'::jsonb);
        ELSE
            RETURN p_value;
    END CASE;
END
$$;
