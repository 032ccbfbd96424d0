-- depends: 0006_engine_limits
--
-- Limits on the sessions of each network's roles, so that no credential can
-- take the server from the others (a testnet runner opening every connection
-- the server has, say): a connection limit per role, enforced by the server,
-- and default timeouts for statements, lock waits and idle transactions.
-- With the server's default of 100 connections, both networks' roles at their
-- limits (2 x (30 + 10)) leave room for the admin. The admin changes them
-- with ALTER ROLE (roles are cluster-wide: the change holds for every
-- database of the server). The timeouts are session defaults: they bound a
-- runner that hangs, not one that sets its own.

DO $$
DECLARE
    v_net  qtg_admin.networks;
    v_role text;
BEGIN
    FOR v_net IN SELECT * FROM qtg_admin.networks LOOP
        EXECUTE format('ALTER ROLE %I CONNECTION LIMIT 30', v_net.runner_role);
        EXECUTE format('ALTER ROLE %I CONNECTION LIMIT 10', v_net.operator_role);
        FOREACH v_role IN ARRAY ARRAY[v_net.runner_role, v_net.operator_role] LOOP
            EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', v_role, '60s');
            EXECUTE format('ALTER ROLE %I SET lock_timeout = %L', v_role, '30s');
            EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', v_role, '5min');
        END LOOP;
    END LOOP;
END
$$;
