-- check_claims: whether the dispatcher still holds its claims, asked just
-- before it makes their external calls. A node's claim holds while the node
-- is SUBMITTING under that claim's secret and its lease has not run out: a
-- dispatcher that froze after recording its intents may have been replaced
-- by recovery (a new claim, a new secret), which resubmits the prepared
-- payload itself; the stale dispatcher must then not send it again.
-- The rule is lock_claimed_nodes' (with a live lease), so the answer is the
-- one the dispatcher's reports would get: per node NULL (go on) or QT011,
-- QT021, QT030 with the reason; QT002 for malformed input (nothing checked).
-- The rows are locked only for the call's statement (the call commits at
-- once). Changes nothing.
-- Returns one row per element, in input order.
CREATE OR REPLACE FUNCTION check_claims(p_node_ids bigint[], p_claim_secrets text[])
RETURNS TABLE (node_id bigint, error_code text, error_message text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_codes    text[];
    v_messages text[];
BEGIN
    PERFORM check_read_committed('check_claims');
    IF coalesce(cardinality(p_claim_secrets), 0) <> coalesce(cardinality(p_node_ids), 0) THEN
        RAISE EXCEPTION 'check_claims: one claim secret per node (% nodes, % secrets)',
                        coalesce(cardinality(p_node_ids), 0), coalesce(cardinality(p_claim_secrets), 0)
            USING ERRCODE = 'QT002';
    END IF;
    SELECT * INTO v_codes, v_messages
      FROM lock_claimed_nodes('check_claims', p_node_ids, p_claim_secrets, '{SUBMITTING}', p_live_lease => true);
    RETURN QUERY
    SELECT u.node_id, u.error_code, u.error_message
      FROM unnest(p_node_ids, v_codes, v_messages) AS u(node_id, error_code, error_message);
END
$$;
