-- register_template: adds or replaces a named plan template. Placeholders
-- {"$param": "name"} are filled by create_movement from its params.
-- Internal: the apply step of an approved template proposal (approve_proposal),
-- and a deploy step for the owner (the admin login), who may call it directly.
-- Operators change templates through propose_template and a second operator's
-- approve_proposal. Checked by check_template (the plan as create_movement
-- checks one: QT001/QT005; a bad name: QT002). Audited.
CREATE OR REPLACE FUNCTION register_template(p_template_name text, p_plan jsonb, p_description text DEFAULT '')
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM check_template('register_template', p_template_name, p_plan, p_description);
    INSERT INTO movement_templates (template_name, plan, description, created_at)
    VALUES (p_template_name, p_plan, coalesce(p_description, ''), clock())
    ON CONFLICT (template_name) DO UPDATE SET plan = excluded.plan, description = excluded.description;
    PERFORM write_audit(ARRAY[(session_user, 'template', p_template_name, NULL, 'registered', NULL, NULL,
                               jsonb_build_object('plan', p_plan))::qtg.audit_event]);
END
$$;
