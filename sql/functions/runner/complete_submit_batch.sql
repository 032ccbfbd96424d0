-- complete_submit_batch: SUBMITTING -> SUBMITTED | COMPLETED, for many nodes in
-- one call and one transaction, after their side effects went out. A node goes
-- SUBMITTED (its first next_observe_at from the lane's pacing), or COMPLETED
-- where p_settled says the submit itself finished the work (no observation
-- needed); the external reference (tx hash, withdrawal id) is recorded on the
-- node and its intent.
--
-- Element i of every array describes one node (arrays of equal length, no node
-- twice, at most 1000; QT002 otherwise, and nothing changes; a NULL p_settled
-- or element means false). Each node is proven by its claim's secret. A node
-- the guard refuses (lock_claimed_nodes: QT002 malformed secret; QT011 no such
-- node; QT030 not the node's current claim secret: another worker holds it
-- now, drop the result, recovery reconciles; QT021 not SUBMITTING) is left
-- unchanged, and unlocked when its secret is wrong, and reported in its row
-- instead of failing the batch, as is a report beyond engine_limits (QT005)
-- or without its external reference (QT002: NULL or blank): its node stays
-- SUBMITTING, for recovery. So is a report the engine cannot apply to its
-- node (QT050: it breaks a constraint or a range inside the engine, e.g. its
-- lane's pacing; the runner quarantines the node): one node's report never
-- takes back another's, whose side effect went out too. An error that says
-- nothing about the nodes (a lock or statement timeout, a deadlock, a lost
-- connection: transient_error) fails the call as a whole, to be made again.
-- A report that arrives after the
-- claim's lease ran out is still accepted while the secret is current (no
-- recovery has claimed the node): the side effect has happened and its
-- reference is the truth. Only record_intent_prepared refuses an expired lease,
-- because it comes before the side effect.
--
-- The nodes are moved and audited (actor: the claimer) in one statement; the
-- completed ones then take the DAG step and settle their movements through
-- finish_nodes, like every other path that finishes a node. The report ends
-- the claim (no claimer is recorded any more) and the node's lost claims.
-- Locks: the nodes' movements in id order, then the nodes in id order, then
-- their intents and children.
-- Plans: one per statement, kept for the session (force_generic_plan), as in
-- finish_nodes.
-- Returns one row per element, in input order: the node's new state, or the error.
CREATE OR REPLACE FUNCTION complete_submit_batch(
    p_node_ids      bigint[],
    p_claim_secrets text[],
    p_external_refs text[],
    p_evidence      jsonb[] DEFAULT NULL,
    p_settled       boolean[] DEFAULT NULL
) RETURNS TABLE (node_id bigint, node_state qtg.node_state, error_code text, error_message text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := clock();
    v_n        integer := coalesce(cardinality(p_node_ids), 0);
    v_codes    text[];
    v_messages text[];
    v_done     bigint[];   -- the nodes completed here,
    v_done_by  text[];     -- and their claimers
    v_round    integer;
BEGIN
    PERFORM check_read_committed('complete_submit_batch');
    PERFORM check_arrays('complete_submit_batch', v_n,
                         ARRAY[cardinality(p_claim_secrets), cardinality(p_external_refs)],
                         ARRAY[cardinality(p_evidence), cardinality(p_settled)]);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO v_codes, v_messages
      FROM lock_claimed_nodes('complete_submit', p_node_ids, p_claim_secrets, '{SUBMITTING}',
                              p_claims => 'dispatched');
    -- a report beyond engine_limits is refused in its own row (QT005): the
    -- side effects of the others went out, so their reports go on
    SELECT * INTO v_codes, v_messages
      FROM limit_refusals('complete_submit', p_node_ids, p_evidence, p_external_refs, NULL, v_codes, v_messages);
    -- so is a report without the side effect's reference (QT002): the node
    -- stays SUBMITTING, for recovery to find it by its intent
    SELECT array_agg(coalesce(u.code, CASE WHEN u.ref IS NULL OR btrim(u.ref) = '' THEN 'QT002' END) ORDER BY u.ord),
           array_agg(coalesce(u.message, CASE WHEN u.ref IS NULL OR btrim(u.ref) = '' THEN
                         format('complete_submit: node %s: no external reference (the tx hash or withdrawal id)', u.node_id)
                     END) ORDER BY u.ord)
      INTO v_codes, v_messages
      FROM unnest(p_node_ids, p_external_refs, v_codes, v_messages) WITH ORDINALITY AS u(node_id, ref, code, message, ord);

    -- each node's report on its own (apply_each): the statement runs for the
    -- whole batch in a subtransaction; should one node break a rule inside the
    -- engine (a constraint, a value out of range: its lane's pacing, say), it
    -- runs again for one node at a time, and a node whose own run fails is
    -- refused in its row (QT050) and left SUBMITTING while the others'
    -- reports, whose side effects went out too, are applied (apply_rounds,
    -- apply_mask, apply_refusal; the answers: apply_answers)
    <<apply_each>>
    FOREACH v_round IN ARRAY apply_rounds(v_codes) LOOP
        BEGIN
            WITH taken AS (
                SELECT i.ord, i.external_ref, i.evidence, coalesce(i.settled, false) AS settled,
                       n.id AS node_id, n.request_id, n.claim_token, n.claimed_by,
                       CASE WHEN i.settled THEN 'COMPLETED' ELSE 'SUBMITTED' END::qtg.node_state AS to_state,
                       pacing.phase, pacing.next_observe_at
                  FROM unnest(p_node_ids, p_external_refs,
                              coalesce(p_evidence, array_fill(NULL::jsonb, ARRAY[v_n])),
                              coalesce(p_settled, array_fill(false, ARRAY[v_n])), apply_mask(v_codes, v_round))
                       WITH ORDINALITY AS i(node_id, external_ref, evidence, settled, skip, ord)
                  JOIN movement_request_nodes n ON n.id = i.node_id
                  -- the first observation; a settled node is not observed, and the
                  -- gate (kept by OFFSET 0) skips the call for it
                  LEFT JOIN LATERAL (SELECT p.phase, p.next_observe_at
                                       FROM observe_pacing(n.lane, v_now, v_now) p
                                      WHERE NOT coalesce(i.settled, false)
                                     OFFSET 0) pacing ON true
                 WHERE i.skip IS NULL
            ), moved AS (
                UPDATE movement_request_nodes n
                   SET node_state         = t.to_state,
                       external_ref       = t.external_ref,
                       evidence           = coalesce(t.evidence, n.evidence),
                       submitted_at       = v_now,
                       observe_started_at = CASE WHEN t.settled THEN NULL ELSE v_now END,
                       observe_held_seconds = 0,
                       observe_held_reason  = NULL,
                       next_observe_at    = t.next_observe_at,
                       observe_phase      = t.phase,
                       lease_until        = NULL,
                       claimer_worker     = NULL,
                       claimer_instance   = NULL,
                       lost_claims        = 0,
                       last_error         = NULL,
                       finished_at        = CASE WHEN t.settled THEN v_now END,
                       updated_at         = v_now
                  FROM taken t
                 WHERE n.id = t.node_id
            ), intents AS (
                UPDATE node_intents i
                   SET intent_state = 'SUBMITTED', external_ref = t.external_ref, finished_at = v_now
                  FROM taken t
                 WHERE i.node_id = t.node_id
                   AND i.claim_token = t.claim_token
            ), audited AS (
                SELECT write_audit(array_agg((t.claimed_by, 'node', t.node_id::text, t.request_id, 'state_changed',
                                              'SUBMITTING', t.to_state::text,
                                              jsonb_build_object('external_ref', t.external_ref, 'evidence', t.evidence)
                                             )::qtg.audit_event ORDER BY t.ord))
                  FROM taken t
            )
            SELECT array_agg(t.node_id ORDER BY t.request_id, t.node_id) FILTER (WHERE t.settled),
                   array_agg(t.claimed_by ORDER BY t.request_id, t.node_id) FILTER (WHERE t.settled)
              INTO v_done, v_done_by
              FROM taken t, audited;

            IF v_done IS NOT NULL THEN
                PERFORM finish_nodes(v_done, v_done_by);
            END IF;
            EXIT apply_each WHEN v_round = 0;
        EXCEPTION WHEN OTHERS THEN
            IF transient_error(SQLSTATE) THEN
                RAISE;
            END IF;
            SELECT * INTO v_codes, v_messages
              FROM apply_refusal(v_codes, v_messages, v_round,
                                 format('complete_submit: node %s: its report could not be applied', p_node_ids[v_round]),
                                 SQLERRM, SQLSTATE);
        END;
    END LOOP;

    RETURN QUERY
    SELECT a.node_id, a.node_state, a.error_code, a.error_message
      FROM apply_answers(p_node_ids, v_codes, v_messages) a;
END
$$;
