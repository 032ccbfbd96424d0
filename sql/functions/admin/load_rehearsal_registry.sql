-- load_rehearsal_registry: the registry of rehearsal_input ({table: [row,
-- ...]}) written into the same tables of this database, in place of what
-- they hold (what the migrations seeded: the lanes' pacing, the engine's
-- limits), so that a throwaway database replays a movement with the
-- configuration of the database the movement is in. An admin step of a
-- rehearsal (`qtg rehearse`): SECURITY INVOKER, no grant.
--   - only in a database marked a test database (a row in
--     qtg.test_database: `qtg db mark-test`), else QT042: it deletes a
--     registry, and a database that moves money never has its registry
--     replaced so
--   - p_registry: an object whose keys are tables of
--     rehearsal_registry_tables() and whose values are arrays of non-empty
--     objects whose keys are columns of the table, else QT002 (a table it
--     does not name is left as it is)
--   - each table it names is emptied (in the reverse of the list's
--     foreign-key order), then its rows are inserted (jsonb_populate_recordset,
--     in that order) with the columns the rows name: a column no row names
--     takes its default (an exchange venue's request_salt, made anew here);
--     an identity column's sequence is set past the ids loaded
--   - a row its table's constraints refuse, or a table other rows still
--     reference (a database where movements ran): QT002 naming the table
-- A failed call changes nothing. Audited as entity 'chain'
-- (rehearsal_registry_loaded, the rows loaded per table). Locks: the rows
-- it deletes. Returns the number of rows loaded.
CREATE OR REPLACE FUNCTION load_rehearsal_registry(p_registry jsonb) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_what     text := 'load_rehearsal_registry';
    v_tables   text[];             -- the tables p_registry names, in foreign-key order
    v_table    text;
    v_bad      text;
    v_columns  text;
    v_identity record;
    v_count    integer;
    v_total    integer := 0;
    v_counts   jsonb := '{}';
    v_message  text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM qtg.test_database) THEN
        RAISE EXCEPTION '%: this database is not marked a test database, and its registry is never replaced', v_what
            USING ERRCODE = 'QT042',
                  HINT = 'Load a rehearsal''s registry into a database made for it: migrated, then marked with qtg db mark-test.';
    END IF;
    IF jsonb_typeof(p_registry) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION '%: p_registry must be an object {"table": [row, ...]}, got %', v_what,
                        coalesce(jsonb_typeof(p_registry), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Pass the "registry" of rehearsal_input.';
    END IF;
    SELECT k INTO v_bad FROM jsonb_object_keys(p_registry) k
     WHERE k <> ALL (rehearsal_registry_tables()) ORDER BY k LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: % is not a table of the registry', v_what, quote_literal(left(v_bad, 80))
            USING ERRCODE = 'QT002',
                  HINT = format('The registry''s tables: %s.', array_to_string(rehearsal_registry_tables(), ', '));
    END IF;
    SELECT e.key INTO v_bad FROM jsonb_each(p_registry) e
     WHERE jsonb_typeof(e.value) <> 'array'
        OR EXISTS (SELECT 1 FROM jsonb_array_elements(e.value) r WHERE jsonb_typeof(r) <> 'object' OR r = '{}')
     ORDER BY e.key LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: the rows of % must be an array of objects, each naming its columns', v_what, v_bad
            USING ERRCODE = 'QT002', HINT = 'Pass the "registry" of rehearsal_input.';
    END IF;
    SELECT e.key, c.name INTO v_table, v_bad
      FROM jsonb_each(p_registry) e
     CROSS JOIN LATERAL (SELECT DISTINCT k AS name FROM jsonb_array_elements(e.value) r, jsonb_object_keys(r) k) c
     WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                        WHERE a.attrelid = e.key::regclass AND a.attname = c.name
                          AND a.attnum > 0 AND NOT a.attisdropped)
     ORDER BY e.key, c.name LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: table % has no column %', v_what, v_table, quote_literal(left(v_bad, 80))
            USING ERRCODE = 'QT002', HINT = 'Pass the "registry" of rehearsal_input of the same version of the engine.';
    END IF;


    SELECT array_agg(t.name ORDER BY t.ord) INTO v_tables
      FROM unnest(rehearsal_registry_tables()) WITH ORDINALITY AS t(name, ord)
     WHERE p_registry ? t.name;
    v_tables := coalesce(v_tables, '{}');

    BEGIN
        FOR v_table IN SELECT t FROM unnest(v_tables) WITH ORDINALITY AS u(t, ord) ORDER BY u.ord DESC LOOP
            EXECUTE format('DELETE FROM %I', v_table);
        END LOOP;
        FOREACH v_table IN ARRAY v_tables LOOP
            SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_columns
              FROM pg_attribute a
             WHERE a.attrelid = v_table::regclass AND a.attnum > 0 AND NOT a.attisdropped
               AND EXISTS (SELECT 1 FROM jsonb_array_elements(p_registry -> v_table) r WHERE r ? a.attname);
            v_count := 0;
            IF v_columns IS NOT NULL THEN
                EXECUTE format('INSERT INTO %I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM jsonb_populate_recordset(NULL::%I, $1)',
                               v_table, v_columns, v_columns, v_table)
                   USING p_registry -> v_table;
                GET DIAGNOSTICS v_count = ROW_COUNT;
            END IF;
            FOR v_identity IN
                SELECT a.attname, pg_get_serial_sequence(quote_ident(v_table), a.attname) AS sequence
                  FROM pg_attribute a
                 WHERE a.attrelid = v_table::regclass AND a.attnum > 0 AND NOT a.attisdropped
                   AND pg_get_serial_sequence(quote_ident(v_table), a.attname) IS NOT NULL
            LOOP
                EXECUTE format('SELECT setval(%L, max(%I)) FROM %I HAVING max(%I) IS NOT NULL',
                               v_identity.sequence, v_identity.attname, v_table, v_identity.attname);
            END LOOP;
            v_counts := v_counts || jsonb_build_object(v_table, v_count);
            v_total := v_total + v_count;
        END LOOP;
    EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
        GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT;
        RAISE EXCEPTION '%: table %: %', v_what, v_table, v_message
            USING ERRCODE = 'QT002',
                  HINT = 'Load a registry as rehearsal_input gives it, into a database made for the rehearsal before any movement runs there.';
    END;

    PERFORM audit_registry('registry', 'rehearsal_registry_loaded', jsonb_build_object('rows', v_counts));
    RETURN v_total;
END
$$;
