-- depends: 0050_baseline_confirmation
--
-- psql as a login lands in its network: each network's runner, operator and
-- reader group, and every login made before as a member of one, gets the
-- default search_path "<network>, qtg" (a login copies its group's defaults
-- when `qtg ... add` makes it), so `SELECT approve_movement(21)` finds the
-- network's procedure without a SET first. Runners' pools pin it anyway.

DO $$
DECLARE
    v_net  qtg_admin.networks;
    v_role text;
BEGIN
    FOR v_net IN SELECT * FROM qtg_admin.networks LOOP
        FOR v_role IN
            SELECT g.name
              FROM (VALUES (v_net.runner_role), (v_net.operator_role),
                           (format('qtg_%s_reader', v_net.network_name))) g(name)
            UNION ALL
            SELECT m.rolname::text
              FROM pg_auth_members a
              JOIN pg_roles g ON g.oid = a.roleid
              JOIN pg_roles m ON m.oid = a.member
             WHERE g.rolname IN (v_net.runner_role, v_net.operator_role,
                                 format('qtg_%s_reader', v_net.network_name))
               AND m.rolcanlogin
        LOOP
            EXECUTE format('ALTER ROLE %I SET search_path = %I, qtg', v_role, v_net.network_name);
        END LOOP;
    END LOOP;
END
$$;
