-- depends: 0048_heartbeat_bounds
--
-- An approval is never recorded before the movement it approves was created:
-- approvals record the time of their decision (decision_clock) once their
-- locks are held, and the table holds it as a rule. Rows from before, which
-- could break it (an approval's statement that began before the movement's
-- creation committed), are kept: the check is validated only where none does.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_requests ADD CONSTRAINT movement_requests_approved_after_created
    CHECK (approved_at IS NULL OR approved_at >= created_at) NOT VALID;
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM movement_requests WHERE approved_at < created_at) THEN
        ALTER TABLE movement_requests VALIDATE CONSTRAINT movement_requests_approved_after_created;
    END IF;
END
$do$;
$ddl$);
