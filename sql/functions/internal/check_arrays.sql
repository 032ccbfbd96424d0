-- check_arrays: the batch calls' rule that element i of every array describes
-- node i (complete_submit_batch, complete_observe_batch,
-- record_intent_prepared_batch): each array of p_required (their
-- cardinalities; a NULL array counts as empty) has p_n elements, and so has
-- each of p_optional that was given (NULL: not given). QT002 otherwise,
-- naming p_call and the number of nodes, and nothing changes. Internal; reads
-- nothing.
CREATE OR REPLACE FUNCTION check_arrays(
    p_call     text,
    p_n        integer,
    p_required integer[],
    p_optional integer[] DEFAULT '{}'
) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF NOT (p_n = ALL (array_replace(p_required, NULL, 0)) AND p_n = ALL (array_remove(p_optional, NULL))) THEN
        RAISE EXCEPTION '%: every array must have one element per node (% nodes)', p_call, p_n
            USING ERRCODE = 'QT002';
    END IF;
END
$$;
