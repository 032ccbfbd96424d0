-- release_nodes: SUBMITTING -> READY (SKIPPED under a stop), for claims a
-- runner gives back before preparing anything: it does not carry the node's
-- executor, or the endpoint the node calls is throttled (the runner's
-- request budget for an RPC URL, Iris or a venue is spent, or the endpoint
-- answered 429). The attempt is not counted (submit_attempts goes back), the
-- intent is ABANDONED, the day's value usage the claim counted is given back
-- (give_back_value), and the node waits (not_before = clock() + the wait):
--   p_wait_seconds NULL   the lane's release_retry_seconds, so that a runner
--                         with the executor takes it
--   p_wait_seconds given  that wait (0 to 3600 s), the budget's: when the
--                         endpoint has requests to spend again
-- Audited 'released' with the reason, the wait and not_before. Nothing was
-- signed, so no side effect can have happened: a node whose intent is
-- PREPARED is refused (QT021), recovery decides for it. A throttled node
-- spends none of fail_submit's attempts, however often it is released.
--
-- Refused whole, and nothing changes: no reason (QT002); p_wait_seconds
-- negative (QT002), NaN, infinite, over 3600 s or over engine_limits'
-- max_wait_seconds, or under a microsecond but not 0 (QT005).
-- Element i of each array is one node (equal lengths, each node once, at most
-- 1000: QT002 otherwise, and nothing changes). A refused node is reported in
-- its row and left as it was (and unlocked, when its secret is wrong): QT002
-- malformed secret, QT011 no such node, QT030 not the node's current claim
-- secret, QT021 not SUBMITTING or its intent PREPARED, QT050 a node the engine
-- cannot release (it breaks a constraint inside the engine; the others are
-- released all the same).
-- Locks: the nodes' movements, then the nodes (id order), then their intents.
-- The expiry recheck and the settle: finish_nodes.
-- Returns one row per element, in input order: the node's new state, or the error.
CREATE OR REPLACE FUNCTION release_nodes(
    p_node_ids      bigint[],
    p_claim_secrets text[],
    p_reason        text,
    p_wait_seconds  numeric DEFAULT NULL
)
RETURNS TABLE (node_id bigint, node_state qtg.node_state, error_code text, error_message text)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := clock();
    v_n        integer := coalesce(cardinality(p_node_ids), 0);
    v_codes    text[];
    v_messages text[];
    v_released bigint[];
    v_actors   text[];
    v_round    integer;
BEGIN
    PERFORM check_read_committed('release_nodes');
    IF p_reason IS NULL OR btrim(p_reason) = '' THEN
        RAISE EXCEPTION 'release_nodes: say why the claims are given back' USING ERRCODE = 'QT002';
    END IF;
    IF p_wait_seconds < 0 THEN
        RAISE EXCEPTION 'release_nodes: p_wait_seconds must not be negative, got %', p_wait_seconds
            USING ERRCODE = 'QT002',
                  HINT = 'Pass the seconds the nodes wait before a claim takes them again (0 to 3600), '
                         'or NULL for their lane''s release_retry_seconds.';
    END IF;
    PERFORM check_number('release_nodes', 'p_wait_seconds', p_wait_seconds, 0, 3600);
    PERFORM check_limits('release_nodes', p_wait => p_wait_seconds, p_text => ARRAY[p_reason]);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO v_codes, v_messages
      FROM lock_claimed_nodes('release_nodes', p_node_ids, p_claim_secrets, '{SUBMITTING}',
                              p_claims => 'dispatched');

    -- a prepared intent may have been signed: not a claim to give back (any
    -- of the node's intents, not only its claim's: a transaction signed under
    -- an earlier claim may be out as well)
    SELECT array_agg(CASE WHEN u.code IS NULL AND p.prepared THEN 'QT021' ELSE u.code END ORDER BY u.ord),
           array_agg(CASE WHEN u.code IS NULL AND p.prepared
                          THEN format('release_nodes: node %s has a PREPARED intent; recovery decides', u.node_id)
                          ELSE u.message END ORDER BY u.ord)
      INTO v_codes, v_messages
      FROM unnest(p_node_ids, v_codes, v_messages) WITH ORDINALITY AS u(node_id, code, message, ord)
     CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM node_intents i
                                         WHERE i.node_id = u.node_id AND i.intent_state = 'PREPARED') AS prepared) p;

    -- each node on its own (apply_each, as complete_submit_batch does): a node
    -- the engine cannot release (say its lane's wait is out of range) is
    -- refused alone (QT050) and the others are released
    <<apply_each>>
    FOREACH v_round IN ARRAY apply_rounds(v_codes) LOOP
        BEGIN
            WITH released AS (
                UPDATE movement_request_nodes n
                   SET node_state       = CASE WHEN r.stop_reason IS NULL THEN 'READY' ELSE 'SKIPPED' END::qtg.node_state,
                       submit_attempts  = n.submit_attempts - 1,
                       not_before       = CASE WHEN r.stop_reason IS NULL
                                               THEN v_now + make_interval(secs => coalesce(
                                                        p_wait_seconds, (lane_of(n.lane)).release_retry_seconds
                                                    )::double precision)
                                          END,
                       lease_until      = NULL,
                       claimer_worker   = NULL,
                       claimer_instance = NULL,
                       finished_at      = CASE WHEN r.stop_reason IS NOT NULL THEN v_now END,
                       last_error       = p_reason,
                       updated_at       = v_now
                  FROM unnest(p_node_ids, apply_mask(v_codes, v_round)) WITH ORDINALITY AS u(node_id, skip, ord),
                       movement_requests r
                 WHERE u.skip IS NULL
                   AND n.id = u.node_id
                   AND r.id = n.request_id
                RETURNING n.id, n.request_id, n.claim_token, n.claimed_by, n.node_state, n.not_before, n.lane, u.ord
            ), intents AS (
                UPDATE node_intents i
                   SET intent_state = 'ABANDONED', finished_at = v_now
                  FROM released x
                 WHERE i.node_id = x.id AND i.claim_token = x.claim_token
            ), audited AS (
                SELECT write_audit(array_agg((x.claimed_by, 'node', x.id::text, x.request_id, 'released', 'SUBMITTING',
                                              x.node_state::text,
                                              jsonb_build_object('reason', p_reason, 'not_before', x.not_before,
                                                                 'wait_seconds',
                                                                 CASE WHEN x.not_before IS NOT NULL
                                                                      THEN coalesce(p_wait_seconds,
                                                                                    (lane_of(x.lane)).release_retry_seconds)
                                                                 END)
                                             )::qtg.audit_event ORDER BY x.ord))
                  FROM released x
            )
            SELECT array_agg(x.id ORDER BY x.id), array_agg(x.claimed_by ORDER BY x.id)
              INTO v_released, v_actors
              FROM released x, audited;

            IF v_released IS NOT NULL THEN
                PERFORM give_back_value(v_released);  -- nothing was signed: the claim started nothing
                PERFORM finish_nodes(v_released, v_actors);
            END IF;
            EXIT apply_each WHEN v_round = 0;
        EXCEPTION WHEN OTHERS THEN
            IF transient_error(SQLSTATE) THEN
                RAISE;
            END IF;
            SELECT * INTO v_codes, v_messages
              FROM apply_refusal(v_codes, v_messages, v_round,
                                 format('release_nodes: node %s could not be released', p_node_ids[v_round]),
                                 SQLERRM, SQLSTATE);
        END;
    END LOOP;

    RETURN QUERY
    SELECT a.node_id, a.node_state, a.error_code, a.error_message
      FROM apply_answers(p_node_ids, v_codes, v_messages) a;
END
$$;
