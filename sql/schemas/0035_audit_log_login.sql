-- depends: 0034_reader_views
--
-- audit_log.login: the login of the call that wrote the event (audit_batches'
-- session_user), promoted with it and covered by its hash. Before, the login
-- stayed in the event's batch: an owner could change who did something
-- without breaking the chain, and the batches had to be kept forever to know.
-- promote_audit now writes the login into each row and deletes the batches it
-- promoted (audit_log holds everything they held), so the outbox holds only
-- what is waiting to be chained.
--
-- The rows promoted before this migration have no login (NULL): their hashes
-- were taken without one, and audit_canonical leaves the key out when it is
-- NULL, so they verify as before. Their batches stay, marked promoted, and the
-- audit_outbox view takes their login from there.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE audit_log ADD COLUMN login text CHECK (login <> '');
COMMENT ON COLUMN audit_log.login IS
    'the login (session_user) of the call that wrote the event, covered by row_hash; NULL on rows promoted before 0035_audit_log_login, whose login is in their audit_batches row';
$ddl$);
