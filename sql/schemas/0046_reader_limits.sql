-- depends: 0045_movement_creator_index
--
-- Readers get limits of their own, as runners and operators have had since
-- 0007: a dashboard or a scraper that opens connection after connection, or
-- leaves a transaction open, must not take the server's slots or hold its
-- rows from the runners and operators. On each network's reader group and on
-- every reader login made before (a login copies its group's limit and
-- defaults when it is made): at most 5 connections, statements of at most
-- 30 s, lock waits of at most 10 s, an idle transaction ended after 1 minute.
-- Only logins that are members of the reader group itself are changed (the
-- operator role is a member too, with its own limits).

DO $$
DECLARE
    v_net    qtg_admin.networks;
    v_role   text;
BEGIN
    FOR v_net IN SELECT * FROM qtg_admin.networks LOOP
        FOR v_role IN
            SELECT format('qtg_%s_reader', v_net.network_name)
            UNION ALL
            SELECT m.rolname::text
              FROM pg_auth_members a
              JOIN pg_roles g ON g.oid = a.roleid
              JOIN pg_roles m ON m.oid = a.member
             WHERE g.rolname = format('qtg_%s_reader', v_net.network_name) AND m.rolcanlogin
        LOOP
            EXECUTE format('ALTER ROLE %I CONNECTION LIMIT 5', v_role);
            EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', v_role, '30s');
            EXECUTE format('ALTER ROLE %I SET lock_timeout = %L', v_role, '10s');
            EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', v_role, '1min');
        END LOOP;
    END LOOP;
END
$$;
