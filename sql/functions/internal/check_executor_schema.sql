-- check_executor_schema: what an executor's configuration must be, for
-- register_executor and an executor_config proposal (propose_executor_config,
-- approve_proposal, set_executor_config): the node config schema a JSON
-- object whose "properties" is an object and "required" an array (QT002),
-- within the document limit, and its description within the text limit
-- (QT005, engine_limits). Raises, and nothing changes. Internal.
CREATE OR REPLACE FUNCTION check_executor_schema(
    p_call         text,
    p_executor_key text,
    p_schema       jsonb,
    p_description  text
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM check_limits(p_call, p_json => ARRAY[p_schema], p_text => ARRAY[p_description]);
    IF p_schema IS NULL OR jsonb_typeof(p_schema) <> 'object'
       OR (p_schema ? 'properties' AND jsonb_typeof(p_schema -> 'properties') <> 'object')
       OR (p_schema ? 'required' AND jsonb_typeof(p_schema -> 'required') <> 'array') THEN
        RAISE EXCEPTION '%: node config schema for % must be an object with "properties" (object) and "required" (array)',
                        p_call, p_executor_key
            USING ERRCODE = 'QT002';
    END IF;
END
$$;
