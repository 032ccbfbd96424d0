-- recovery_evidence_problem: why a COMPLETED or FAILED verdict of recovery on
-- a node whose side effect may be out (has_side_effect, its latest intent
-- PREPARED or SUBMITTED) does not stand on its executor's evidence, or NULL
-- when it does (and for any other outcome or node, save the first rule
-- below, which holds for every outcome). Checked in SQL as far as SQL can
-- see the side effect:
--   QT032 a bybit_withdraw verdict naming a withdrawal id another node holds
--         already (one withdrawal settles one node; the unique index
--         movement_request_nodes_withdrawal_ref_key holds it on every path)
--   QT002 no evidence: a verdict on money needs a JSON object that shows it
--   QT032 the intent's payload is no longer what its route says
--         (intent_payload_problem): nothing is concluded from it; an EVM
--         intent's verdict names (as its external reference) a transaction
--         that is not one the intent signed; a bybit_withdraw verdict for
--         another requestId than the intent's, COMPLETED without the
--         withdrawal's id and the chain's Transfer of exactly the recorded
--         amount to the recorded recipient, FAILED without the venue's final
--         status (Fail, Reject, CancelByUser) or its refusal of the request
--         (found: false)
-- The answer is 'QTnnn message'. Reads only. Internal: complete_recovery.
CREATE OR REPLACE FUNCTION recovery_evidence_problem(
    p_node_id      bigint,
    p_outcome      text,
    p_evidence     jsonb,
    p_external_ref text
) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_what    text := format('complete_recovery: node %s', p_node_id);
    v_node    movement_request_nodes;
    v_intent  node_intents;
    v_ref     text;
    v_problem text;
    v_other   bigint;
BEGIN
    SELECT * INTO v_node FROM movement_request_nodes WHERE id = p_node_id;
    -- whatever the outcome: a withdrawal another node holds is never this one's
    -- (movement_request_nodes_withdrawal_ref_key holds it on every other path)
    IF v_node.executor_key = 'bybit_withdraw' AND p_external_ref IS NOT NULL THEN
        SELECT o.id INTO v_other FROM movement_request_nodes o
         WHERE o.executor_key = 'bybit_withdraw' AND o.external_ref = p_external_ref AND o.id <> p_node_id
         LIMIT 1;
        IF v_other IS NOT NULL THEN
            RETURN format('QT032 %s: withdrawal %s belongs to node %s already: one withdrawal settles one node',
                          v_what, left(p_external_ref, 70), v_other);
        END IF;
    END IF;
    IF p_outcome NOT IN ('COMPLETED', 'FAILED') THEN
        RETURN NULL;
    END IF;
    SELECT * INTO v_intent FROM node_intents WHERE node_id = p_node_id ORDER BY claim_token DESC LIMIT 1;
    IF NOT v_node.has_side_effect OR v_intent.intent_state IS NULL
       OR v_intent.intent_state NOT IN ('PREPARED', 'SUBMITTED') THEN
        RETURN NULL;
    END IF;
    IF p_evidence IS NULL OR jsonb_typeof(p_evidence) <> 'object' OR p_evidence = '{}'::jsonb THEN
        RETURN format('QT002 %s: %s on a side effect that may be out needs the executor''s evidence (a JSON object '
                      'that shows it)', v_what, p_outcome);
    END IF;
    v_problem := intent_payload_problem(p_node_id, v_intent.idempotency_key, v_intent.prepared_payload,
                                        v_intent.external_request_id);
    IF v_problem IS NOT NULL THEN
        RETURN format('QT032 %s: nothing is concluded from the recorded intent: %s', v_what, substr(v_problem, 7));
    END IF;
    v_ref := coalesce(p_external_ref, v_node.external_ref);
    IF v_intent.chain_key IS NOT NULL AND (v_ref IS NULL OR NOT v_ref = ANY (v_intent.signed_tx_hashes)) THEN
        RETURN format('QT032 %s: %s names transaction %s, not one the intent signed (%s)', v_what, p_outcome,
                      coalesce(left(v_ref, 70), 'none'), array_to_string(v_intent.signed_tx_hashes, ', '));
    END IF;
    IF v_node.executor_key = 'bybit_withdraw' THEN
        IF p_evidence ->> 'request_id' IS DISTINCT FROM v_intent.external_request_id THEN
            RETURN format('QT032 %s: the evidence is of requestId %s, the intent''s is %s', v_what,
                          coalesce(left(p_evidence ->> 'request_id', 70), 'none'), v_intent.external_request_id);
        END IF;
        IF p_outcome = 'COMPLETED' AND NOT (
               v_ref IS NOT NULL
               AND p_evidence -> 'transfer' ->> 'to' = v_intent.prepared_payload ->> 'recipient'
               AND json_same(p_evidence -> 'transfer' -> 'value', v_intent.prepared_payload -> 'amount_units')) THEN
            RETURN format('QT032 %s: COMPLETED needs the withdrawal''s id and the chain''s Transfer of %s base units '
                          'to %s', v_what, v_intent.prepared_payload ->> 'amount_units',
                          v_intent.prepared_payload ->> 'recipient');
        END IF;
        IF p_outcome = 'FAILED' AND NOT (
               p_evidence ->> 'status' IN ('Fail', 'Reject', 'CancelByUser') OR p_evidence -> 'found' = 'false'::jsonb) THEN
            RETURN format('QT032 %s: FAILED needs the venue''s final status (Fail, Reject, CancelByUser) or its '
                          'refusal of the request', v_what);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
