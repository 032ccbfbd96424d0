-- config_value: the value a configuration subject has now, as a proposal
-- records it (before_value) and as it is compared when approved; NULL when
-- the lane or template does not exist (an executor that does not exist is
-- NULL too; proposals refuse it). Locks the subject's row (FOR UPDATE), so
-- that nothing changes it between the comparison and the apply.
--   lane_baseline    the lane's row of lane_baselines but its name and
--                    updated_at: the ten pacing and retry settings
--   template         {"plan", "description"} of movement_templates
--   executor_config  {"node_config_schema", "description"} of executors
--   callback_target  {"url", "secret_ref", "allow_private", "enabled"} of callback_targets
--   registry         the registry entry's values (registry_entry_value)
-- Internal.
CREATE OR REPLACE FUNCTION config_value(p_kind qtg.proposal_kind, p_subject text) RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_value jsonb;
BEGIN
    CASE p_kind
        WHEN 'lane_baseline' THEN
            SELECT to_jsonb(lb) - 'lane' - 'updated_at' INTO v_value
              FROM lane_baselines lb WHERE lb.lane = p_subject FOR UPDATE;
        WHEN 'template' THEN
            SELECT jsonb_build_object('plan', t.plan, 'description', t.description) INTO v_value
              FROM movement_templates t WHERE t.template_name = p_subject FOR UPDATE;
        WHEN 'executor_config' THEN
            SELECT jsonb_build_object('node_config_schema', e.node_config_schema, 'description', e.description)
              INTO v_value
              FROM executors e WHERE e.executor_key = p_subject FOR UPDATE;
        WHEN 'callback_target' THEN
            SELECT jsonb_build_object('url', t.url, 'secret_ref', t.secret_ref,
                                      'allow_private', t.allow_private, 'enabled', t.enabled)
              INTO v_value
              FROM callback_targets t WHERE t.target_name = p_subject FOR UPDATE;
        WHEN 'registry' THEN
            v_value := registry_entry_value(p_subject);
    END CASE;
    RETURN v_value;
END
$$;
