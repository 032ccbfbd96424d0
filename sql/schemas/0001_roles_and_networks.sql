-- Roles, the shared schemas and one schema per network.
--
-- qtg_owner              owns every QTG object; the procedures run as SECURITY
--                        DEFINER under it, so it is the only role that writes.
-- qtg_<net>_runner       the workers' login, per network: EXECUTE on the
--                        procedures commented 'access: runner' (claims,
--                        completions, heartbeats), SELECT on the views.
-- qtg_<net>_operator     the operators' login, per network: EXECUTE on the
--                        procedures commented 'access: operator' (create, approve, cancel,
--                        templates, lane pacing), SELECT on the views. A runner
--                        credential cannot create or approve a movement.
-- Neither may touch a table directly, call an unmarked (internal) function,
-- or see anything of another network.
--
-- qtg                    shared types and helpers (the clock, the config validator).
-- qtg_admin              the network registry and the installers used by migrations.
-- mainnet, testnet       one schema per network class, each with its own tables
--                        and its own copy of every procedure.
--
-- Roles are cluster-wide: they are created when missing and kept on rollback,
-- because other databases of the same cluster may still use them.

DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['qtg_owner', 'qtg_mainnet_runner', 'qtg_testnet_runner',
                                  'qtg_mainnet_operator', 'qtg_testnet_operator'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role) THEN
            IF v_role = 'qtg_owner' THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            ELSE
                EXECUTE format('CREATE ROLE %I LOGIN', v_role);
            END IF;
        END IF;
    END LOOP;
    -- the migrating login must be able to act as the owner
    IF NOT pg_has_role(current_user, 'qtg_owner', 'MEMBER') THEN
        EXECUTE format('GRANT qtg_owner TO %I', current_user);
    END IF;
END
$$;

CREATE SCHEMA qtg AUTHORIZATION qtg_owner;
CREATE SCHEMA qtg_admin AUTHORIZATION qtg_owner;
CREATE SCHEMA mainnet AUTHORIZATION qtg_owner;
CREATE SCHEMA testnet AUTHORIZATION qtg_owner;

CREATE TABLE qtg_admin.networks (
    network_name  text PRIMARY KEY CHECK (network_name ~ '^[a-z][a-z0-9_]*$'),
    runner_role   text NOT NULL UNIQUE,
    operator_role text NOT NULL UNIQUE
);
ALTER TABLE qtg_admin.networks OWNER TO qtg_owner;
INSERT INTO qtg_admin.networks (network_name, runner_role, operator_role) VALUES
    ('mainnet', 'qtg_mainnet_runner', 'qtg_mainnet_operator'),
    ('testnet', 'qtg_testnet_runner', 'qtg_testnet_operator');

-- Runs DDL written once with unqualified names in every network schema.
CREATE FUNCTION qtg_admin.apply_per_network(p_ddl text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_network text;
    v_saved   text := current_setting('search_path');
BEGIN
    FOR v_network IN SELECT network_name FROM qtg_admin.networks ORDER BY network_name LOOP
        PERFORM set_config('search_path', format('%I, qtg, pg_temp', v_network), true);
        EXECUTE p_ddl;
    END LOOP;
    PERFORM set_config('search_path', v_saved, true);
END
$fn$;
ALTER FUNCTION qtg_admin.apply_per_network(text) OWNER TO qtg_owner;

-- Grants a network's runner and operator roles exactly what they need: usage
-- of their schema and of qtg, EXECUTE on the functions marked for them with
-- COMMENT ON FUNCTION ... IS 'access: runner' | 'access: operator' (nothing
-- else: internal helpers stay the owner's), and SELECT on the network's views.
-- Re-run after every install.
CREATE FUNCTION qtg_admin.grant_network_privileges(p_network text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_net      qtg_admin.networks;
    v_function record;
    v_view     text;
BEGIN
    SELECT * INTO STRICT v_net FROM qtg_admin.networks WHERE network_name = p_network;
    EXECUTE format('GRANT USAGE ON SCHEMA qtg, %I TO %I, %I', p_network, v_net.runner_role, v_net.operator_role);
    EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC, %I, %I',
                   p_network, v_net.runner_role, v_net.operator_role);
    EXECUTE 'REVOKE ALL ON ALL FUNCTIONS IN SCHEMA qtg FROM PUBLIC';
    EXECUTE format('GRANT EXECUTE ON FUNCTION qtg.clock() TO %I, %I', v_net.runner_role, v_net.operator_role);

    FOR v_function IN
        SELECT p.oid::regprocedure AS signature,
               substring(obj_description(p.oid, 'pg_proc') FROM '^access: (runner|operator)') AS access
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = p_network
    LOOP
        IF v_function.access = 'runner' THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_function.signature, v_net.runner_role);
        ELSIF v_function.access = 'operator' THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_function.signature, v_net.operator_role);
        END IF;
    END LOOP;

    FOR v_view IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = p_network AND c.relkind = 'v'
    LOOP
        EXECUTE format('GRANT SELECT ON %I.%I TO %I, %I', p_network, v_view, v_net.runner_role, v_net.operator_role);
    END LOOP;
END
$fn$;
ALTER FUNCTION qtg_admin.grant_network_privileges(text) OWNER TO qtg_owner;

REVOKE ALL ON SCHEMA qtg_admin FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA qtg_admin FROM PUBLIC;
