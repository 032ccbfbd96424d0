-- value_limit_status: every scope with value limits (value_limits) or a
-- tripped breaker (a pause): its limits, the USDC its side-effect nodes have
-- in flight now (SUBMITTING, SUBMITTED, OBSERVING, UNKNOWN), what it started
-- this UTC day (value_usage), and its breaker (CLOSED, or TRIPPED since
-- when, why, by whom, until when, whether an operator paused it, and who
-- asked to reset it; a pause past its end is CLOSED). The claim reads the same numbers (limit_holds); the
-- nodes it holds and why are in limit_held_nodes().
CREATE OR REPLACE VIEW value_limit_status AS
WITH scopes AS (
    SELECT scope, name FROM value_limits
    UNION
    SELECT scope, name FROM breakers
)
SELECT s.scope,
       s.name,
       l.max_in_flight,
       l.max_per_day,
       l.max_per_movement,
       l.trip_after_failures,
       l.trip_window_seconds,
       (SELECT coalesce(sum(r.amount), 0)
          FROM movement_request_nodes x
          JOIN movement_requests r ON r.id = x.request_id
         WHERE x.node_state IN ('SUBMITTING', 'SUBMITTED', 'OBSERVING', 'UNKNOWN')
           AND x.has_side_effect
           -- the same nodes, as the partial indexes hold them (observable,
           -- recoverable, quarantined), as in_flight_nodes reads them: every
           -- claim adds this up once a limit is set (limit_holds), and it must
           -- read the nodes in flight, not every node ever finished
           AND ((x.node_state IN ('SUBMITTED', 'OBSERVING') AND x.quarantined_at IS NULL)
             OR (x.node_state IN ('UNKNOWN', 'SUBMITTING') AND x.quarantined_at IS NULL)
             OR (x.quarantined_at IS NOT NULL AND x.finished_at IS NULL))
           AND CASE s.scope WHEN 'lane' THEN x.lane = s.name
                            WHEN 'venue' THEN x.executor_key = s.name
                            WHEN 'chain' THEN x.node_config ->> 'chain' = s.name
                            WHEN 'movement' THEN x.request_id::text = s.name
                            ELSE true END) AS in_flight,
       coalesce((SELECT v.started FROM value_usage v
                  WHERE v.scope = s.scope AND v.name = s.name
                    AND v.day = (clock() AT TIME ZONE 'UTC')::date), 0) AS started_today,
       CASE WHEN b.scope IS NULL OR b.expires_at <= clock() THEN 'CLOSED' ELSE 'TRIPPED' END AS breaker,
       b.tripped_at,
       b.reason AS tripped_because,
       b.reset_requested_by,
       b.tripped_by,
       b.expires_at,
       coalesce(b.by_operator, false) AS paused_by_operator
  FROM scopes s
  LEFT JOIN value_limits l ON l.scope = s.scope AND l.name = s.name
  LEFT JOIN breakers b ON b.scope = s.scope AND b.name = s.name;
