-- apply_refusal: the outcome of a failed round of a batch call's per-node
-- fallback (the apply_each loop of complete_submit_batch,
-- complete_observe_batch, record_intent_prepared_batch and release_nodes),
-- whose caller has re-raised a transient_error already. Round 0 (the whole
-- batch) changes nothing: the loop goes on one node at a time. Round r refuses
-- node r in its row: error code QT050, message p_what (which names the call
-- and the node) with the error and its SQLSTATE, so that one node's broken
-- rule never takes back another's recorded side effect. Internal; reads and
-- locks nothing.
-- Returns the codes and messages, one per node, with node r's set.
CREATE OR REPLACE FUNCTION apply_refusal(
    p_codes    text[],
    p_messages text[],
    p_round    integer,
    p_what     text,
    p_sqlerrm  text,
    p_sqlstate text
) RETURNS TABLE (error_codes text[], error_messages text[])
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    error_codes := p_codes;
    error_messages := p_messages;
    IF p_round > 0 THEN
        error_codes[p_round] := 'QT050';
        error_messages[p_round] := format('%s: %s (%s)', p_what, p_sqlerrm, p_sqlstate);
    END IF;
    RETURN NEXT;
END
$$;
