-- depends: 0067_rehearsal_request_claims
--
-- What PostgreSQL gives PUBLIC by default and no login of a network needs,
-- each of which let a reader (or an operator or a runner outside its
-- routines) write or hold something:
--   TEMPORARY on the database       temporary tables (disk, catalog churn)
--   lo_create, lo_creat,            large objects: rows of pg_largeobject
--   lo_from_bytea                   that outlive the session (a disk filler)
--   pg_notify                       the function (the NOTIFY command itself
--                                   takes no privilege in PostgreSQL: a
--                                   wake-up is a hint, the runners' claims
--                                   decide)
--   pg_logical_emit_message         WAL written at will
--   the advisory lock functions     a session-level lock on the heartbeat
--                                   key (heartbeat's first beat) held by an
--                                   idle session that no timeout ends: new
--                                   runner instances wait on it
-- Taken from PUBLIC in this database (pg_catalog is per database) and given
-- to qtg_owner, whose routines NOTIFY and lock (the admin is its member). The
-- functions of pg_catalog belong to the bootstrap superuser: an admin that is
-- not a superuser cannot change them (PostgreSQL only warns), and is warned
-- here too, with what to ask the server's superuser for (docs/deploying.md).

DO $grants$
DECLARE
    v_function text;
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    FOR v_function IN
        SELECT p.oid::regprocedure::text
          FROM pg_proc p
         WHERE p.pronamespace = 'pg_catalog'::regnamespace
           AND (p.proname IN ('pg_notify', 'lo_create', 'lo_creat', 'lo_from_bytea', 'pg_logical_emit_message')
                OR (p.proname LIKE 'pg%advisory%lock%' AND p.proname NOT LIKE '%unlock%'))
         ORDER BY 1
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', v_function);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO qtg_owner', v_function);
        -- a REVOKE by one that may not revoke only warns: say what is left
        IF EXISTS (SELECT 1 FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                    WHERE p.oid = v_function::regprocedure AND a.grantee = 0 AND a.privilege_type = 'EXECUTE') THEN
            RAISE insufficient_privilege USING MESSAGE = format('PUBLIC may still run %s', v_function);
        END IF;
    END LOOP;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'PUBLIC keeps TEMPORARY, large objects, pg_notify and advisory locks in database %: %',
                  current_database(), SQLERRM
        USING HINT = 'Have the server''s superuser run sql/schemas/0068_public_privileges.sql in this database '
                     '(docs/deploying.md, "What PUBLIC may do").';
END
$grants$;
