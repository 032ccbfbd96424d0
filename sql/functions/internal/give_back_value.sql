-- give_back_value: the day's value usage a claim counted, given back for claims
-- that ended before anything could go out (their intent never PREPARED: a
-- release, a failed submit before the intent, recovery's NOT_SUBMITTED).
-- claim_ready_nodes adds the movement's amount to value_usage of every scope
-- with a daily cap the node's side effect falls under (its lane, its venue =
-- executor, the network), on the UTC day of the claim (its intent's
-- created_at: recovery's claims make no intent of their own); without this, each
-- retried or released claim would spend the day's cap again for a side
-- effect that never happened. Subtracts the same amounts from the same rows
-- (the claim's day, the scopes capped now), never below 0. The caller holds
-- the nodes' locks and has checked that nothing was prepared.
-- Locks: the value_usage rows, after the caller's nodes (a claim takes no node
-- lock while it holds them: it skips locked nodes).
CREATE OR REPLACE FUNCTION give_back_value(p_node_ids bigint[]) RETURNS void
LANGUAGE sql
AS $$
    UPDATE value_usage v
       SET started = greatest(0, v.started - back.amount)
      FROM (SELECT l.scope, l.name, (claim.created_at AT TIME ZONE 'UTC')::date AS day, sum(r.amount) AS amount
              FROM movement_request_nodes n
              JOIN movement_requests r ON r.id = n.request_id
             -- the claim that counted it: the node's latest intent, made with the claim
             CROSS JOIN LATERAL (SELECT i.created_at FROM node_intents i WHERE i.node_id = n.id
                                  ORDER BY i.claim_token DESC LIMIT 1) claim
              JOIN value_limits l ON l.max_per_day IS NOT NULL
                                 AND ((l.scope = 'lane' AND l.name = n.lane)
                                   OR (l.scope = 'venue' AND l.name = n.executor_key)
                                   OR l.scope = 'network')
             WHERE n.id = ANY (p_node_ids) AND n.has_side_effect
             GROUP BY 1, 2, 3) back
     WHERE v.scope = back.scope AND v.name = back.name AND v.day = back.day
$$;
