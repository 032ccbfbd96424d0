-- depends: 0011_claim_secret 0012_config_proposals 0014_node_requeues
--
-- Numbers are numbers. PostgreSQL's numeric also holds NaN, Infinity and
-- -Infinity, and NaN sorts above every number, so it passes every "> 0"
-- check: a NaN amount, baseline or limit would be stored and then break the
-- arithmetic that reads it (or, as a limit, disable the bound). The
-- procedures refuse such inputs (QT005); these checks make sure that no
-- writer at all stores one.
--
-- engine_limits     gains three bounds, and every limit is finite (a
--                   number of seconds at most 10^9: it becomes an interval):
--   max_amount          a movement's amount is at most this (a trillion;
--                       the amount column holds less than 10^32)
--   min_lease_seconds   a claim's lease is at least this (1 s): a lease that
--                       has run out before the claim commits hands the node to
--                       recovery at once
--   max_plan_bytes      a plan is at most this as text (1 MiB): a dense plan
--                       of max_plan_nodes (200) names 19,900 parents, far beyond
--                       max_json_bytes (64 KiB), which bounds every other document
-- lane_baselines    every setting finite, seconds at most 10^9
--                   (configuration: a row that is not fails the migration;
--                   the admin corrects it first)
-- movement_requests an amount is finite (numeric(38, 6) stores NaN)
-- node_intents      a nonce is not negative
--                   (history: checked from now on, NOT VALID for the rows
--                   already there)

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$

ALTER TABLE engine_limits
    ADD COLUMN max_amount numeric NOT NULL DEFAULT 1000000000000
        CHECK (max_amount > 0 AND max_amount < 1e32),
    ADD COLUMN min_lease_seconds numeric NOT NULL DEFAULT 1
        CHECK (min_lease_seconds > 0 AND min_lease_seconds < 'Infinity'),
    ADD COLUMN max_plan_bytes integer NOT NULL DEFAULT 1048576 CHECK (max_plan_bytes > 0),
    ADD CONSTRAINT engine_limits_min_lease_within_max CHECK (min_lease_seconds <= max_lease_seconds),
    -- finite, and at most 10^9 s (31 years): a wait or lease becomes an interval
    ADD CONSTRAINT engine_limits_finite CHECK (
            max_lease_seconds <= 1e9 AND max_wait_seconds <= 1e9 AND heartbeat_retention_seconds <= 1e9
        AND min_poll_seconds <= 1e9 AND max_baseline_seconds <= 1e9 AND proposal_lifetime_seconds <= 1e9);

ALTER TABLE lane_baselines ADD CONSTRAINT lane_baselines_finite CHECK (
        baseline_seconds <= 1e9 AND min_poll_seconds <= 1e9 AND max_poll_seconds <= 1e9
    AND observe_error_retry_seconds <= 1e9 AND recovery_retry_seconds <= 1e9 AND release_retry_seconds <= 1e9
    AND first_poll_fraction < 'Infinity' AND poll_fraction < 'Infinity'
    AND over_factor < 'Infinity' AND fatal_factor < 'Infinity');

-- history is not rewritten: rows written before these checks are kept as
-- they are (NOT VALID), every new or changed row is checked
ALTER TABLE movement_requests ADD CONSTRAINT movement_requests_amount_finite CHECK (amount < 'Infinity') NOT VALID;

ALTER TABLE node_intents ADD CONSTRAINT node_intents_nonce_check CHECK (nonce >= 0) NOT VALID;

$ddl$);
