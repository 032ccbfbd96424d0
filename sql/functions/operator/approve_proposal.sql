-- approve_proposal: PROPOSED -> APPLIED; the change is applied in the same
-- transaction, through the internal apply step of its kind:
--   lane_baseline    upsert_lane_baseline, with every setting
--   template         register_template
--   executor_config  set_executor_config
--   callback_target  upsert_callback_target (the admin's step, run as the owner here)
--   registry         apply_registry_entry: the entry's upsert (the admin's
--                    step, run as the owner here)
-- Idempotent for the approver: the login that applied it calling again gets
-- APPLIED, nothing written.
-- Four eyes: the approver (the session's login) must not be the proposer. A
-- self-approval is refused without an error, so that its audit row
-- ('approval_refused') is kept: a WARNING with SQLSTATE QT022, and the state
-- unchanged (PROPOSED) is returned. Refused with an error, changing nothing:
-- an unknown proposal (QT013), one not PROPOSED or past expires_at (QT023),
-- a subject changed since the proposal was made (QT024: its value is no
-- longer the proposal's before_value), a value beyond the bounds as they are
-- now (check_proposal: QT005, QT001, ...).
-- Locks: the proposal, then the subject's row (config_value).
CREATE OR REPLACE FUNCTION approve_proposal(p_proposal_id bigint)
RETURNS qtg.proposal_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_actor    text := session_user;
    v_proposal config_proposals;
    v_value    jsonb;
BEGIN
    SELECT * INTO v_proposal FROM config_proposals WHERE id = p_proposal_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'proposal % does not exist', coalesce(p_proposal_id::text, 'NULL') USING ERRCODE = 'QT013',
            HINT = 'SELECT * FROM open_proposals lists the open proposals of the network (schema) you are connected to.';
    END IF;
    -- idempotent for its approver: the login that applied it asking again gets APPLIED
    IF v_proposal.proposal_state = 'APPLIED' AND v_proposal.decided_by = v_actor THEN
        RETURN v_proposal.proposal_state;
    END IF;
    IF v_proposal.proposal_state <> 'PROPOSED' THEN
        RAISE EXCEPTION 'proposal % is %, only PROPOSED can be approved', p_proposal_id, v_proposal.proposal_state
            USING ERRCODE = 'QT023';
    END IF;
    IF v_proposal.expires_at <= v_now THEN
        RAISE EXCEPTION 'proposal % expired at %', p_proposal_id, v_proposal.expires_at USING ERRCODE = 'QT023',
            HINT = 'Propose the change again.';
    END IF;
    IF v_proposal.proposed_by = v_actor THEN
        PERFORM refuse_four_eyes('proposal', p_proposal_id::text, NULL, 'approval_refused', 'PROPOSED',
                                 jsonb_build_object('kind', v_proposal.kind, 'subject', v_proposal.subject,
                                                    'reason', 'the proposer cannot approve'),
                                 format('proposal %s was made by %s, who cannot also approve it', p_proposal_id, v_actor),
                                 'A second operator must approve.');
        RETURN v_proposal.proposal_state;
    END IF;

    IF config_value(v_proposal.kind, v_proposal.subject) IS DISTINCT FROM v_proposal.before_value THEN
        RAISE EXCEPTION 'proposal %: % % has changed since it was proposed', p_proposal_id, v_proposal.kind,
                        v_proposal.subject
            USING ERRCODE = 'QT024',
                  HINT = 'Reject it and propose the change again against the value the subject has now.';
    END IF;
    v_value := v_proposal.proposed_value;
    PERFORM check_proposal('approve_proposal', v_proposal.kind, v_proposal.subject, v_value);

    CASE v_proposal.kind
        WHEN 'lane_baseline' THEN
            PERFORM upsert_lane_baseline(
                v_proposal.subject,
                (v_value ->> 'baseline_seconds')::numeric,
                p_min_poll_seconds            => (v_value ->> 'min_poll_seconds')::numeric,
                p_max_poll_seconds            => (v_value ->> 'max_poll_seconds')::numeric,
                p_first_poll_fraction         => (v_value ->> 'first_poll_fraction')::numeric,
                p_poll_fraction               => (v_value ->> 'poll_fraction')::numeric,
                p_over_factor                 => (v_value ->> 'over_factor')::numeric,
                p_fatal_factor                => (v_value ->> 'fatal_factor')::numeric,
                p_observe_error_retry_seconds => (v_value ->> 'observe_error_retry_seconds')::numeric,
                p_recovery_retry_seconds      => (v_value ->> 'recovery_retry_seconds')::numeric,
                p_release_retry_seconds       => (v_value ->> 'release_retry_seconds')::numeric);
        WHEN 'template' THEN
            PERFORM register_template(v_proposal.subject, v_value -> 'plan', v_value ->> 'description');
        WHEN 'executor_config' THEN
            PERFORM set_executor_config(v_proposal.subject, v_value -> 'node_config_schema', v_value ->> 'description');
        WHEN 'callback_target' THEN
            PERFORM upsert_callback_target(v_proposal.subject, v_value ->> 'url', v_value ->> 'secret_ref',
                                           (v_value -> 'allow_private')::boolean, (v_value -> 'enabled')::boolean);
        WHEN 'registry' THEN
            PERFORM apply_registry_entry(v_proposal.subject, v_value);
    END CASE;
    PERFORM set_proposal_states(ARRAY[p_proposal_id], 'APPLIED', v_actor);
    RETURN 'APPLIED';
END
$$;
