-- qtg_admin.grant_network_privileges: grants a network's runner and operator
-- roles exactly what they need, after every install of the function layer
-- (the installer calls it for each network): usage of their schema and of
-- qtg; EXECUTE on the routines (functions and procedures alike: ON ROUTINE)
-- whose comment says 'access: runner' or 'access: operator', which the
-- installer sets from the folder a routine's file sits in, and nothing else
-- (internal helpers and admin steps stay the owner's; the EXECUTE every new
-- routine gives PUBLIC is revoked, in the network and in qtg, where only the
-- clock is granted); SELECT on the network's views, but for one whose comment
-- starts with 'access: reader' (audit_outbox): that one goes to the operator
-- role only, not to the runners.
-- Re-installed by every migrate (sql/functions/qtg_admin/, CREATE OR REPLACE,
-- revoked from PUBLIC), not by a migration: the grants follow the routine
-- layer they grant, and a change to them is one change here. Admin only.
CREATE OR REPLACE FUNCTION qtg_admin.grant_network_privileges(p_network text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_net      qtg_admin.networks;
    v_routine  record;
    v_view     text;
    v_readers_only boolean;
BEGIN
    SELECT * INTO STRICT v_net FROM qtg_admin.networks WHERE network_name = p_network;
    EXECUTE format('GRANT USAGE ON SCHEMA qtg, %I TO %I, %I', p_network, v_net.runner_role, v_net.operator_role);
    EXECUTE format('REVOKE ALL ON ALL ROUTINES IN SCHEMA %I FROM PUBLIC, %I, %I',
                   p_network, v_net.runner_role, v_net.operator_role);
    EXECUTE 'REVOKE ALL ON ALL ROUTINES IN SCHEMA qtg FROM PUBLIC';
    EXECUTE format('GRANT EXECUTE ON FUNCTION qtg.clock() TO %I, %I', v_net.runner_role, v_net.operator_role);

    FOR v_routine IN
        SELECT p.oid::regprocedure AS signature,
               substring(obj_description(p.oid, 'pg_proc') FROM '^access: (runner|operator)') AS access
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = p_network
    LOOP
        IF v_routine.access = 'runner' THEN
            EXECUTE format('GRANT EXECUTE ON ROUTINE %s TO %I', v_routine.signature, v_net.runner_role);
        ELSIF v_routine.access = 'operator' THEN
            EXECUTE format('GRANT EXECUTE ON ROUTINE %s TO %I', v_routine.signature, v_net.operator_role);
        END IF;
    END LOOP;

    FOR v_view, v_readers_only IN
        SELECT c.relname, coalesce(obj_description(c.oid, 'pg_class') ~ '^access: reader', false)
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = p_network AND c.relkind = 'v'
    LOOP
        IF v_readers_only THEN
            EXECUTE format('REVOKE SELECT ON %I.%I FROM %I', p_network, v_view, v_net.runner_role);
            EXECUTE format('GRANT SELECT ON %I.%I TO %I', p_network, v_view, v_net.operator_role);
        ELSE
            EXECUTE format('GRANT SELECT ON %I.%I TO %I, %I', p_network, v_view, v_net.runner_role,
                           v_net.operator_role);
        END IF;
    END LOOP;
END
$fn$;
