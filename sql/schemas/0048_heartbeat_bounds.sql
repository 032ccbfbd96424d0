-- depends: 0047_session_watchdog
--
-- worker_heartbeats is written by the runner logins (heartbeat), one row per
-- worker name and instance id, and nothing bounded how many: a login could
-- beat for 20,000 instance ids, or names, and stalled_workers, worker_status
-- and recovery's look for dead claimers would read them all. engine_limits
-- gains the two bounds heartbeat keeps (QT005 past them):
--   max_heartbeat_instances  the instances of one worker name (64: a worker
--                            runs one instance per runner process)
--   max_heartbeat_workers    the worker names (256: the runner registers
--                            about twenty)
-- A new instance past a bound takes the place of the oldest dead ones (a
-- worker that stopped, or missed two expected ticks), as the retention
-- already drops those silent for a day; only live ones refuse it.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE engine_limits
    ADD COLUMN max_heartbeat_instances integer NOT NULL DEFAULT 64
        CHECK (max_heartbeat_instances BETWEEN 1 AND 10000),
    ADD COLUMN max_heartbeat_workers integer NOT NULL DEFAULT 256
        CHECK (max_heartbeat_workers BETWEEN 1 AND 10000);
$ddl$);
