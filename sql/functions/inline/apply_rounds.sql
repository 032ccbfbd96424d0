-- apply_rounds: the rounds of a batch call's per-node fallback (the apply_each
-- loop of complete_submit_batch, complete_observe_batch,
-- record_intent_prepared_batch and release_nodes), in the order they run:
-- 0, the whole batch (every node not refused already in p_codes, the guard's
-- and the checks' error codes, one per node), then, should it fail, each node
-- not refused already, alone: round r is node r. A node refused already has
-- no round of its own. Which nodes a round applies: apply_mask. Inlined where
-- it is called (sql/functions/inline/).
CREATE OR REPLACE FUNCTION apply_rounds(p_codes text[]) RETURNS integer[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT 0 || array_positions(p_codes, NULL::text);
$$;
