-- intent_document: a node's latest intent as the claims hand it to a runner
-- (claim_observe, claim_recovery_nodes): the node_intents row, and for an EVM
-- intent its signed transactions in the order they were recorded
-- ("transactions": [{tx_hash, nonce, purpose, raw_tx}]), so an executor checks
-- exact hashes and can rebroadcast the identical bytes; and "route_problem":
-- NULL, or why a PREPARED or SUBMITTED intent's payload is not what its
-- node's route says now (intent_payload_problem: the registry changed under
-- it, or it was never the route's), in which case the observer and recovery
-- act on nothing of it and leave the node to an operator. NULL without an
-- intent.
CREATE OR REPLACE FUNCTION intent_document(p_node_id bigint) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT to_jsonb(i)
           || jsonb_build_object('route_problem', CASE WHEN i.intent_state IN ('PREPARED', 'SUBMITTED') THEN
                  substr(intent_payload_problem(i.node_id, i.idempotency_key, i.prepared_payload,
                                                i.external_request_id), 7) END)
           || CASE WHEN i.chain_key IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('transactions',
                  (SELECT coalesce(jsonb_agg(jsonb_build_object('tx_hash', t.tx_hash, 'nonce', t.nonce,
                                                                'purpose', t.purpose, 'raw_tx', t.raw_tx)
                                             ORDER BY t.id), '[]'::jsonb)
                     FROM evm_transactions t WHERE t.intent_id = i.id)) END
      FROM node_intents i
     WHERE i.node_id = p_node_id
     ORDER BY i.claim_token DESC
     LIMIT 1
$$;
