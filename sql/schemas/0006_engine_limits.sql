-- depends: 0005_test_database_mark
--
-- engine_limits   one row per network: the bounds every input is checked
--                 against (check_limits), so that no caller can hand the
--                 engine a lease or a wait of years, a 50 MB document or a
--                 plan too large to check. Only the owner (the admin login)
--                 changes them, with an UPDATE:
--   max_lease_seconds    a claim's lease
--   max_wait_seconds     a retry hint (a node's next try or look)
--   max_json_bytes       a document: evidence, a payload, a plan, a config
--   max_text_bytes       a text: an error, a reason, a reference
--   max_plan_nodes       the nodes of one movement
--   heartbeat_retention_seconds  how long a worker instance that stopped
--                        ticking keeps its heartbeat row

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE engine_limits (
    only_row                    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    max_lease_seconds           numeric NOT NULL DEFAULT 3600 CHECK (max_lease_seconds > 0),
    max_wait_seconds            numeric NOT NULL DEFAULT 3600 CHECK (max_wait_seconds > 0),
    max_json_bytes              integer NOT NULL DEFAULT 65536 CHECK (max_json_bytes > 0),
    max_text_bytes              integer NOT NULL DEFAULT 4096 CHECK (max_text_bytes > 0),
    max_plan_nodes              integer NOT NULL DEFAULT 200 CHECK (max_plan_nodes BETWEEN 1 AND 1000),
    heartbeat_retention_seconds numeric NOT NULL DEFAULT 86400 CHECK (heartbeat_retention_seconds > 0)
);
INSERT INTO engine_limits DEFAULT VALUES;
$ddl$);
