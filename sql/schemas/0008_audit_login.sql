-- depends: 0007_role_limits
--
-- audit_outbox.login: the database login of the session that made the change,
-- beside `actor` (the worker or person the procedure names). The procedures
-- run as their owner, so only session_user tells which credential called:
-- a report made with another worker's claim shows the login that sent it.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE audit_outbox ADD COLUMN login text NOT NULL DEFAULT session_user;
$ddl$);
