-- audit_log.login dropped, while no row carries one. A row promoted with its
-- login has it in its hash: without the column it would no longer verify, and
-- its batch, which held the login before, was deleted when it was promoted.
-- Such a log cannot go back to 0034; the rollback refuses and changes nothing.
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DO $check$
BEGIN
    IF EXISTS (SELECT 1 FROM audit_log WHERE login IS NOT NULL) THEN
        RAISE EXCEPTION '%.audit_log has rows promoted with their login: 0035_audit_log_login cannot be rolled back',
                        current_schema()
            USING ERRCODE = 'QT060',
                  HINT = 'Their hashes cover the login; without the column the chain would no longer verify. Keep 0035.';
    END IF;
END
$check$;
ALTER TABLE audit_log DROP COLUMN login;
$ddl$);
