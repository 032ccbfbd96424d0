-- depends: 0029_http_api
--
-- Pacing that learns each lane's latency from its finished nodes.
--
-- lane_latency_samples  one row per node that complete_observe saw COMPLETED
--                       in its first observation window: the lane, and when
--                       the completion happened as the observer can know it,
--                       in seconds since the node's observation started: after
--                       the last PENDING look (after_seconds; 0 before the
--                       first) and by the look that saw it done (by_seconds).
--                       Append-only, written once per observed completion;
--                       refresh_lane_pacing keeps the newest 2,000 per lane.
-- lane_pacing_learned   per lane with enough samples (refresh_lane_pacing, a
--                       sidecar): the learned quantiles of its latency and the
--                       poll schedule drawn from them (poll_at: seconds since
--                       the observation started), used by observe_pacing while
--                       the lane's settings are the ones it was drawn for
--                       (lane_updated_at = lane_baselines.updated_at). A lane
--                       without a row paces by its phases, as before.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE lane_latency_samples (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lane          text NOT NULL,
    after_seconds numeric NOT NULL CHECK (after_seconds >= 0),
    by_seconds    numeric NOT NULL,
    finished_at   timestamptz NOT NULL,
    CHECK (by_seconds >= after_seconds)
);
CREATE INDEX lane_latency_samples_lane_idx ON lane_latency_samples (lane, id);

CREATE TABLE lane_pacing_learned (
    lane             text PRIMARY KEY REFERENCES lane_baselines ON DELETE CASCADE,
    samples          integer NOT NULL CHECK (samples > 0),
    quantile_levels  numeric[] NOT NULL,
    quantile_seconds numeric[] NOT NULL,
    poll_at          numeric[] NOT NULL CHECK (cardinality(poll_at) BETWEEN 1 AND 64),
    lane_updated_at  timestamptz NOT NULL,
    refreshed_at     timestamptz NOT NULL,
    CHECK (cardinality(quantile_levels) = cardinality(quantile_seconds))
);
$ddl$);
