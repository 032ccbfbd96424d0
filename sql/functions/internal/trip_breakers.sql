-- trip_breakers: trips the breaker of each lane and venue (executor) of the
-- FAILED nodes p_failed whose value_limits row says trip_after_failures, once
-- that many of its nodes failed within trip_window_seconds (the FAILED
-- nodes' own index). A breaker already tripped stays as it is. Audited as
-- entity 'breaker' by p_actor. finish_nodes calls it for the nodes it fails;
-- a drift alert trips one through set_breaker. Returns how many tripped.
CREATE OR REPLACE FUNCTION trip_breakers(p_failed bigint[], p_actor text) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_tripped integer := 0;
    v_scope   record;
BEGIN
    FOR v_scope IN
        SELECT DISTINCT l.scope, l.name, l.trip_after_failures, l.trip_window_seconds
          FROM movement_request_nodes n
          JOIN value_limits l ON l.trip_after_failures IS NOT NULL
                             AND ((l.scope = 'lane' AND l.name = n.lane)
                               OR (l.scope = 'venue' AND l.name = n.executor_key))
         WHERE n.id = ANY (p_failed)
           AND NOT EXISTS (SELECT 1 FROM breakers b WHERE b.scope = l.scope AND b.name = l.name)
         ORDER BY l.scope, l.name
    LOOP
        IF (SELECT count(*) FROM movement_request_nodes f
             WHERE f.node_state = 'FAILED'
               AND f.finished_at > v_now - make_interval(secs => v_scope.trip_window_seconds::double precision)
               AND CASE v_scope.scope WHEN 'lane' THEN f.lane = v_scope.name
                                      ELSE f.executor_key = v_scope.name END) >= v_scope.trip_after_failures
        THEN
            v_tripped := v_tripped + set_breaker(v_scope.scope, v_scope.name,
                format('%s failed nodes within %s s', v_scope.trip_after_failures, v_scope.trip_window_seconds),
                p_actor);
        END IF;
    END LOOP;
    RETURN v_tripped;
END
$$;
