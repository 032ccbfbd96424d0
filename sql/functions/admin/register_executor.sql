-- register_executor: adds or updates an executor in the registry, so plans that
-- name it can be validated against its node_config schema. An admin deploy
-- step (`qtg executors register`, for the executors a build ships): the
-- folder admin/ leaves it SECURITY INVOKER with no grant, so neither a runner
-- nor an operator may call it; a runner checks at start that what it carries
-- is registered as it is (registered_executors). has_side_effect is never
-- turned off for an executor that has nodes (QT041).
CREATE OR REPLACE FUNCTION register_executor(
    p_executor_key       text,
    p_has_side_effect    boolean,
    p_node_config_schema jsonb,
    p_description        text DEFAULT ''
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_previous executors;
BEGIN
    IF p_executor_key IS NULL OR p_executor_key !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'executor key must be lower-case letters, digits and _, got %', coalesce(p_executor_key, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;
    IF p_has_side_effect IS NULL THEN
        RAISE EXCEPTION 'register_executor: say whether % has a side effect', p_executor_key USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_executor_schema('register_executor', p_executor_key, p_node_config_schema, p_description);

    SELECT * INTO v_previous FROM executors WHERE executor_key = p_executor_key FOR UPDATE;
    -- a node copies has_side_effect at creation, and recovery, expiry and
    -- retries trust it: saying an executor with nodes has none would let a
    -- prepared side effect be retried blindly
    IF v_previous.has_side_effect AND NOT p_has_side_effect
       AND EXISTS (SELECT 1 FROM movement_request_nodes WHERE executor_key = p_executor_key) THEN
        RAISE EXCEPTION 'executor % has nodes and a side effect; it cannot be registered without one', p_executor_key
            USING ERRCODE = 'QT041',
                  HINT = 'Register an executor under a new key for work without a side effect.';
    END IF;
    INSERT INTO executors (executor_key, has_side_effect, node_config_schema, description, registered_at, updated_at)
    VALUES (p_executor_key, p_has_side_effect, p_node_config_schema, coalesce(p_description, ''), v_now, v_now)
    ON CONFLICT (executor_key) DO UPDATE
       SET has_side_effect    = excluded.has_side_effect,
           node_config_schema = excluded.node_config_schema,
           description        = excluded.description,
           updated_at         = excluded.updated_at;

    IF v_previous IS NULL
       OR v_previous.has_side_effect IS DISTINCT FROM p_has_side_effect
       OR v_previous.node_config_schema IS DISTINCT FROM p_node_config_schema THEN
        PERFORM write_audit(ARRAY[(session_user, 'executor', p_executor_key, NULL,
                                   CASE WHEN v_previous IS NULL THEN 'registered' ELSE 'updated' END, NULL, NULL,
                                   jsonb_build_object('has_side_effect', p_has_side_effect,
                                                      'schema', p_node_config_schema))::qtg.audit_event]);
    END IF;
END
$$;
