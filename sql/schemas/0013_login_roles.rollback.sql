-- The group roles stay NOLOGIN, as 0001 keeps the roles and 0007 their
-- limits: roles are cluster-wide, and other databases of the same server may
-- rely on nobody logging in as a group. An admin who runs an older release
-- against this server gives them LOGIN back by hand (ALTER ROLE ... LOGIN).
-- The logins made by `qtg operator|runner add` stay too; the admin removes
-- them with `qtg operator|runner remove`.

ALTER POLICY side_effects_own_network ON qtg_sim.side_effects
    USING (current_user = 'qtg_' || network || '_runner')
    WITH CHECK (current_user = 'qtg_' || network || '_runner');
