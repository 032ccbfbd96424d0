-- propose_registry_change: (none) -> PROPOSED; a change to an entry of the
-- chain registry that exists (a new entry is the admin's upsert alone), to
-- apply when a second login, an operator's, approves it (approve_proposal,
-- through the entry's upsert: apply_registry_entry). What the registry says
-- is where money is sent: `qtg registry load` proposes here every entry the
-- address book changes. p_subject names the entry and p_change the values
-- that change (registry_entry_value's forms); the proposal holds the whole
-- value beside the value now. Checked again when approved: an entry changed
-- since is refused (QT024), a value its upsert refuses fails the approval.
-- The same login proposing the same change again gets the open proposal
-- back. QT002 a subject of none of the forms, an entry that does not exist,
-- a change that is not a JSON object or changes nothing.
CREATE OR REPLACE FUNCTION propose_registry_change(p_subject text, p_change jsonb)
RETURNS TABLE (proposal_id bigint, proposal_state qtg.proposal_state, expires_at timestamptz, supersedes bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_change IS NULL OR jsonb_typeof(p_change) <> 'object' THEN
        RAISE EXCEPTION 'propose_registry_change: the change to % is not a JSON object', coalesce(left(p_subject, 200), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give the values that change, by column name.';
    END IF;
    IF registry_entry_value(p_subject) IS NULL THEN
        RAISE EXCEPTION 'propose_registry_change: registry entry % does not exist', left(p_subject, 200)
            USING ERRCODE = 'QT002',
                  HINT = 'A new entry is registered by its upsert (upsert_chain, upsert_chain_token, ...), not proposed.';
    END IF;
    RETURN QUERY SELECT * FROM open_proposal('propose_registry_change', 'registry', p_subject, p_change);
END
$$;
