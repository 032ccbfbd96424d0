-- limit_holds: which of p_node_ids (the nodes a claim would take, in its
-- order: READY ones, and the roots of the movements it starts) must stay READY
-- because of a value limit or a tripped breaker,
-- and why. For the side-effect nodes only, per scope that has a row in
-- value_limits (its lane, its venue = executor, the network '*'):
--   max_per_movement  the node's movement amount is above it (approval
--                     counts it once per paying step, approve_movement_rows;
--                     a limit lowered after approval holds by the amount)
--   max_in_flight     what is in flight in the scope (SUBMITTING, SUBMITTED,
--                     OBSERVING, UNKNOWN side-effect nodes) plus this node and
--                     every node before it in p_node_ids would pass it
--   max_per_day       what the scope started this UTC day (value_usage) plus
--                     this node and every node before it would pass it
-- and, for every node (side effect or not), a breaker tripped or a pause on
-- its movement, lane, venue, chain or the network, unless past its
-- expires_at. Counting the nodes before it
-- whether or not they are held errs on the safe side: what a claim takes
-- together never passes a limit; but a node over a per-movement limit can
-- never be taken (approval refuses such a movement; a limit lowered after it
-- holds it for good), so it is not counted before the others. The claim calls it after locking every
-- value_limits row (so two claims never spend the same room); the view
-- limit_held_nodes() calls it for every READY node. What is in flight and
-- started today per scope is value_limit_status's (one definition). Reads only.
CREATE OR REPLACE FUNCTION limit_holds(p_node_ids bigint[], p_now timestamptz)
RETURNS TABLE (node_id bigint, reason text)
LANGUAGE sql STABLE
AS $$
    WITH nodes AS (
        SELECT n.id, n.lane, n.executor_key, r.amount, u.ord,
               -- over a per-movement limit of one of its scopes: held for good, so it
               -- takes no room of any scope from the nodes after it
               EXISTS (SELECT 1 FROM value_limits l
                        WHERE r.amount > l.max_per_movement
                          AND ((l.scope = 'lane' AND l.name = n.lane)
                            OR (l.scope = 'venue' AND l.name = n.executor_key)
                            OR l.scope = 'network')) AS never
          FROM unnest(p_node_ids) WITH ORDINALITY AS u(id, ord)
          JOIN movement_request_nodes n ON n.id = u.id
          JOIN movement_requests r ON r.id = n.request_id
         WHERE n.has_side_effect
    ), scoped AS (
        SELECT nodes.*, s.scope, s.name
          FROM nodes
         CROSS JOIN LATERAL (VALUES ('lane', nodes.lane), ('venue', nodes.executor_key), ('network', '*'))
               AS s(scope, name)
    ), limited AS (
        SELECT scoped.id, scoped.ord, scoped.amount, scoped.scope, scoped.name,
               l.max_in_flight, l.max_per_day, l.max_per_movement,
               sum(CASE WHEN scoped.never THEN 0 ELSE scoped.amount END)
                   OVER (PARTITION BY scoped.scope, scoped.name ORDER BY scoped.ord) AS upto
          FROM scoped
          JOIN value_limits l ON l.scope = scoped.scope AND l.name = scoped.name
    ), used AS (
        SELECT u.scope, u.name, u.in_flight, u.started_today AS today
          FROM value_limit_status u
         WHERE (u.max_in_flight IS NOT NULL OR u.max_per_day IS NOT NULL)
           AND EXISTS (SELECT 1 FROM scoped WHERE scoped.scope = u.scope AND scoped.name = u.name)
    ), reasons AS (
        SELECT limited.id, limited.ord,
               CASE
                   WHEN limited.amount > limited.max_per_movement THEN
                       format('%s %s: the movement''s %s USDC pass its per-movement limit of %s',
                              limited.scope, limited.name, trim_scale(limited.amount),
                              trim_scale(limited.max_per_movement))
                   WHEN used.in_flight + limited.upto > limited.max_in_flight THEN
                       format('%s %s: %s USDC in flight, %s more would pass its limit of %s',
                              limited.scope, limited.name, trim_scale(used.in_flight), trim_scale(limited.upto),
                              trim_scale(limited.max_in_flight))
                   WHEN used.today + limited.upto > limited.max_per_day THEN
                       format('%s %s: %s USDC started today (UTC), %s more would pass its daily cap of %s',
                              limited.scope, limited.name, trim_scale(used.today), trim_scale(limited.upto),
                              trim_scale(limited.max_per_day))
               END AS reason
          FROM limited
          LEFT JOIN used ON used.scope = limited.scope AND used.name = limited.name
        UNION ALL
        SELECT n.id, u.ord,
               CASE WHEN b.by_operator
                    THEN format('the %s %s is paused by %s (%s, since %s%s): another operator resumes it',
                                b.scope, b.name, b.tripped_by, b.reason, b.tripped_at,
                                ', until ' || b.expires_at)
                    ELSE format('the %s breaker of %s is tripped (%s, since %s): two operators reset it',
                                b.scope, b.name, b.reason, b.tripped_at)
               END
          FROM unnest(p_node_ids) WITH ORDINALITY AS u(id, ord)
          JOIN movement_request_nodes n ON n.id = u.id
          JOIN breakers b ON (b.expires_at IS NULL OR b.expires_at > p_now)
                         AND ((b.scope = 'lane' AND b.name = n.lane)
                           OR (b.scope = 'venue' AND b.name = n.executor_key)
                           OR (b.scope = 'chain' AND b.name = n.node_config ->> 'chain')
                           OR (b.scope = 'movement' AND b.name = n.request_id::text)
                           OR b.scope = 'network')
    )
    SELECT DISTINCT ON (reasons.ord) reasons.id, reasons.reason
      FROM reasons
     WHERE reasons.reason IS NOT NULL
     ORDER BY reasons.ord, reasons.reason;
$$;
