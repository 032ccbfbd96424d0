-- open_proposal: (none) -> PROPOSED. The one core of propose_lane_baseline,
-- propose_template and propose_executor_config.
--
-- The proposed value is the subject's value now (config_value; for a lane
-- without a row, the 'default' lane's, which it paces as until then) with
-- p_change's keys replaced, so a setting the proposer left out (a NULL,
-- stripped by the caller) keeps its value and the proposal holds the whole
-- value. It is checked (check_proposal), recorded beside the value now
-- (before_value) as proposed by the session's login, to expire after
-- engine_limits' proposal_lifetime_seconds, and audited. The subject's open
-- proposal, if any, becomes SUPERSEDED: one open proposal per subject,
-- unless it is this login's with this very value, which is returned as it is
-- (a repeated call, e.g. an HTTP retry, proposes nothing new). A
-- value the subject already has is refused (QT002). Internal.
-- Locks: the subject's open proposal, then the subject's row (approve_proposal's order).
CREATE OR REPLACE FUNCTION open_proposal(
    p_call    text,
    p_kind    qtg.proposal_kind,
    p_subject text,
    p_change  jsonb
) RETURNS TABLE (proposal_id bigint, proposal_state qtg.proposal_state, expires_at timestamptz, supersedes bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_actor    text := session_user;
    v_open     bigint;
    v_before   jsonb;
    v_value    jsonb;
    v_lifetime numeric;
    v_row      config_proposals;
BEGIN
    SELECT p.id INTO v_open FROM config_proposals p
     WHERE p.kind = p_kind AND p.subject = p_subject AND p.proposal_state = 'PROPOSED'
       FOR UPDATE;
    v_before := config_value(p_kind, p_subject);
    v_value := coalesce(v_before,
                        CASE WHEN p_kind = 'lane_baseline' THEN config_value(p_kind, 'default') END,
                        '{}') || p_change;
    PERFORM check_proposal(p_call, p_kind, p_subject, v_value);
    -- the same login proposing the same value again: its open proposal, as it is
    SELECT p.* INTO v_row FROM config_proposals p
     WHERE p.id = v_open AND p.proposed_by = v_actor AND p.proposed_value = v_value
       AND p.before_value IS NOT DISTINCT FROM v_before AND p.expires_at > v_now;
    IF FOUND THEN
        proposal_id := v_row.id;
        proposal_state := v_row.proposal_state;
        expires_at := v_row.expires_at;
        supersedes := v_row.supersedes;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_before IS NOT DISTINCT FROM v_value THEN
        RAISE EXCEPTION '%: % % already has this value; the proposal would change nothing', p_call, p_kind, p_subject
            USING ERRCODE = 'QT002', HINT = 'To withdraw an open proposal, reject_proposal it.';
    END IF;
    IF v_open IS NOT NULL THEN
        PERFORM set_proposal_states(ARRAY[v_open], 'SUPERSEDED', v_actor, 'superseded by a newer proposal');
    END IF;

    SELECT l.proposal_lifetime_seconds INTO STRICT v_lifetime FROM engine_limits l;
    BEGIN
        INSERT INTO config_proposals (kind, subject, proposed_value, before_value, proposed_by, proposed_at,
                                      expires_at, supersedes)
        VALUES (p_kind, p_subject, v_value, v_before, v_actor, v_now,
                v_now + make_interval(secs => v_lifetime::double precision), v_open)
        RETURNING * INTO v_row;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION '%: another proposal for % % was made at the same time', p_call, p_kind, p_subject
            USING ERRCODE = 'QT023', HINT = 'SELECT * FROM open_proposals shows it; propose again to supersede it.';
    END;
    PERFORM write_audit(ARRAY[(v_actor, 'proposal', v_row.id::text, NULL, 'proposed', NULL, 'PROPOSED',
                               jsonb_build_object('kind', p_kind, 'subject', p_subject, 'before', v_before,
                                                  'proposed', v_value, 'expires_at', v_row.expires_at,
                                                  'supersedes', v_open))::qtg.audit_event]);

    proposal_id := v_row.id;
    proposal_state := v_row.proposal_state;
    expires_at := v_row.expires_at;
    supersedes := v_open;
    RETURN NEXT;
END
$$;
