-- propose_callback_target: (none) -> PROPOSED; a receiver of signed callbacks
-- (new, or a change of one: url, where its signing secret is, allow_private,
-- enabled), to register when a second operator approves it (approve_proposal
-- applies it through the admin's upsert_callback_target). The way an HTTP
-- caller registers a target: a url that the runners will POST to, with a
-- secret they will sign with, is a change that could send the movements'
-- news anywhere, so it takes two people, like every configuration change.
-- Checked as upsert_callback_target checks it (check_callback_target: QT002),
-- when proposed and again when approved. The proposer is the session's
-- login. A newer proposal for the target supersedes an open one; the same
-- login proposing the same value again gets the open proposal back.
CREATE OR REPLACE FUNCTION propose_callback_target(
    p_target_name   text,
    p_url           text,
    p_secret_ref    text,
    p_allow_private boolean DEFAULT false,
    p_enabled       boolean DEFAULT true
) RETURNS TABLE (proposal_id bigint, proposal_state qtg.proposal_state, expires_at timestamptz, supersedes bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM check_callback_target('propose_callback_target', p_target_name, p_url, p_secret_ref,
                                  p_allow_private, p_enabled);
    RETURN QUERY
    SELECT * FROM open_proposal(
        'propose_callback_target', 'callback_target', p_target_name,
        jsonb_build_object('url', p_url, 'secret_ref', p_secret_ref,
                           'allow_private', p_allow_private, 'enabled', p_enabled));
END
$$;
