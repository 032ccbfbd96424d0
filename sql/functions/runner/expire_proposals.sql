-- expire_proposals: PROPOSED -> EXPIRED, for configuration proposals past
-- expires_at (approve_proposal already refuses them; this closes them, with
-- an audit row each, decided by p_actor). Up to p_max, oldest expiry first,
-- FOR UPDATE SKIP LOCKED (a proposal an operator is deciding on is left for
-- the next round). The template_proposal_expiration sidecar calls it.
-- Returns how many expired.
CREATE OR REPLACE FUNCTION expire_proposals(
    p_max   integer DEFAULT 100,
    p_actor text DEFAULT 'template_proposal_expiration'
) RETURNS integer
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM check_read_committed('expire_proposals');
    PERFORM check_args('expire_proposals', p_max => p_max, p_max_limit => 10000);
    PERFORM check_worker('expire_proposals', p_actor);
    RETURN set_proposal_states(
        ARRAY(SELECT id FROM config_proposals
               WHERE proposal_state = 'PROPOSED' AND expires_at <= clock()
               ORDER BY expires_at, id
               LIMIT p_max
                 FOR UPDATE SKIP LOCKED),
        'EXPIRED', p_actor, 'not approved before it expired');
END
$$;
