-- depends: 0008_audit_login
--
-- qtg_<net>_reader   read-only, per network: SELECT on every table and view of
--                    its network's schema (granted again by the installer on
--                    every migrate, so new tables and re-created views are
--                    covered), nothing of another network, no procedure. For
--                    dashboards and auditors; every operator role is a member,
--                    so an operator reads what its procedures wrote. Roles are
--                    cluster-wide: created when missing, kept on rollback.

DO $$
DECLARE
    v_net    qtg_admin.networks;
    v_reader text;
BEGIN
    FOR v_net IN SELECT * FROM qtg_admin.networks LOOP
        v_reader := format('qtg_%s_reader', v_net.network_name);
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_reader) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', v_reader);
        END IF;
        EXECUTE format('GRANT %I TO %I', v_reader, v_net.operator_role);
    END LOOP;
END
$$;
