DO $grants$
DECLARE
    v_function text;
BEGIN
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO PUBLIC', current_database());
    FOR v_function IN
        SELECT p.oid::regprocedure::text
          FROM pg_proc p
         WHERE p.pronamespace = 'pg_catalog'::regnamespace
           AND (p.proname IN ('pg_notify', 'lo_create', 'lo_creat', 'lo_from_bytea', 'pg_logical_emit_message')
                OR (p.proname LIKE 'pg%advisory%lock%' AND p.proname NOT LIKE '%unlock%'))
         ORDER BY 1
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', v_function);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM qtg_owner', v_function);
    END LOOP;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'the privileges of PUBLIC in database % are left as they are: %', current_database(), SQLERRM;
END
$grants$;
