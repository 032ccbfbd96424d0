-- paid_in_deposits: the deposits a node spends from a venue after: for each
-- bybit_deposit parent of the node, its key and state and the deposit its
-- latest intent recorded (prepared or submitted: the venue, its name of the
-- chain, the coin, the deposit address, the transfer's hash, the amount and
-- since when the venue's records are read), with payload_problem: NULL, or
-- why that record is not what its route and its paying parent say now
-- (intent_payload_problem; 'no recorded deposit' when none was recorded).
-- A parent's COMPLETED is a runner's word: the bybit_withdraw executor reads
-- each of these deposits credited at the venue before it requests anything
-- (verify before spending). No row for a node without such a parent.
-- QT011 no such node. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION paid_in_deposits(p_node_id bigint)
RETURNS TABLE (
    node_key        text,
    node_state      qtg.node_state,
    payload         jsonb,
    payload_problem text
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM movement_request_nodes n WHERE n.id = p_node_id) THEN
        RAISE EXCEPTION 'paid_in_deposits: node % does not exist', coalesce(p_node_id::text, 'NULL')
            USING ERRCODE = 'QT011', HINT = 'Pass the id of a node of a bybit_withdraw step.';
    END IF;
    RETURN QUERY
    SELECT parent.node_key, parent.node_state, i.prepared_payload,
           CASE WHEN i.prepared_payload IS NULL THEN 'no recorded deposit'
                ELSE substr(intent_payload_problem(parent.id, i.idempotency_key, i.prepared_payload,
                                                   i.external_request_id), 7) END
      FROM movement_plan_edges edge
      JOIN movement_request_nodes parent ON parent.id = edge.parent_node_id
      LEFT JOIN LATERAL (SELECT t.* FROM node_intents t
                          WHERE t.node_id = parent.id AND t.intent_state IN ('PREPARED', 'SUBMITTED')
                          ORDER BY t.claim_token DESC LIMIT 1) i ON true
     WHERE edge.child_node_id = p_node_id AND parent.executor_key = 'bybit_deposit'
     ORDER BY parent.node_key;
END
$$;
