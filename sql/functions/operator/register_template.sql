-- register_template: adds or replaces a named plan template. Placeholders
-- {"$param": "name"} are filled by create_movement from its params.
CREATE OR REPLACE FUNCTION register_template(p_template_name text, p_plan jsonb, p_description text DEFAULT '')
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_template_name IS NULL OR p_template_name !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'template name must be lower-case letters, digits, _ . or -, got %', coalesce(p_template_name, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_limits('register_template', p_json => ARRAY[p_plan], p_text => ARRAY[p_description]);
    -- IS DISTINCT FROM: a plan without "nodes" gives NULL, which must not pass
    IF jsonb_typeof(p_plan) IS DISTINCT FROM 'object' OR jsonb_typeof(p_plan -> 'nodes') IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'template % must be an object with a "nodes" array', p_template_name USING ERRCODE = 'QT001';
    END IF;
    INSERT INTO movement_templates (template_name, plan, description, created_at)
    VALUES (p_template_name, p_plan, coalesce(p_description, ''), clock())
    ON CONFLICT (template_name) DO UPDATE SET plan = excluded.plan, description = excluded.description;
    PERFORM write_audit(ARRAY[(session_user, 'template', p_template_name, NULL, 'registered', NULL, NULL,
                               jsonb_build_object('plan', p_plan))::qtg.audit_event]);
END
$$;
