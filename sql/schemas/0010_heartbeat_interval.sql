-- depends: 0009_reader_roles
--
-- worker_heartbeats.expected_interval_seconds becomes an interval, so the
-- seed's stalled-worker query runs as printed:
--     SELECT worker_name, last_tick_at, expected_interval_seconds
--     FROM worker_heartbeats
--     WHERE NOW() - last_tick_at > expected_interval_seconds * 2
-- (interval > numeric has no operator). heartbeat() still takes seconds. The
-- views that read the column are dropped here and installed again by the
-- migrate that runs this.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP VIEW IF EXISTS stalled_workers, worker_status;
ALTER TABLE worker_heartbeats DROP CONSTRAINT worker_heartbeats_expected_interval_seconds_check;
ALTER TABLE worker_heartbeats
    ALTER COLUMN expected_interval_seconds TYPE interval
    USING make_interval(secs => expected_interval_seconds::double precision);
ALTER TABLE worker_heartbeats ADD CONSTRAINT worker_heartbeats_expected_interval_seconds_check
    CHECK (expected_interval_seconds > interval '0');
$ddl$);
