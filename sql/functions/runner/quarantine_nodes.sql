-- quarantine_nodes: a runner sets aside the claimed nodes that broke its
-- worker: SUBMITTING | SUBMITTED | OBSERVING | UNKNOWN stay as they are,
-- quarantined (set_quarantine). For an executor that raised something it never
-- should (not an ExecutorError: a bug, or a config it cannot handle), or an
-- outcome the engine could not apply to the node (QT050): retrying would fail
-- the same way, so no claim hands the node out again until an operator
-- releases it (release_quarantine). p_errors[i] is why, shown in the
-- quarantined_nodes view.
--
-- Element i of each array is one node (equal lengths, each node once, at most
-- 1000: QT002 otherwise, and nothing changes). Each node is proven by its
-- claim's secret (the dispatcher's, the observer's or recovery's). A refused
-- node is reported in its row and left as it was: QT002 malformed secret or no
-- error given, QT011 no such node, QT030 not the node's current claim, QT021
-- not in one of the states above, QT005 an error beyond engine_limits.
-- Locks: the nodes' movements, then the nodes (id order).
-- Returns one row per element, in input order: the node's state, or the error.
CREATE OR REPLACE FUNCTION quarantine_nodes(p_node_ids bigint[], p_claim_secrets text[], p_errors text[])
RETURNS TABLE (node_id bigint, node_state qtg.node_state, error_code text, error_message text)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_n        integer := coalesce(cardinality(p_node_ids), 0);
    v_codes    text[];
    v_messages text[];
BEGIN
    PERFORM check_read_committed('quarantine_nodes');
    IF coalesce(cardinality(p_errors), 0) <> v_n THEN
        RAISE EXCEPTION 'quarantine_nodes: give one error per node (% nodes)', v_n
            USING ERRCODE = 'QT002', HINT = 'Say for each node what went wrong.';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO v_codes, v_messages
      FROM lock_claimed_nodes('quarantine_nodes', p_node_ids, p_claim_secrets,
                              '{SUBMITTING,SUBMITTED,OBSERVING,UNKNOWN}', p_claims => 'any');
    SELECT * INTO v_codes, v_messages
      FROM limit_refusals('quarantine_nodes', p_node_ids, NULL, p_errors, NULL, v_codes, v_messages);
    SELECT array_agg(coalesce(u.code, CASE WHEN u.error IS NULL OR btrim(u.error) = '' THEN 'QT002' END)
                     ORDER BY u.ord),
           array_agg(coalesce(u.message, CASE WHEN u.error IS NULL OR btrim(u.error) = '' THEN
                         format('quarantine_nodes: say why node %s is quarantined', u.node_id) END)
                     ORDER BY u.ord)
      INTO v_codes, v_messages
      FROM unnest(p_node_ids, p_errors, v_codes, v_messages) WITH ORDINALITY AS u(node_id, error, code, message, ord);

    PERFORM set_quarantine(array_agg(u.node_id ORDER BY u.ord), array_agg(u.error ORDER BY u.ord),
                           array_agg(n.claimed_by ORDER BY u.ord))
       FROM unnest(p_node_ids, p_errors, v_codes) WITH ORDINALITY AS u(node_id, error, code, ord)
       JOIN movement_request_nodes n ON n.id = u.node_id
      WHERE u.code IS NULL
     HAVING count(*) > 0;

    RETURN QUERY
    SELECT a.node_id, a.node_state, a.error_code, a.error_message
      FROM apply_answers(p_node_ids, v_codes, v_messages) a;
END
$$;
