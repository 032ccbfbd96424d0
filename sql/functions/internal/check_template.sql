-- check_template: what a template must be, for register_template and a
-- template proposal (propose_template, approve_proposal): a name of
-- lower-case letters, digits, _ . or - (QT002), a description within the
-- text limit (QT005) and a plan that check_plan passes as a template
-- (QT001/QT005). Raises, and nothing changes. Internal.
CREATE OR REPLACE FUNCTION check_template(p_call text, p_template_name text, p_plan jsonb, p_description text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_template_name IS NULL OR p_template_name !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION '%: template name must be lower-case letters, digits, _ . or -, got %',
                        p_call, coalesce(p_template_name, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_limits(p_call, p_text => ARRAY[p_description]);
    PERFORM check_plan(p_call, p_plan, p_template => true);
END
$$;
