-- record_intent_prepared_batch: record_intent_prepared for many nodes in one
-- call and one transaction, set-based. Per node: intent CLAIMED | PREPARED ->
-- PREPARED; the node stays SUBMITTING.
--
-- Element i of every array describes one node (arrays of equal length, no node
-- twice, at most 1000; QT002 otherwise, and nothing changes). Every rule of
-- record_intent_prepared holds per node, and a node that breaks one is left
-- unchanged and reported in its row instead of failing the batch:
--   QT011 no such node; QT030 not the node's current claim secret, or the
--   claim's lease ran out (do not broadcast: recovery may own it); QT021 not
--   SUBMITTING, no open intent for the current claim, or an intent already
--   PREPARED recorded again as another side effect (another nonce or external
--   request id; without either, another hash or payload); QT002 a malformed
--   secret, or neither a signed tx hash, an external request id nor a
--   payload; QT005 a payload or a text beyond engine_limits; QT050 a record the
--   engine cannot apply to its node (it breaks a constraint inside the engine:
--   the others are recorded all the same).
-- A node presented with a wrong secret is never locked.
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
    p_claim_secrets        text[],
    p_nonces               bigint[] DEFAULT NULL,
    p_signed_tx_hashes     text[] DEFAULT NULL,
    p_external_request_ids text[] DEFAULT NULL,
    p_payloads             jsonb[] DEFAULT NULL
) RETURNS TABLE (node_id bigint, intent_id bigint, error_code text, error_message text)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := clock();
    v_n        integer := coalesce(cardinality(p_node_ids), 0);
    v_codes    text[];
    v_messages text[];
    v_intents  bigint[];
    v_mask     text[];     -- NULL for each node this round applies
    v_round    integer;
BEGIN
    IF coalesce(cardinality(p_claim_secrets), 0) <> v_n
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
    SELECT * INTO v_codes, v_messages
      FROM lock_claimed_nodes('record_intent_prepared', p_node_ids, p_claim_secrets, '{SUBMITTING}',
                              p_live_lease => true);
    SELECT * INTO v_codes, v_messages
      FROM limit_refusals('record_intent_prepared', p_node_ids, p_payloads, p_signed_tx_hashes,
                          p_external_request_ids, v_codes, v_messages);

    -- each node's record on its own (apply_each, as complete_submit_batch
    -- does): should one node break a rule inside the engine, the statement runs
    -- again for one node at a time, and that node alone is refused (QT050)
    v_intents := array_fill(NULL::bigint, ARRAY[v_n]);
    v_mask := v_codes;
    <<apply_each>>
    FOR v_round IN 0 .. v_n LOOP
        IF v_round > 0 THEN
            CONTINUE apply_each WHEN v_codes[v_round] IS NOT NULL;
            v_mask := array_fill('-'::text, ARRAY[v_n]);
            v_mask[v_round] := NULL;
        END IF;
        BEGIN
            WITH input AS (
                SELECT u.*,
                       CASE WHEN u.nonce < 0 THEN 'QT002'
                            WHEN u.signed_tx_hash IS NULL AND u.external_request_id IS NULL
                                 AND u.payload IS NULL THEN 'QT002' END AS refusal,
                       CASE WHEN u.nonce < 0 THEN format('record_intent_prepared: node %s: a nonce is not negative, got %s',
                                                         u.node_id, u.nonce)
                            ELSE 'record_intent_prepared: give a signed tx hash, an external request id or a payload'
                       END AS reason
                  FROM unnest(p_node_ids,
                              coalesce(p_nonces, array_fill(NULL::bigint, ARRAY[v_n])),
                              coalesce(p_signed_tx_hashes, array_fill(NULL::text, ARRAY[v_n])),
                              coalesce(p_external_request_ids, array_fill(NULL::text, ARRAY[v_n])),
                              coalesce(p_payloads, array_fill(NULL::jsonb, ARRAY[v_n])),
                              v_mask)
                       WITH ORDINALITY AS u(node_id, nonce, signed_tx_hash, external_request_id, payload, skip, ord)
                 WHERE u.skip IS NULL
            ), checked AS (
                -- a PREPARED intent is re-recorded only as the same side effect: the same
                -- nonce (a replacement, e.g. a fee bump, may carry a new signed hash), the
                -- same external request id, and without either the same hash and payload
                SELECT i.node_id, i.nonce, i.signed_tx_hash, i.external_request_id, i.payload, i.ord,
                       coalesce(i.refusal, CASE WHEN t.intent_state = 'PREPARED' AND NOT (
                                coalesce(i.nonce, t.nonce) IS NOT DISTINCT FROM t.nonce
                            AND coalesce(i.external_request_id, t.external_request_id)
                                    IS NOT DISTINCT FROM t.external_request_id
                            AND (t.nonce IS NOT NULL OR (
                                     coalesce(i.signed_tx_hash, t.signed_tx_hash) IS NOT DISTINCT FROM t.signed_tx_hash
                                 AND coalesce(i.payload, t.prepared_payload) IS NOT DISTINCT FROM t.prepared_payload)))
                            THEN 'QT021' END) AS refusal,
                       CASE WHEN i.refusal IS NOT NULL THEN i.reason
                            ELSE format('record_intent_prepared: node %s already has a prepared side effect; a new record must '
                                        'keep it (the same nonce, external request id, or hash and payload)', i.node_id)
                       END AS reason
                  FROM input i
                  LEFT JOIN movement_request_nodes n ON n.id = i.node_id
                  LEFT JOIN node_intents t ON t.node_id = i.node_id AND t.claim_token = n.claim_token
            ), prepared AS (
                UPDATE node_intents t
                   SET intent_state        = 'PREPARED',
                       nonce               = coalesce(i.nonce, t.nonce),
                       signed_tx_hash      = coalesce(i.signed_tx_hash, t.signed_tx_hash),
                       signed_tx_hashes    = CASE WHEN i.signed_tx_hash IS NULL OR i.signed_tx_hash = ANY (t.signed_tx_hashes)
                                                  THEN t.signed_tx_hashes ELSE t.signed_tx_hashes || i.signed_tx_hash END,
                       external_request_id = coalesce(i.external_request_id, t.external_request_id),
                       prepared_payload    = coalesce(i.payload, t.prepared_payload),
                       prepared_at         = v_now
                  FROM checked i
                  JOIN movement_request_nodes n ON n.id = i.node_id
                 WHERE i.refusal IS NULL
                   AND t.node_id = i.node_id
                   AND t.claim_token = n.claim_token
                   AND t.intent_state IN ('CLAIMED', 'PREPARED')
                RETURNING t.id, t.node_id
            ), audited AS (
                SELECT write_audit(array_agg((n.claimed_by, 'node', i.node_id::text, n.request_id, 'intent_prepared',
                                              'SUBMITTING', 'SUBMITTING',
                                              jsonb_build_object('intent_id', p.id, 'nonce', i.nonce,
                                                                 'signed_tx_hash', i.signed_tx_hash,
                                                                 'external_request_id', i.external_request_id)
                                             )::qtg.audit_event ORDER BY i.ord)) AS written
                  FROM checked i
                  JOIN prepared p ON p.node_id = i.node_id
                  JOIN movement_request_nodes n ON n.id = i.node_id
            ), answered AS (
                SELECT i.ord, p.id AS intent_id,
                       coalesce(i.refusal, CASE WHEN p.id IS NULL THEN 'QT021' END) AS code,
                       CASE
                           WHEN i.refusal IS NOT NULL THEN i.reason
                           WHEN p.id IS NULL THEN
                               format('record_intent_prepared: node %s has no open intent for its current claim', i.node_id)
                       END AS message
                  FROM checked i
                  LEFT JOIN prepared p ON p.node_id = i.node_id
                 CROSS JOIN audited
            )
            SELECT array_agg(coalesce(a.intent_id, v_intents[o.ord]) ORDER BY o.ord),
                   array_agg(CASE WHEN a.ord IS NULL THEN v_codes[o.ord] ELSE a.code END ORDER BY o.ord),
                   array_agg(CASE WHEN a.ord IS NULL THEN v_messages[o.ord] ELSE a.message END ORDER BY o.ord)
              INTO v_intents, v_codes, v_messages
              FROM generate_series(1, v_n) AS o(ord)
              LEFT JOIN answered a ON a.ord = o.ord;
            EXIT apply_each WHEN v_round = 0;
        EXCEPTION WHEN OTHERS THEN
            IF transient_error(SQLSTATE) THEN
                RAISE;
            END IF;
            IF v_round > 0 THEN
                v_codes[v_round] := 'QT050';
                v_messages[v_round] := format('record_intent_prepared: node %s: its record could not be applied: %s (%s)',
                                              p_node_ids[v_round], SQLERRM, SQLSTATE);
            END IF;
        END;
    END LOOP;

    RETURN QUERY
    SELECT u.node_id, u.intent_id, u.error_code, u.error_message
      FROM unnest(p_node_ids, v_intents, v_codes, v_messages) AS u(node_id, intent_id, error_code, error_message);
END
$$;
