-- set_executor_config: sets a registered executor's configuration, its node
-- config schema and description (never has_side_effect, which only
-- registration sets). Checked by check_executor_schema (QT002/QT005); an
-- unknown executor is QT012. Plans already compiled keep the configs they
-- were validated with; new plans and templates are validated against the new
-- schema. Internal: the apply step of an approved executor_config proposal
-- (approve_proposal), and a deploy step for the owner. Audited.
CREATE OR REPLACE FUNCTION set_executor_config(
    p_executor_key       text,
    p_node_config_schema jsonb,
    p_description        text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock();
BEGIN
    PERFORM check_executor_schema('set_executor_config', p_executor_key, p_node_config_schema, p_description);
    UPDATE executors
       SET node_config_schema = p_node_config_schema,
           description        = coalesce(p_description, ''),
           updated_at         = v_now
     WHERE executor_key = p_executor_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'executor % is not registered', coalesce(p_executor_key, 'NULL') USING ERRCODE = 'QT012',
            HINT = 'SELECT executor_key FROM executors lists the registered executors; registering one is an admin step.';
    END IF;
    PERFORM write_audit(ARRAY[(session_user, 'executor', p_executor_key, NULL, 'config_set', NULL, NULL,
                               jsonb_build_object('schema', p_node_config_schema,
                                                  'description', coalesce(p_description, '')))::qtg.audit_event]);
END
$$;
