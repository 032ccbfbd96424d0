-- check_proposal: the bounds a configuration proposal must keep, checked when
-- it is made (propose_*) and again when it is approved (approve_proposal), so
-- that a bound tightened in between holds. Raises, and nothing changes.
--
--   lane_baseline    check_lane_settings with every setting and
--                    engine_limits.min_poll_seconds as the floor: a lane name
--                    of 1 to 200 characters (QT002); every setting a finite
--                    number within its bound (QT005, the message states the
--                    bound), e.g. a poll interval or wait of at least 1 s, a
--                    baseline of at most a day
--   template         check_template: the plan as create_movement checks one
--                    (QT001), its size (QT005), the name (QT002)
--   executor_config  the executor registered (QT012), check_executor_schema
--                    (QT002/QT005)
--   callback_target  check_callback_target (QT002)
--   registry         a registry subject (registry_entry_value, QT002) whose
--                    entry exists, and only its fields, each of the JSON type
--                    it has (QT002); the values as its upsert checks them,
--                    tried and undone (its refusal: QT002, QT005, QT014...)
-- Internal.
CREATE OR REPLACE FUNCTION check_proposal(
    p_call    text,
    p_kind    qtg.proposal_kind,
    p_subject text,
    p_value   jsonb
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_limits engine_limits;
    v_entry  jsonb;
    v_fields text;
BEGIN
    SELECT * INTO STRICT v_limits FROM engine_limits;
    CASE p_kind
        WHEN 'lane_baseline' THEN
            PERFORM check_lane_settings(p_call, p_subject, p_value, v_limits.min_poll_seconds);
        WHEN 'template' THEN
            PERFORM check_template(p_call, p_subject, p_value -> 'plan', p_value ->> 'description');
        WHEN 'executor_config' THEN
            IF NOT EXISTS (SELECT 1 FROM executors WHERE executor_key = p_subject) THEN
                RAISE EXCEPTION '%: executor % is not registered', p_call, coalesce(p_subject, 'NULL') USING ERRCODE = 'QT012',
                    HINT = 'SELECT executor_key FROM executors lists the registered executors; registering one is an admin step.';
            END IF;
            PERFORM check_executor_schema(p_call, p_subject, p_value -> 'node_config_schema', p_value ->> 'description');
        WHEN 'callback_target' THEN
            PERFORM check_callback_target(p_call, p_subject, p_value ->> 'url', p_value ->> 'secret_ref',
                                          (p_value -> 'allow_private')::boolean, (p_value -> 'enabled')::boolean);
        WHEN 'registry' THEN
            v_entry := registry_entry_value(p_subject);
            IF v_entry IS NULL THEN
                RAISE EXCEPTION '%: registry entry % does not exist', p_call, left(p_subject, 200)
                    USING ERRCODE = 'QT002', HINT = 'A new registry entry is registered by its upsert, not proposed.';
            END IF;
            SELECT string_agg(left(e.key, 64), ', ' ORDER BY e.key) INTO v_fields
              FROM jsonb_each(p_value) e
             WHERE NOT v_entry ? e.key
                OR (jsonb_typeof(e.value) NOT IN (jsonb_typeof(v_entry -> e.key), 'null')
                    AND jsonb_typeof(v_entry -> e.key) <> 'null');
            IF v_fields IS NOT NULL THEN
                RAISE EXCEPTION '%: registry entry % has no field %, or not of that JSON type', p_call,
                                left(p_subject, 200), v_fields
                    USING ERRCODE = 'QT002', HINT = 'Change the fields the entry has (registry_entry_value), each as it is typed there.';
            END IF;
            -- the entry's upsert tried with the whole value, then undone: a value
            -- it refuses is refused now, not when a second login approves it
            BEGIN
                PERFORM apply_registry_entry(p_subject, p_value);
                RAISE EXCEPTION USING ERRCODE = 'QT099';
            EXCEPTION WHEN SQLSTATE 'QT099' THEN
                NULL;  -- tried, and undone with the subtransaction
            END;
    END CASE;
END
$$;
