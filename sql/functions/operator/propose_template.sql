-- propose_template: (none) -> PROPOSED; a named plan template, new or
-- replacing one, to apply when a second operator approves (approve_proposal).
-- The plan is checked as create_movement checks one (check_template,
-- check_plan: an unknown executor, a cycle, a config that fails its
-- executor's schema are QT001; a placeholder {"$param": name} stands for a
-- config value), its size and the description's against engine_limits
-- (QT005), the name (QT002). The proposer is the session's login. Returns
-- the proposal; a newer proposal for the name supersedes an open one.
CREATE OR REPLACE FUNCTION propose_template(p_template_name text, p_plan jsonb, p_description text DEFAULT '')
RETURNS TABLE (proposal_id bigint, proposal_state qtg.proposal_state, expires_at timestamptz, supersedes bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    SELECT * FROM open_proposal('propose_template', 'template', p_template_name,
                                jsonb_build_object('plan', p_plan, 'description', coalesce(p_description, '')));
END
$$;
