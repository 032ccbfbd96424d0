-- complete_observe_batch: SUBMITTED | OBSERVING -> OBSERVING | COMPLETED |
-- FAILED | UNKNOWN, for the nodes one observer claimed in one transaction
-- (claim_observe_batch) and observed. Per node, by its outcome:
--
--   PENDING    still in flight: OBSERVING, next_observe_at from the lane's
--              pacing (phase from time observing vs baseline; the executor's
--              retry_after_seconds hint replaces the computed delay). When the
--              phase is fatal the node goes to UNKNOWN for recovery instead.
--   COMPLETED  COMPLETED; children whose parents are all done become READY.
--   FAILED     FAILED; descendants are SKIPPED.
--   UNKNOWN    the outcome cannot be determined: UNKNOWN for recovery, unless a
--              retry_after_seconds hint says to look again (then OBSERVING,
--              while the phase is not fatal).
--   ERROR      the observe call itself failed (the service, the network, no
--              executor in this runner): OBSERVING again after the hint or the
--              lane's observe_error_retry_seconds; UNKNOWN once the phase is fatal.
--   THROTTLED  no observation was made: the runner's request budget had no
--              turn for the endpoint, or the endpoint answered 429 (the
--              evidence's "throttled" says so). The node stays as it is
--              (SUBMITTED or OBSERVING, its evidence and observe_count kept, no
--              audit row) and is looked at again after the hint (or the lane's
--              observe_error_retry_seconds), never sooner than min_poll; the
--              time from its due poll to that turn is added to its
--              observe_held_seconds, which its pacing does not count as time
--              observing: a throttled provider never makes a node fatal,
--              for up to engine_limits' max_observe_held_seconds of a window.
--              Past that bound the held time grows no more, and a node held
--              back past its fatal wait goes UNKNOWN for recovery (audited,
--              outcome THROTTLED): no runner, broken or not, keeps a node out
--              of recovery by saying THROTTLED for ever.
--              observe_held_reason says why, until a poll is made.
-- A node seen COMPLETED in its first observation window (observe_started_at =
-- submitted_at: not a window recovery opened), never held back in it, leaves
-- its lane a latency sample
-- (lane_latency_samples: done after the node's last look, by this one), from
-- which refresh_lane_pacing learns the lane's schedule.
--
-- p_worker names the observer, the actor of the audit rows and the node's
-- claimed_by (without it, the session's login).
-- Element i of every array describes one node (arrays of equal length, no node
-- twice, at most 1000; QT002 otherwise, and nothing changes; a NULL evidence
-- or hint is none). Each node is proven by its claim's secret. A node the
-- guard refuses (lock_claimed_nodes: QT002 a malformed secret, QT011 no such
-- node, QT030 not the node's current claim, QT021 not SUBMITTED or OBSERVING)
-- is left unchanged and reported in its row instead of failing the batch, as
-- is an outcome not in the list above or a negative hint (QT002), evidence or a
-- hint beyond engine_limits (QT005), or a report the engine cannot apply to
-- its node (QT050: it breaks a constraint or a range inside the engine); the
-- runner quarantines a node refused for its own data. An error that says
-- nothing about the nodes (a lock or statement timeout, a deadlock, a lost
-- connection: transient_error) fails the call as a whole, to be made again.
--
-- The nodes are moved and audited (actor: the claimer; an OBSERVING node
-- observed again is not a state change and writes no audit row) in one
-- statement; the finished ones (COMPLETED or FAILED) then take the DAG step and
-- settle their movements through finish_nodes, like every other path that
-- finishes a node. Locks: the nodes' movements in id order, then the nodes in
-- id order (already held by the observer's claim), then their children.
-- Plans: one per statement, kept for the session (force_generic_plan), as in
-- complete_submit_batch.
-- Returns one row per element, in input order: the node's new state, phase and
-- next observation, or the error.
CREATE OR REPLACE FUNCTION complete_observe_batch(
    p_node_ids            bigint[],
    p_claim_secrets       text[],
    p_outcomes            text[],
    p_evidence            jsonb[] DEFAULT NULL,
    p_retry_after_seconds numeric[] DEFAULT NULL,
    p_worker              text DEFAULT NULL
) RETURNS TABLE (node_id bigint, node_state qtg.node_state, observe_phase qtg.observe_phase,
                 next_observe_at timestamptz, error_code text, error_message text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := clock();
    v_n        integer := coalesce(cardinality(p_node_ids), 0);
    v_codes    text[];
    v_messages text[];
    v_done     bigint[];   -- the nodes finished here,
    v_done_by  text[];     -- and their claimers
    v_round    integer;
    v_held_cap numeric := coalesce((SELECT max_observe_held_seconds FROM engine_limits), 21600);
BEGIN
    PERFORM check_read_committed('complete_observe_batch');
    IF p_worker IS NOT NULL THEN
        PERFORM check_worker('complete_observe', p_worker);
    END IF;
    PERFORM check_arrays('complete_observe_batch', v_n,
                         ARRAY[cardinality(p_claim_secrets), cardinality(p_outcomes)],
                         ARRAY[cardinality(p_evidence), cardinality(p_retry_after_seconds)]);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO v_codes, v_messages
      FROM lock_claimed_nodes('complete_observe', p_node_ids, p_claim_secrets, '{SUBMITTED,OBSERVING}',
                              p_claims => 'observed');   -- an observer's claim of this transaction, only
    -- the runner's arguments, each node's on its own, ahead of the guard's
    -- refusal: an outcome from the list, a hint not negative (QT002) and within
    -- engine_limits (QT005)
    SELECT array_agg(coalesce(a.code, u.code) ORDER BY u.ord),
           array_agg(CASE WHEN a.code IS NULL THEN u.message ELSE a.message END ORDER BY u.ord)
      INTO v_codes, v_messages
      FROM unnest(p_node_ids, p_outcomes,
                  coalesce(p_retry_after_seconds, array_fill(NULL::numeric, ARRAY[v_n])), v_codes, v_messages)
           WITH ORDINALITY AS u(node_id, outcome, hint, code, message, ord)
     CROSS JOIN LATERAL (
           SELECT CASE WHEN x.bad_outcome OR u.hint < 0 THEN 'QT002'
                       WHEN x.wait_problem IS NOT NULL THEN 'QT005' END AS code,
                  CASE WHEN x.bad_outcome THEN
                           format('complete_observe: node %s: outcome must be one of PENDING, COMPLETED, FAILED, '
                                  'UNKNOWN, ERROR, THROTTLED, got %s', u.node_id, coalesce(u.outcome, 'NULL'))
                       WHEN u.hint < 0 THEN
                           format('complete_observe: node %s: retry_after_seconds must not be negative', u.node_id)
                       ELSE format('complete_observe: node %s: %s', u.node_id, x.wait_problem) END AS message
             FROM (SELECT u.outcome IS NULL
                          OR u.outcome NOT IN ('PENDING', 'COMPLETED', 'FAILED', 'UNKNOWN', 'ERROR', 'THROTTLED')
                              AS bad_outcome,
                          CASE WHEN u.hint IS NOT NULL THEN limit_problem(p_wait => u.hint) END AS wait_problem) x
     ) a;
    SELECT * INTO v_codes, v_messages
      FROM limit_refusals('complete_observe', p_node_ids, p_evidence, NULL, NULL, v_codes, v_messages);

    -- each node's report on its own (apply_each, as complete_submit_batch
    -- does): should one node break a rule inside the engine, the statement runs
    -- again for one node at a time, and that node alone is refused (QT050)
    <<apply_each>>
    FOREACH v_round IN ARRAY apply_rounds(v_codes) LOOP
        BEGIN
            WITH given AS (
                SELECT i.ord, i.outcome, i.evidence, n.id AS node_id, n.request_id, n.lane,
                       coalesce(p_worker, session_user::text) AS claimed_by,
                       n.node_state AS from_state, n.observe_started_at, n.submitted_at, n.last_observed_at,
                       n.next_observe_at AS due_at, n.observe_held_seconds AS held,
                       -- a failed or held call waits the lane's error delay unless the executor hinted
                       coalesce(i.hint, CASE WHEN i.outcome IN ('ERROR', 'THROTTLED')
                                             THEN (lane_of(n.lane)).observe_error_retry_seconds END) AS hint
                  FROM unnest(p_node_ids, p_outcomes,
                              coalesce(p_evidence, array_fill(NULL::jsonb, ARRAY[v_n])),
                              coalesce(p_retry_after_seconds, array_fill(NULL::numeric, ARRAY[v_n])),
                              apply_mask(v_codes, v_round))
                       WITH ORDINALITY AS i(node_id, outcome, evidence, hint, skip, ord)
                  JOIN movement_request_nodes n ON n.id = i.node_id
                 WHERE i.skip IS NULL
            ), held AS (
                -- a held poll: its next turn, and the window's time held back
                -- (from the poll that was due to that turn)
                SELECT g.*, t.turn_at,
                       least(g.held + coalesce(extract(epoch FROM t.turn_at - least(coalesce(g.due_at, v_now), v_now)),
                                               0),
                             v_held_cap) AS held_now
                  FROM given g
                 CROSS JOIN LATERAL (
                       SELECT CASE WHEN g.outcome = 'THROTTLED'
                                   THEN v_now + make_interval(secs => greatest(g.hint, (lane_of(g.lane)).min_poll_seconds)
                                                                      ::double precision)
                              END AS turn_at) t
            ), taken AS (
                SELECT g.*, pacing.phase, pacing.next_observe_at AS paced_at,
                       CASE
                           WHEN g.outcome IN ('COMPLETED', 'FAILED') THEN g.outcome::qtg.node_state
                           WHEN pacing.phase = 'fatal' THEN 'UNKNOWN'
                           WHEN g.outcome = 'THROTTLED' THEN g.from_state
                           WHEN g.outcome = 'UNKNOWN' AND g.hint IS NULL THEN 'UNKNOWN'
                           ELSE 'OBSERVING'
                       END::qtg.node_state AS to_state
                  FROM held g
                 CROSS JOIN LATERAL observe_pacing(
                       g.lane, g.observe_started_at + make_interval(secs => g.held_now::double precision),
                       v_now, g.hint) pacing
            ), moved AS (
                UPDATE movement_request_nodes n
                   SET node_state       = t.to_state,
                       observe_phase    = t.phase,
                       next_observe_at  = CASE WHEN t.to_state = 'UNKNOWN' THEN NULL
                                               WHEN t.turn_at IS NOT NULL THEN t.turn_at
                                               WHEN t.to_state = 'OBSERVING' THEN t.paced_at END,
                       observe_count    = n.observe_count + CASE WHEN t.turn_at IS NULL THEN 1 ELSE 0 END,
                       last_observed_at = CASE WHEN t.turn_at IS NULL THEN v_now ELSE n.last_observed_at END,
                       evidence         = CASE WHEN t.turn_at IS NULL THEN coalesce(t.evidence, n.evidence)
                                               ELSE n.evidence END,
                       observe_held_seconds = t.held_now,
                       observe_held_reason  = CASE WHEN t.turn_at IS NOT NULL
                                                   THEN coalesce(t.evidence ->> 'throttled', 'throttled') END,
                       lease_until      = CASE WHEN t.to_state = 'UNKNOWN' THEN v_now END,
                       finished_at      = CASE WHEN t.to_state IN ('COMPLETED', 'FAILED') THEN v_now END,
                       lost_claims      = 0,   -- the node got as far as an observation
                       -- one report a claim; no secret handed out before holds it
                       claim_token      = n.claim_token + 1,
                       claim_hash       = NULL,
                       claimed_by       = t.claimed_by,
                       claimed_at       = v_now,
                       updated_at       = v_now
                  FROM taken t
                 WHERE n.id = t.node_id
            ), audited AS (
                SELECT write_audit(array_agg((t.claimed_by, 'node', t.node_id::text, t.request_id, 'state_changed',
                                              t.from_state::text, t.to_state::text,
                                              jsonb_build_object('outcome', t.outcome, 'phase', t.phase,
                                                                 'evidence', t.evidence)
                                             )::qtg.audit_event ORDER BY t.ord)
                                   FILTER (WHERE t.to_state <> t.from_state))
                  FROM taken t
            ), sampled AS (
                -- done after the node's last look, by this one
                INSERT INTO lane_latency_samples (lane, after_seconds, by_seconds, finished_at)
                SELECT t.lane, least(s.after_seconds, s.by_seconds), s.by_seconds, v_now
                  FROM taken t
                 CROSS JOIN LATERAL (
                       SELECT greatest(0, extract(epoch FROM coalesce(t.last_observed_at, t.observe_started_at)
                                                              - t.observe_started_at)) AS after_seconds,
                              greatest(0, extract(epoch FROM v_now - t.observe_started_at)) AS by_seconds) s
                 WHERE t.to_state = 'COMPLETED' AND t.observe_started_at = t.submitted_at
                   AND t.held_now = 0
            )
            SELECT array_agg(t.node_id ORDER BY t.request_id, t.node_id)
                       FILTER (WHERE t.to_state IN ('COMPLETED', 'FAILED')),
                   array_agg(t.claimed_by ORDER BY t.request_id, t.node_id)
                       FILTER (WHERE t.to_state IN ('COMPLETED', 'FAILED'))
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
                                 format('complete_observe: node %s: its report could not be applied', p_node_ids[v_round]),
                                 SQLERRM, SQLSTATE);
        END;
    END LOOP;

    RETURN QUERY
    SELECT a.node_id, a.node_state, a.observe_phase, a.next_observe_at, a.error_code, a.error_message
      FROM apply_answers(p_node_ids, v_codes, v_messages) a;
END
$$;
