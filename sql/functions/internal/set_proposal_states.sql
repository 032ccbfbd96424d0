-- set_proposal_states: PROPOSED -> p_to (APPLIED, REJECTED, EXPIRED,
-- SUPERSEDED) for the given proposals, decided by p_actor now, with an audit
-- row each (action: the new state in lower case). The only place a proposal
-- changes state. Guarded by the from-state: a proposal no longer PROPOSED is
-- left as it is. Returns how many changed. Internal; callers lock first.
CREATE OR REPLACE FUNCTION set_proposal_states(
    p_ids    bigint[],
    p_to     qtg.proposal_state,
    p_actor  text,
    p_reason text DEFAULT NULL
) RETURNS integer
LANGUAGE sql
AS $$
    WITH moved AS (
        UPDATE config_proposals p
           SET proposal_state = p_to,
               decided_by     = p_actor,
               decided_at     = now.at,
               reason         = p_reason
          FROM (SELECT clock() AS at) now
         WHERE p.id = ANY (p_ids) AND p.proposal_state = 'PROPOSED' AND p_to <> 'PROPOSED'
        RETURNING p.id, p.kind, p.subject, p.proposed_by
    )
    SELECT coalesce(write_audit(array_agg(
               (p_actor, 'proposal', m.id::text, NULL, lower(p_to::text), 'PROPOSED', p_to::text,
                jsonb_strip_nulls(jsonb_build_object('kind', m.kind, 'subject', m.subject,
                                                     'proposed_by', m.proposed_by, 'reason', p_reason)))::qtg.audit_event
               ORDER BY m.id)), 0)
      FROM moved m;
$$;
