-- node_retry_refusals: why each FAILED node may not be retried
-- (requeue_node), one row a node that may not, none for a node that may: the
-- one statement of the rule, which requeue_node raises (code, message, hint)
-- and retryable_nodes lists by. A FAILED node is retried only when nothing
-- of it can have happened; a movement's FAILED nodes are retried together
-- (every SKIPPED node was skipped for one of them), so a node is refused
-- when it, or another FAILED node of its movement, is refused for itself:
--   QT020  its movement is not FAILED or EXECUTING, is being stopped, or is
--          past its expiry (expires_at, not waived)
--   QT021  it is quarantined, has no claim recorded, any trace of a send is
--          recorded (an intent prepared or submitted, a nonce, a signed
--          transaction, an exchange request id or an external reference on
--          an intent or the node, the node submitted: it may have happened),
--          or it was retried 3 times already
-- The node's own first refusal (QT020 before QT021), else the first of the
-- other FAILED nodes of its movement, by id, in words that name that node.
-- Read for one node (WHERE node_id = ...) by its key, the other FAILED
-- nodes by their movement's.
CREATE OR REPLACE VIEW node_retry_refusals AS
SELECT node.id AS node_id, r.code, r.message, r.hint
  FROM movement_request_nodes node
  JOIN movement_requests m ON m.id = node.request_id
 CROSS JOIN LATERAL (
       SELECT x.code,
              CASE WHEN f.id = node.id THEN x.message
                   ELSE format('movement %s''s FAILED nodes are retried together, and node %s is not: %s',
                               m.id, f.id, x.message) END,
              x.hint
         FROM movement_request_nodes f
        CROSS JOIN LATERAL (
              SELECT 'QT021', format('node %s is FAILED and quarantined: it is not retried', f.id),
                     'release_quarantine first.'
               WHERE f.quarantined_at IS NOT NULL
              UNION ALL
              SELECT 'QT021', format('node %s FAILED with no claim recorded: it is not retried', f.id),
                     'A new movement moves the money again.'
               WHERE NOT EXISTS (SELECT 1 FROM node_intents i WHERE i.node_id = f.id)
              UNION ALL
              SELECT 'QT021',
                     format('node %s FAILED after its side effect was prepared: it may have happened, and is not retried',
                            f.id),
                     'Only a node of which nothing was signed, recorded or sent is retried; a new movement moves '
                     'the money again once its evidence is read.'
               WHERE f.submitted_at IS NOT NULL OR f.external_ref IS NOT NULL
                  OR EXISTS (SELECT 1 FROM node_intents i
                              WHERE i.node_id = f.id
                                AND (i.prepared_at IS NOT NULL OR i.intent_state IN ('PREPARED', 'SUBMITTED')
                                     OR i.nonce IS NOT NULL OR i.signed_tx_hash IS NOT NULL
                                     OR cardinality(i.signed_tx_hashes) > 0 OR i.external_request_id IS NOT NULL
                                     OR i.external_ref IS NOT NULL OR i.prepared_payload IS NOT NULL))
              UNION ALL
              SELECT 'QT021', format('node %s was retried 3 times already: it is not retried again', f.id),
                     'Find why it fails; a new movement once it is fixed.'
               WHERE (SELECT count(*) FROM node_requeues q
                       WHERE q.node_id = f.id AND q.state = 'APPLIED' AND q.from_state = 'FAILED') >= 3
              UNION ALL
              SELECT 'QT020', format('movement %s of node %s is %s: its node is not retried', m.id, f.id,
                                     CASE WHEN m.stop_reason IS NOT NULL THEN 'being stopped (' || m.stop_reason || ')'
                                          WHEN m.request_state NOT IN ('FAILED', 'EXECUTING') THEN m.request_state::text
                                          ELSE 'past its expiry (' || m.expires_at || ')' END),
                     'A cancelled or expired movement starts no new side effect.'
               WHERE m.stop_reason IS NOT NULL OR m.request_state NOT IN ('FAILED', 'EXECUTING')
                  OR (m.expires_at <= clock() AND m.expiry_waived_at IS NULL)
              ORDER BY 1
              LIMIT 1) x(code, message, hint)
        WHERE f.request_id = node.request_id AND f.node_state = 'FAILED'
        ORDER BY f.id <> node.id, x.code, f.id
        LIMIT 1) r(code, message, hint)
 WHERE node.node_state = 'FAILED';
