-- record_intent_prepared_batch: record_intent_prepared for many nodes in one
-- call and one transaction, set-based. Per node: intent CLAIMED | PREPARED ->
-- PREPARED; the node stays SUBMITTING.
--
-- Element i of every array describes one node (arrays of equal length, no node
-- twice, at most 1000; QT002 otherwise, and nothing changes). Every rule of
-- record_intent_prepared holds per node, and a node that breaks one is left
-- unchanged and reported in its row instead of failing the batch:
--   QT011 no such node; QT030 stale claim token, or the claim's lease ran out
--   (do not broadcast: recovery may own it); QT021 not SUBMITTING, or no open
--   intent for the token; QT002 neither a signed tx hash, an external request
--   id nor a payload.
-- A recorded node gets one intent_prepared audit row (actor: the claimer),
-- exactly as record_intent_prepared writes it; signed_tx_hashes keeps every
-- hash ever signed.
-- Locks: the nodes' requests in id order, then the nodes in id order, then
-- their intents (the documented order; two batches never wait on each other
-- in a cycle). Statements are planned per call (force_custom_plan): a batch
-- runs a handful of statements, and node_intents grows from empty, so a plan
-- cached while it was small would scan it whole.
-- Returns one row per element, in input order: the intent id, or the error.
CREATE OR REPLACE FUNCTION record_intent_prepared_batch(
    p_node_ids             bigint[],
    p_claim_tokens         bigint[],
    p_nonces               bigint[] DEFAULT NULL,
    p_signed_tx_hashes     text[] DEFAULT NULL,
    p_external_request_ids text[] DEFAULT NULL,
    p_payloads             jsonb[] DEFAULT NULL
) RETURNS TABLE (node_id bigint, intent_id bigint, error_code text, error_message text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_now timestamptz := clock();
    v_n   integer := coalesce(cardinality(p_node_ids), 0);
BEGIN
    IF coalesce(cardinality(p_claim_tokens), 0) <> v_n
       OR (p_nonces IS NOT NULL AND cardinality(p_nonces) <> v_n)
       OR (p_signed_tx_hashes IS NOT NULL AND cardinality(p_signed_tx_hashes) <> v_n)
       OR (p_external_request_ids IS NOT NULL AND cardinality(p_external_request_ids) <> v_n)
       OR (p_payloads IS NOT NULL AND cardinality(p_payloads) <> v_n) THEN
        RAISE EXCEPTION 'record_intent_prepared_batch: every array must have one element per node (% nodes)', v_n
            USING ERRCODE = 'QT002';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- the lock order: requests, then nodes (intents are locked by the UPDATE below)
    PERFORM lock_node_batch('record_intent_prepared_batch', p_node_ids);

    RETURN QUERY
    WITH input AS (
        SELECT u.node_id, u.claim_token, u.nonce, u.signed_tx_hash, u.external_request_id, u.payload, u.ord
          FROM unnest(p_node_ids, p_claim_tokens,
                      coalesce(p_nonces, array_fill(NULL::bigint, ARRAY[v_n])),
                      coalesce(p_signed_tx_hashes, array_fill(NULL::text, ARRAY[v_n])),
                      coalesce(p_external_request_ids, array_fill(NULL::text, ARRAY[v_n])),
                      coalesce(p_payloads, array_fill(NULL::jsonb, ARRAY[v_n])))
               WITH ORDINALITY AS u(node_id, claim_token, nonce, signed_tx_hash, external_request_id, payload, ord)
    ), checked AS (
        SELECT i.*, n.request_id, n.claimed_by, n.claim_token AS current_token, n.node_state, n.lease_until,
               CASE
                   WHEN n.id IS NULL THEN 'QT011'
                   WHEN i.claim_token IS DISTINCT FROM n.claim_token THEN 'QT030'
                   WHEN n.node_state <> 'SUBMITTING' THEN 'QT021'
                   WHEN n.lease_until <= v_now THEN 'QT030'
                   WHEN i.signed_tx_hash IS NULL AND i.external_request_id IS NULL AND i.payload IS NULL THEN 'QT002'
               END AS error_code,
               CASE
                   WHEN n.id IS NULL THEN format('record_intent_prepared: node %s does not exist', i.node_id)
                   WHEN i.claim_token IS DISTINCT FROM n.claim_token THEN
                       format('record_intent_prepared: stale claim on node %s: it holds token %s, the call presented %s',
                              i.node_id, n.claim_token, i.claim_token)
                   WHEN n.node_state <> 'SUBMITTING' THEN
                       format('record_intent_prepared: node %s is %s, expected one of {SUBMITTING}', i.node_id, n.node_state)
                   WHEN n.lease_until <= v_now THEN
                       format('record_intent_prepared: the claim on node %s expired at %s', i.node_id, n.lease_until)
                   WHEN i.signed_tx_hash IS NULL AND i.external_request_id IS NULL AND i.payload IS NULL THEN
                       'record_intent_prepared: give a signed tx hash, an external request id or a payload'
               END AS error_message
          FROM input i
          LEFT JOIN movement_request_nodes n ON n.id = i.node_id
    ), prepared AS (
        UPDATE node_intents t
           SET intent_state        = 'PREPARED',
               nonce               = coalesce(c.nonce, t.nonce),
               signed_tx_hash      = coalesce(c.signed_tx_hash, t.signed_tx_hash),
               signed_tx_hashes    = CASE WHEN c.signed_tx_hash IS NULL OR c.signed_tx_hash = ANY (t.signed_tx_hashes)
                                          THEN t.signed_tx_hashes ELSE t.signed_tx_hashes || c.signed_tx_hash END,
               external_request_id = coalesce(c.external_request_id, t.external_request_id),
               prepared_payload    = coalesce(c.payload, t.prepared_payload),
               prepared_at         = v_now
          FROM checked c
         WHERE c.error_code IS NULL
           AND t.node_id = c.node_id
           AND t.claim_token = c.claim_token
           AND t.intent_state IN ('CLAIMED', 'PREPARED')
        RETURNING t.id, t.node_id
    ), audited AS (
        INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
        SELECT v_now, coalesce(c.claimed_by, session_user), 'node', c.node_id::text, c.request_id, 'intent_prepared',
               'SUBMITTING', 'SUBMITTING',
               jsonb_build_object('intent_id', p.id, 'nonce', c.nonce, 'signed_tx_hash', c.signed_tx_hash,
                                  'external_request_id', c.external_request_id)
          FROM checked c
          JOIN prepared p ON p.node_id = c.node_id
        ORDER BY c.ord
    )
    SELECT c.node_id,
           p.id,
           coalesce(c.error_code, CASE WHEN p.id IS NULL THEN 'QT021' END),
           coalesce(c.error_message,
                    CASE WHEN p.id IS NULL THEN
                        format('record_intent_prepared: node %s has no open intent for token %s', c.node_id, c.claim_token)
                    END)
      FROM checked c
      LEFT JOIN prepared p ON p.node_id = c.node_id
     ORDER BY c.ord;
END
$$;

COMMENT ON FUNCTION record_intent_prepared_batch IS 'access: runner';
