-- claim_refusals: why a completion call may not go on with the nodes
-- p_node_ids, each read as it is after the guard's locks (locked when its
-- secret was right), p_hashes[i] the claim_hash of the secret presented for
-- node i (NULL: malformed). One row per element, in order (ord), code NULL
-- where the node may go on. The fencing rule of every completion call,
-- written once, for the batch guard (lock_claimed_nodes) and the one-node
-- guard (lock_claimed_node); one call per guard, not one per node (a function
-- the installer pins a search_path on is never inlined).
--   QT002  the secret is malformed (NULL, or not the 64 characters a claim
--          hands out)
--   QT011  no such node
--   QT030  the secret is not the node's current claim (fencing: another
--          worker, or recovery, holds it now, or it was never this caller's),
--          or p_live_lease and the claim's lease has run out at p_now
--   QT021  the node is in none of p_states, or p_claims is 'dispatched' and
--          the claim is not a dispatcher's: a dispatcher's claim writes the
--          node's intent at its claim_token (claim_ready_nodes), a recovery's
--          claim takes the node with the intents it has (claim_recovery_nodes)
--          and is reported by complete_recovery alone. Taken by the
--          dispatcher's calls, a recovery's claim would give a node whose
--          transaction may be out back to READY, to be sent again.
-- No message names a secret, a hash or a claim token. Internal.
CREATE OR REPLACE FUNCTION claim_refusals(
    p_call       text,
    p_node_ids   bigint[],
    p_hashes     bytea[],
    p_states     qtg.node_state[],
    p_live_lease boolean,
    p_now        timestamptz,
    p_claims     text
) RETURNS TABLE (ord bigint, code text, message text)
LANGUAGE sql STABLE
AS $$
    SELECT i.ord,
           CASE
               WHEN i.claim_hash IS NULL THEN 'QT002'
               WHEN n.id IS NULL THEN 'QT011'
               WHEN NOT claim_held(i.claim_hash, n.claim_hash, n.id, n.claim_token, n.xmin, p_claims) THEN 'QT030'
               WHEN NOT n.node_state = ANY (p_states) THEN 'QT021'
               WHEN p_claims = 'dispatched' AND NOT dispatched THEN 'QT021'
               WHEN p_live_lease AND n.lease_until <= p_now THEN 'QT030'
           END,
           CASE
               WHEN i.claim_hash IS NULL THEN
                   format('%s: the claim secret for node %s is malformed: a claim hands out 64 characters',
                          p_call, i.node_id)
               WHEN n.id IS NULL THEN format('%s: node %s does not exist', p_call, i.node_id)
               WHEN NOT claim_held(i.claim_hash, n.claim_hash, n.id, n.claim_token, n.xmin, p_claims) THEN
                   format('%s: stale claim on node %s: the secret presented is not its current claim',
                          p_call, i.node_id)
               WHEN NOT n.node_state = ANY (p_states) THEN
                   format('%s: node %s is %s, expected one of %s', p_call, i.node_id, n.node_state, p_states)
               WHEN p_claims = 'dispatched' AND NOT dispatched THEN
                   format('%s: node %s is held by a recovery''s claim, not a dispatcher''s: '
                          'complete_recovery reports it', p_call, i.node_id)
               WHEN p_live_lease AND n.lease_until <= p_now THEN
                   format('%s: the claim on node %s expired at %s', p_call, i.node_id, n.lease_until)
           END
      FROM unnest(p_node_ids, p_hashes) WITH ORDINALITY AS i(node_id, claim_hash, ord)
      LEFT JOIN movement_request_nodes n ON n.id = i.node_id
     CROSS JOIN LATERAL (
           SELECT p_claims <> 'dispatched'
                  OR EXISTS (SELECT 1 FROM node_intents t
                              WHERE t.node_id = n.id AND t.claim_token = n.claim_token) AS dispatched
           ) d
     ORDER BY i.ord;
$$;
