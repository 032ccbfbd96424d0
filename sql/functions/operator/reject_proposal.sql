-- reject_proposal: PROPOSED -> REJECTED, with a reason (1 to engine_limits'
-- max_text_bytes, QT002/QT005). Any operator may reject, the proposer too
-- (a withdrawal). Refused, changing nothing: an unknown proposal (QT013),
-- one not PROPOSED or past expires_at (QT023). The decider is the session's
-- login. Lock: the proposal.
CREATE OR REPLACE FUNCTION reject_proposal(p_proposal_id bigint, p_reason text)
RETURNS qtg.proposal_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_proposal config_proposals;
BEGIN
    PERFORM check_reason('reject_proposal', p_reason, 'Say why: it is kept with the proposal and in the audit log.');
    SELECT * INTO v_proposal FROM config_proposals WHERE id = p_proposal_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'proposal % does not exist', coalesce(p_proposal_id::text, 'NULL') USING ERRCODE = 'QT013',
            HINT = 'SELECT * FROM open_proposals lists the open proposals of the network (schema) you are connected to.';
    END IF;
    IF v_proposal.proposal_state <> 'PROPOSED' THEN
        RAISE EXCEPTION 'proposal % is %, only PROPOSED can be rejected', p_proposal_id, v_proposal.proposal_state
            USING ERRCODE = 'QT023';
    END IF;
    IF v_proposal.expires_at <= clock() THEN
        RAISE EXCEPTION 'proposal % expired at %', p_proposal_id, v_proposal.expires_at USING ERRCODE = 'QT023',
            HINT = 'expire_proposals marks it EXPIRED; nothing else can happen to it.';
    END IF;
    PERFORM set_proposal_states(ARRAY[p_proposal_id], 'REJECTED', session_user, p_reason);
    RETURN 'REJECTED';
END
$$;
