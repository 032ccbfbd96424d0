-- give_back_value: the day's value usage a claim counted, given back for claims
-- that ended before anything could go out (their intent never PREPARED: a
-- release, a failed submit before the intent, recovery's NOT_SUBMITTED).
-- claim_ready_nodes adds the movement's amount to value_usage of every scope
-- with a daily cap the node's side effect falls under (its lane, its venue =
-- executor, the network), on the UTC day of the claim, and records those
-- scopes on the claim's intent (node_intents.value_counted); without this,
-- each retried or released claim would spend the day's cap again for a side
-- effect that never happened. Subtracts the amount from exactly those rows
-- (the claim's day, the scopes it counted, whatever is capped now: a cap
-- added since was given nothing), never below 0, and clears value_counted:
-- an intent's usage is given back once. The node's latest intent is the
-- claim's (recovery's claims make no intent of their own). The caller holds
-- the nodes' locks and has checked that nothing was prepared.
-- Locks: the value_usage rows, after the caller's nodes (a claim takes no node
-- lock while it holds them: it skips locked nodes), then the intents.
CREATE OR REPLACE FUNCTION give_back_value(p_node_ids bigint[]) RETURNS void
LANGUAGE sql
AS $$
    WITH claims AS (
        SELECT claim.id, claim.created_at, claim.value_counted, r.amount
          FROM movement_request_nodes n
          JOIN movement_requests r ON r.id = n.request_id
         -- the claim that counted it: the node's latest intent, made with the claim
         CROSS JOIN LATERAL (SELECT i.id, i.created_at, i.value_counted FROM node_intents i WHERE i.node_id = n.id
                              ORDER BY i.claim_token DESC LIMIT 1) claim
         WHERE n.id = ANY (p_node_ids) AND claim.value_counted IS NOT NULL
    ), back AS (
        UPDATE value_usage v
           SET started = greatest(0, v.started - b.amount)
          FROM (SELECT split_part(s.scope_name, ':', 1) AS scope, split_part(s.scope_name, ':', 2) AS name,
                       (c.created_at AT TIME ZONE 'UTC')::date AS day, sum(c.amount) AS amount
                  FROM claims c
                 CROSS JOIN unnest(c.value_counted) AS s(scope_name)
                 GROUP BY 1, 2, 3) b
         WHERE v.scope = b.scope AND v.name = b.name AND v.day = b.day
        RETURNING 1
    )
    UPDATE node_intents i
       SET value_counted = NULL
      FROM claims c
     WHERE i.id = c.id
$$;
