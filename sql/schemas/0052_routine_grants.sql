-- depends: 0051_login_search_path
--
-- Procedures are granted as the functions are. The operator's actions are
-- procedures too (CALL movement_approve(21) in psql, beside SELECT
-- approve_movement(21)), and PostgreSQL treats them apart: GRANT ... ON
-- FUNCTION refuses a procedure ("is not a function"), and REVOKE ... ON ALL
-- FUNCTIONS IN SCHEMA leaves procedures out, so a procedure would keep the
-- EXECUTE every routine is given to PUBLIC when it is made: any login of the
-- server could CALL a SECURITY DEFINER procedure. grant_network_privileges
-- now revokes and grants ON ROUTINE (functions and procedures alike).

SET LOCAL ROLE qtg_owner;

CREATE OR REPLACE FUNCTION qtg_admin.grant_network_privileges(p_network text) RETURNS void
LANGUAGE plpgsql AS $fn$
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
ALTER FUNCTION qtg_admin.grant_network_privileges(text) OWNER TO qtg_owner;
