-- apply_mask: which nodes a round of a batch call's per-node fallback (the
-- apply_each loop of complete_submit_batch, complete_observe_batch,
-- record_intent_prepared_batch and release_nodes; its rounds: apply_rounds)
-- applies: NULL for each node the round applies, not NULL for the others (the
-- loop's statement skips them). Round 0 is the whole batch: every node not
-- already refused in p_codes (the guard's and the checks' error codes, one per
-- node). Round r (1 to the batch's size) is node r alone. Inlined where it is
-- called (sql/functions/inline/).
CREATE OR REPLACE FUNCTION apply_mask(p_codes text[], p_round integer) RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_round = 0 THEN p_codes
                ELSE array_fill('-'::text, ARRAY[p_round - 1]) || NULL::text
                     || array_fill('-'::text, ARRAY[cardinality(p_codes) - p_round]) END;
$$;
