-- requeue_node: take a node back to READY, on the word of two logins.
--
-- For two kinds of node, each a node no runner call moves on by itself:
--   an UNKNOWN node whose intent is PREPARED or SUBMITTED (a signed
--       transaction or an exchange request was recorded, or sent: a side
--       effect may be out), which operators judge can never land: the next
--       claim gives it a fresh side effect (recovery only ever resubmits the
--       prepared one or concludes from evidence). Operators judge; the chain
--       decides: an EVM transaction whose nonce is not consumed may still be
--       mined by anyone who holds its bytes, so a node whose second mined
--       call would pay again (evm_nonce_open) goes back READY held
--       (awaits_nonce_of: the abandoned intent; its last_error says why),
--       which no claim takes, until the chain has consumed that nonce: record_nonce_closed releases it once the
--       reaper's fill, or a transaction the engine never recorded, took it
--       (taken by its own transaction, it stays held: it paid);
--   a FAILED node of which nothing can have happened: no intent of it was
--       ever prepared (nothing was signed, recorded or sent: it failed in
--       its preflight or its prepare), not quarantined, retried fewer than
--       3 times (node_retry_refusals). A movement's FAILED nodes are retried
--       together, as a whole: asking for one asks for each, and applying
--       one applies each, so every one of them must pass. Each goes back to
--       READY with its attempts from 0; the descendants their failures
--       SKIPPED are PENDING again (waiting for their parents); the movement,
--       FAILED or still EXECUTING, is EXECUTING with them open again. A
--       FAILED node whose side effect was prepared may have happened: it is
--       never retried, nor the other FAILED nodes of its movement (QT021).
-- The calls:
--   first call     records a REQUESTED node_requeues row (from_state: the
--                  node's) with the evidence the requester saw (the node's
--                  evidence and last error, its latest intent), one for
--                  each node retried together; the nodes are untouched.
--                  Returns REQUESTED (the named node's request).
--   second call,   by another login, for any node of the requests: each
--   another login  node goes to READY (its claim fenced), its latest intent
--                  becomes ABANDONED, its request APPLIED; the next claim
--                  makes a new intent. Returns APPLIED.
--   second call,   refused like a self-approval: an audit row
--   same login     (requeue_refused), a WARNING with SQLSTATE QT022, nothing
--                  else changed. Returns REQUESTED.
-- A request made against an intent that is no longer the node's latest, or
-- while the node was in another state, or one of a set that no longer is the
-- movement's FAILED nodes, is STALE and new ones are recorded. The requester and confirmer are
-- session_user. Refused (nothing changes): QT011 no such node; QT021 the node
-- is neither (another state, quarantined, no side-effecting executor for an
-- UNKNOWN one, a FAILED one whose side effect was prepared or that was
-- retried 3 times, or beside a FAILED node that is either); QT020 the
-- movement is being stopped, or finished otherwise than FAILED; QT002 no
-- reason; QT005 a reason beyond engine_limits.
-- Locks: request, node, intent; the movement's other FAILED nodes in id
-- order; then each node's latest intent and open requeue row, in id order;
-- then the descendants a retry reopens.
CREATE OR REPLACE FUNCTION requeue_node(p_node_id bigint, p_reason text)
RETURNS TABLE (requeue_id bigint, requeue_state text, node_state qtg.node_state)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now        timestamptz := clock();
    v_actor      text := session_user;
    v_request_id bigint;
    v_stop       qtg.request_state;
    v_node       movement_request_nodes;
    v_intent     node_intents;
    v_open       node_requeues;
    v_refusal    record;
    v_group      bigint[];       -- the nodes requeued together: the node, or its movement's FAILED nodes
    v_id         bigint;
    v_asked      integer := 0;   -- the group's open requests,
    v_askers     text[] := '{}'; -- and who made them
    v_mine       bigint;         -- the named node's request
    v_held       boolean;        -- its abandoned intent's nonce may still be mined
BEGIN
    PERFORM check_reason('requeue_node', p_reason,
                         'Say what the evidence shows, e.g. the transaction was dropped and its nonce reused.');

    SELECT node.request_id INTO v_request_id FROM movement_request_nodes node WHERE node.id = p_node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'node % does not exist', p_node_id USING ERRCODE = 'QT011';
    END IF;
    SELECT stop_reason INTO v_stop FROM movement_requests WHERE id = v_request_id FOR UPDATE;
    SELECT * INTO v_node FROM movement_request_nodes node WHERE node.id = p_node_id FOR UPDATE;
    SELECT * INTO v_intent FROM node_intents intent
     WHERE intent.node_id = p_node_id ORDER BY intent.claim_token DESC LIMIT 1 FOR UPDATE;
    IF v_node.node_state = 'FAILED' THEN
        -- the group locked before its refusals are read (every writer of a node
        -- locks its movement first as well, so the group cannot change meanwhile)
        PERFORM 1 FROM movement_request_nodes node
          WHERE node.request_id = v_request_id AND node.node_state = 'FAILED' ORDER BY node.id FOR UPDATE;
        SELECT x.code, x.message, x.hint INTO v_refusal FROM node_retry_refusals x WHERE x.node_id = p_node_id;
        IF v_refusal.code = 'QT020' THEN
            RAISE EXCEPTION '%', v_refusal.message USING ERRCODE = 'QT020', HINT = v_refusal.hint;
        ELSIF v_refusal.code IS NOT NULL THEN
            RAISE EXCEPTION '%', v_refusal.message USING ERRCODE = 'QT021', HINT = v_refusal.hint;
        END IF;
        v_group := ARRAY(SELECT node.id FROM movement_request_nodes node
                          WHERE node.request_id = v_request_id AND node.node_state = 'FAILED' ORDER BY node.id);
    ELSIF v_node.node_state <> 'UNKNOWN' OR NOT v_node.has_side_effect
       OR v_intent.intent_state IS NULL OR v_intent.intent_state NOT IN ('PREPARED', 'SUBMITTED') THEN
        RAISE EXCEPTION 'node % is % with intent %: requeue_node is for an UNKNOWN node whose side effect was prepared or sent, or a FAILED one of which nothing was prepared',
                        p_node_id, v_node.node_state, coalesce(v_intent.intent_state, 'none')
            USING ERRCODE = 'QT021', HINT = 'Any other node is moved by the runners and by recovery''s evidence.';
    ELSE
        v_group := ARRAY[p_node_id];
    END IF;
    IF v_stop IS NOT NULL THEN
        RAISE EXCEPTION 'movement % is being stopped (%): node % is left as it is', v_request_id, v_stop, p_node_id
            USING ERRCODE = 'QT020', HINT = 'A stopped movement starts no new side effect.';
    END IF;

    -- the group's open requests, those that no longer apply (requeue_requests:
    -- another intent, another state, a group the movement's failures outgrew) set aside
    FOREACH v_id IN ARRAY v_group LOOP
        PERFORM 1 FROM node_intents intent
         WHERE intent.node_id = v_id ORDER BY intent.claim_token DESC LIMIT 1 FOR UPDATE;
        SELECT * INTO v_open FROM node_requeues r WHERE r.node_id = v_id AND r.state = 'REQUESTED' FOR UPDATE;
        IF v_open.id IS NOT NULL
           AND NOT (SELECT x.still_applies FROM requeue_requests x WHERE x.requeue_id = v_open.id) THEN
            UPDATE node_requeues r SET state = 'STALE', decided_at = v_now WHERE r.id = v_open.id;
        ELSIF v_open.id IS NOT NULL THEN
            v_asked := v_asked + 1;
            v_askers := array_append(v_askers, v_open.requested_by);
            v_mine := CASE WHEN v_id = p_node_id THEN v_open.id ELSE v_mine END;
        END IF;
    END LOOP;

    IF v_asked < cardinality(v_group) OR cardinality(ARRAY(SELECT DISTINCT unnest(v_askers))) > 1 THEN
        -- asked now, for the whole group (what was asked of a part of it goes stale)
        UPDATE node_requeues r SET state = 'STALE', decided_at = v_now
         WHERE r.node_id = ANY (v_group) AND r.state = 'REQUESTED';
        FOREACH v_id IN ARRAY v_group LOOP
            SELECT * INTO v_node FROM movement_request_nodes node WHERE node.id = v_id;
            SELECT * INTO v_intent FROM node_intents intent
             WHERE intent.node_id = v_id ORDER BY intent.claim_token DESC LIMIT 1;
            INSERT INTO node_requeues (node_id, request_id, intent_id, evidence, reason, state, requested_by,
                                       requested_at, from_state)
            VALUES (v_id, v_request_id, v_intent.id,
                    jsonb_build_object('evidence', v_node.evidence, 'last_error', v_node.last_error,
                                       'intent', to_jsonb(v_intent)),
                    p_reason, 'REQUESTED', v_actor, v_now, v_node.node_state::text)
            RETURNING * INTO v_open;
            PERFORM write_audit(ARRAY[(v_actor, 'node', v_id::text, v_request_id, 'requeue_requested',
                                       v_node.node_state::text, v_node.node_state::text,
                                       jsonb_build_object('requeue_id', v_open.id, 'intent_id', v_intent.id,
                                                          'reason', p_reason, 'together', to_jsonb(v_group)))
                                      ::qtg.audit_event]);
            v_mine := CASE WHEN v_id = p_node_id THEN v_open.id ELSE v_mine END;
        END LOOP;
        RETURN QUERY SELECT v_mine, 'REQUESTED'::text, v_node.node_state;
        RETURN;
    END IF;

    IF v_askers[1] = v_actor THEN
        PERFORM refuse_four_eyes('node', p_node_id::text, v_request_id, 'requeue_refused', v_node.node_state::text,
                                 jsonb_build_object('requeue_id', v_mine, 'reason', 'the requester cannot confirm'),
                                 format('requeue %s of node %s was requested by %s, who cannot also confirm it; '
                                        'the refusal is recorded in the audit log', v_mine, p_node_id, v_actor),
                                 'A second operator, logged in as themselves, must confirm.');
        RETURN QUERY SELECT v_mine, 'REQUESTED'::text, v_node.node_state;
        RETURN;
    END IF;

    IF v_node.node_state = 'FAILED' THEN
        -- the one reopening the *_final triggers let through (0062), for these statements
        PERFORM set_config('qtg.reopening', v_request_id::text, true);
    END IF;
    FOREACH v_id IN ARRAY v_group LOOP
        UPDATE node_requeues r SET state = 'APPLIED', confirmed_by = v_actor, decided_at = v_now
         WHERE r.node_id = v_id AND r.state = 'REQUESTED'
        RETURNING * INTO v_open;
        UPDATE node_intents intent
           SET intent_state = 'ABANDONED', finished_at = coalesce(intent.finished_at, v_now)
         WHERE intent.id = v_open.intent_id
        RETURNING * INTO v_intent;
        v_held := evm_nonce_open(v_intent);
        UPDATE movement_request_nodes node
           SET node_state       = 'READY',
               claim_token      = node.claim_token + 1,   -- a recovery claim still out is stale now:
               claim_hash       = NULL,                   -- no secret proves a claim on the node
               claimer_worker   = NULL,
               claimer_instance = NULL,
               lease_until      = NULL,
               not_before       = NULL,
               -- signed bytes at a nonce not yet consumed may still be mined, by anyone
               -- who holds them: the fresh side effect waits until the chain has
               -- consumed that nonce (record_nonce_closed releases it)
               awaits_nonce_of  = CASE WHEN v_held THEN v_intent.id END,
               last_error       = CASE WHEN v_held
                                       THEN format('requeued: waits until nonce %s of %s on %s is consumed on the '
                                                   'chain (the nonce reaper fills it) before it signs again',
                                                   v_intent.nonce, v_intent.sender, v_intent.chain_key)
                                       ELSE node.last_error END,
               finished_at      = NULL,
               submit_attempts  = CASE WHEN v_node.node_state = 'FAILED' THEN 0 ELSE node.submit_attempts END,
               lost_claims      = CASE WHEN v_node.node_state = 'FAILED' THEN 0 ELSE node.lost_claims END,
               updated_at       = v_now
         WHERE node.id = v_id;
        PERFORM write_audit(ARRAY[(v_actor, 'node', v_id::text, v_request_id, 'requeued',
                                   v_node.node_state::text, 'READY',
                                   jsonb_build_object('requeue_id', v_open.id, 'requested_by', v_open.requested_by,
                                                      'requested_because', v_open.reason,
                                                      'confirmed_because', p_reason,
                                                      'abandoned_intent', v_open.intent_id,
                                                      'together', to_jsonb(v_group),
                                                      'evidence', v_open.evidence))::qtg.audit_event]);
    END LOOP;
    IF v_node.node_state = 'FAILED' THEN
        FOREACH v_id IN ARRAY v_group LOOP
            PERFORM reopen_after_retry(v_id, v_request_id, v_actor, v_group);
        END LOOP;
        PERFORM set_config('qtg.reopening', '', true);
    END IF;
    PERFORM finish_nodes(v_group, array_fill(v_actor, ARRAY[cardinality(v_group)]));
    RETURN QUERY SELECT v_mine, 'APPLIED'::text, node.node_state
                   FROM movement_request_nodes node WHERE node.id = p_node_id;
END
$$;
