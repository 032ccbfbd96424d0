-- propose_executor_config: (none) -> PROPOSED; a registered executor's node
-- config schema and description (p_description NULL keeps the current one),
-- to apply when a second operator approves (approve_proposal). Registering
-- an executor and its has_side_effect are admin steps, not configuration.
-- The executor must be registered (QT012); the schema a JSON object with
-- "properties" an object and "required" an array (QT002), within the
-- document limit (QT005). The proposer is the session's login. Returns the
-- proposal; a newer proposal for the executor supersedes an open one.
CREATE OR REPLACE FUNCTION propose_executor_config(
    p_executor_key       text,
    p_node_config_schema jsonb,
    p_description        text DEFAULT NULL
) RETURNS TABLE (proposal_id bigint, proposal_state qtg.proposal_state, expires_at timestamptz, supersedes bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    SELECT * FROM open_proposal(
        'propose_executor_config', 'executor_config', p_executor_key,
        -- a NULL description is left out, so it keeps its value; a NULL schema is
        -- kept, and refused as what it is not
        jsonb_build_object('node_config_schema', p_node_config_schema)
        || jsonb_strip_nulls(jsonb_build_object('description', p_description)));
END
$$;
