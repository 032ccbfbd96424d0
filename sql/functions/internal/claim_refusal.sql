-- claim_refusal: why a completion call may not go on with node p_node_id, as
-- locked (or, presented with a wrong secret, read) after the guard's locks:
-- p_node is its row (NULL: no such node), p_hash the claim_hash of the secret
-- presented (NULL: malformed). No row's worth of refusal (code NULL) when it
-- may go on. The fencing rule of every completion call, written once, for the
-- batch guard (lock_claimed_nodes) and the one-node guard (lock_claimed_node):
--   QT002  the secret is malformed (NULL, or not the 64 characters a claim
--          hands out)
--   QT011  no such node
--   QT030  the secret is not the node's current claim (fencing: another
--          worker, or recovery, holds it now, or it was never this caller's),
--          or p_live_lease and the claim's lease has run out at p_now
--   QT021  the node is in none of p_states
-- No message names a secret, a hash or a claim token. Internal.
CREATE OR REPLACE FUNCTION claim_refusal(
    p_call       text,
    p_node_id    bigint,
    p_hash       bytea,
    p_node       movement_request_nodes,
    p_states     qtg.node_state[],
    p_live_lease boolean,
    p_now        timestamptz
) RETURNS TABLE (code text, message text)
LANGUAGE sql STABLE
AS $$
    SELECT CASE
               WHEN p_hash IS NULL THEN 'QT002'
               WHEN (p_node).id IS NULL THEN 'QT011'
               WHEN (p_node).claim_hash IS DISTINCT FROM p_hash THEN 'QT030'
               WHEN NOT (p_node).node_state = ANY (p_states) THEN 'QT021'
               WHEN p_live_lease AND (p_node).lease_until <= p_now THEN 'QT030'
           END,
           CASE
               WHEN p_hash IS NULL THEN
                   format('%s: the claim secret for node %s is malformed: a claim hands out 64 characters',
                          p_call, p_node_id)
               WHEN (p_node).id IS NULL THEN format('%s: node %s does not exist', p_call, p_node_id)
               WHEN (p_node).claim_hash IS DISTINCT FROM p_hash THEN
                   format('%s: stale claim on node %s: the secret presented is not its current claim',
                          p_call, p_node_id)
               WHEN NOT (p_node).node_state = ANY (p_states) THEN
                   format('%s: node %s is %s, expected one of %s', p_call, p_node_id, (p_node).node_state, p_states)
               WHEN p_live_lease AND (p_node).lease_until <= p_now THEN
                   format('%s: the claim on node %s expired at %s', p_call, p_node_id, (p_node).lease_until)
           END;
$$;
