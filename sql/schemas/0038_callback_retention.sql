-- depends: 0037_completed_nodes_index
--
-- callback_settings.keep_days: how long a callback the engine is done with is
-- kept after it was sent (SENT) or written with no receiver to send it to
-- (NO_TARGET): 90 days by default, 0 keeps them all. Every state change of a
-- movement writes a callback_outbox row, and nothing removed one: the table
-- grew by two rows a movement for good. prune_callbacks (the
-- callback_dispatcher's, after each tick) deletes the older ones; a PENDING,
-- DEAD or REFUSED row stays whatever its age (it is being delivered, or an
-- operator's to replay). The state changes themselves stay in the audit log.
-- callback_outbox_done_idx finds the rows past the keep by when they were
-- done, so a call reads only what it deletes, not the table; it costs an
-- index entry when a row is sent (the row is written anew then anyway) and
-- one per NO_TARGET row.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE callback_settings
    ADD COLUMN keep_days integer NOT NULL DEFAULT 90 CHECK (keep_days BETWEEN 0 AND 36500);
COMMENT ON COLUMN callback_settings.keep_days IS
    'days a SENT or NO_TARGET callback is kept after it was sent (NO_TARGET: written) before prune_callbacks deletes it; PENDING, DEAD and REFUSED rows are kept; 0 keeps every callback';
CREATE INDEX callback_outbox_done_idx ON callback_outbox ((coalesce(sent_at, created_at)))
    WHERE delivery_state IN ('SENT', 'NO_TARGET');
$ddl$);
