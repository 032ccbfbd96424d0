SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE node_intents DROP CONSTRAINT node_intents_nonce_check;
ALTER TABLE movement_requests DROP CONSTRAINT movement_requests_amount_finite;
ALTER TABLE lane_baselines DROP CONSTRAINT lane_baselines_finite;
ALTER TABLE engine_limits
    DROP CONSTRAINT engine_limits_finite,
    DROP CONSTRAINT engine_limits_min_lease_within_max,
    DROP COLUMN max_plan_bytes,
    DROP COLUMN min_lease_seconds,
    DROP COLUMN max_amount;
$ddl$);
