-- quarantine_release: release_quarantine as a procedure, for CALL in psql: a
-- quarantined node back into circulation in its state, due at once, on one
-- operator's word, with a reason.
--   CALL quarantine_release(812, 'the executor was fixed');
-- Answers the node's state in the INOUT parameter node_state. The rules, the
-- refusals and the writes are release_quarantine's.
CREATE OR REPLACE PROCEDURE quarantine_release(
    p_node_id bigint,
    p_reason  text,
    INOUT node_state qtg.node_state DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT release_quarantine(p_node_id, p_reason);
$$;
