-- depends: 0003_sim_world
--
-- qtg.audit_event   one audit_outbox row as a value, so every procedure hands
--                   its events to one set-based writer (write_audit) instead
--                   of writing the INSERT itself.
-- lane_baselines    the waits that follow an error, per lane, in data instead
--                   of in the runners:
--   observe_error_retry_seconds  after an observe() call that failed (the
--                                executor's hint, when it gives one, wins)
--   recovery_retry_seconds       after recover() found no conclusion
--   release_retry_seconds        after a runner gave a claim back because it
--                                does not carry the node's executor

SET LOCAL ROLE qtg_owner;

CREATE TYPE qtg.audit_event AS (
    actor      text,
    entity     text,
    entity_id  text,
    request_id bigint,
    action     text,
    from_state text,
    to_state   text,
    detail     jsonb
);

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE lane_baselines
    ADD COLUMN observe_error_retry_seconds numeric NOT NULL DEFAULT 5
        CHECK (observe_error_retry_seconds > 0 AND observe_error_retry_seconds <= 86400),
    ADD COLUMN recovery_retry_seconds numeric NOT NULL DEFAULT 30
        CHECK (recovery_retry_seconds > 0 AND recovery_retry_seconds <= 86400),
    ADD COLUMN release_retry_seconds numeric NOT NULL DEFAULT 30
        CHECK (release_retry_seconds > 0 AND release_retry_seconds <= 86400);
$ddl$);
