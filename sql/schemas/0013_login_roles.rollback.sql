-- The group roles log in again, as before 0013 (the logins made by `qtg
-- operator|runner add` stay: they are cluster-wide, and the admin removes
-- them with `qtg operator|runner remove`).
DO $$
DECLARE
    v_net qtg_admin.networks;
BEGIN
    FOR v_net IN SELECT * FROM qtg_admin.networks LOOP
        EXECUTE format('ALTER ROLE %I LOGIN', v_net.runner_role);
        EXECUTE format('ALTER ROLE %I LOGIN', v_net.operator_role);
    END LOOP;
END
$$;

ALTER POLICY side_effects_own_network ON qtg_sim.side_effects
    USING (current_user = 'qtg_' || network || '_runner')
    WITH CHECK (current_user = 'qtg_' || network || '_runner');
