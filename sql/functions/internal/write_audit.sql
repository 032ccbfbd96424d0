-- write_audit: appends events to audit_outbox in the order given, stamped with
-- the clock, in the transaction of the change they record. The one INSERT into
-- audit_outbox: every procedure builds its events (qtg.audit_event values, a
-- set at a time) and hands them here. A NULL actor is the session's login, a
-- NULL detail is {}. Returns how many were written.
CREATE OR REPLACE FUNCTION write_audit(p_events qtg.audit_event[]) RETURNS integer
LANGUAGE sql
AS $$
    WITH written AS (
        INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
        SELECT now.at, coalesce(e.actor, session_user), e.entity, e.entity_id, e.request_id, e.action,
               e.from_state, e.to_state, coalesce(e.detail, '{}')
          FROM unnest(p_events) WITH ORDINALITY
               AS e(actor, entity, entity_id, request_id, action, from_state, to_state, detail, ord)
         CROSS JOIN (SELECT clock() AS at) now   -- once, not once a row
         ORDER BY e.ord
        RETURNING 1
    )
    SELECT count(*)::integer FROM written;
$$;
