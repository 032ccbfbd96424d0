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

-- qtg_admin.grant_network_privileges, which grants a network's roles what
-- they need after every install, is the installer's own routine: it is
-- re-created by every migrate from sql/functions/qtg_admin/, not here.

REVOKE ALL ON SCHEMA qtg_admin FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA qtg_admin FROM PUBLIC;
