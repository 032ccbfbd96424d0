SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DO $tables$
DECLARE
    v_trigger record;
BEGIN
    FOR v_trigger IN
        SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = current_schema()::regnamespace
           AND t.tgname IN ('registry_rows', 'registry_changes', 'registry_emptied')
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %I', v_trigger.tgname, v_trigger.relname);
    END LOOP;
END
$tables$;
ALTER TABLE movement_rehearsals DROP COLUMN registry_revision;
DROP TABLE registry_revision;
$ddl$);

DROP FUNCTION qtg_admin.bump_registry_revision();
