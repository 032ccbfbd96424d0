-- depends: 0010_heartbeat_interval
--
-- One login per person and per runner: the network roles become groups.
--
-- qtg_<net>_runner, qtg_<net>_operator   NOLOGIN from here on. A person or a
--     runner logs in as a login role of their own, a member of one of them
--     (`qtg operator add NAME`, `qtg runner add NAME`, with a generated
--     scram-sha-256 password), so session_user names who called and one
--     credential can be removed without touching the others.
--
-- The connection limit and the SET defaults (statement, lock and
-- idle-transaction timeouts) that 0007 put on each group role stay there as
-- the template of its logins: PostgreSQL applies neither through membership,
-- so `add` copies them onto every login it makes. The admin changes them on
-- the group role (ALTER ROLE) for the logins made afterwards, and on a login
-- (ALTER ROLE NAME ...) for that one.
--
-- Roles are cluster-wide: another database of the same server whose clients
-- still log in as a group role stops accepting them; give those clients
-- logins of their own. For the same reason the rollback leaves the group
-- roles NOLOGIN (as 0001 keeps the roles and 0007 their limits).

DO $$
DECLARE
    v_net qtg_admin.networks;
BEGIN
    FOR v_net IN SELECT * FROM qtg_admin.networks LOOP
        EXECUTE format('ALTER ROLE %I NOLOGIN', v_net.runner_role);
        EXECUTE format('ALTER ROLE %I NOLOGIN', v_net.operator_role);
    END LOOP;
END
$$;

-- The sim executor's outside world: a runner's writes are now made by its own
-- login, a member of the network's runner role, not by the role itself.
ALTER POLICY side_effects_own_network ON qtg_sim.side_effects
    USING (pg_has_role(current_user, 'qtg_' || network || '_runner', 'MEMBER'))
    WITH CHECK (pg_has_role(current_user, 'qtg_' || network || '_runner', 'MEMBER'));
