-- write_audit: appends events to the audit outbox in the order given, stamped
-- with the clock, in the transaction of the change they record. The one
-- INSERT into audit_batches: every procedure builds its events (qtg.audit_event
-- values, a set at a time) and hands them here, and they are stored as one
-- batch row (a call of more than 65,535 events as several, in order); the
-- audit_outbox view shows them one row each. A NULL actor is the session's
-- login, a NULL detail is {}. Returns how many events were written.
CREATE OR REPLACE FUNCTION write_audit(p_events qtg.audit_event[]) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_n     integer := coalesce(cardinality(p_events), 0);
    v_chunk constant integer := 65535;
    v_at    timestamptz := clock();
BEGIN
    FOR v_from IN 1 .. v_n BY v_chunk LOOP
        INSERT INTO audit_batches (base, occurred_at, events)
        SELECT nextval('audit_batch_base_seq'), v_at,
               array_agg((coalesce(e.actor, session_user), e.entity, e.entity_id, e.request_id, e.action,
                          e.from_state, e.to_state, coalesce(e.detail, '{}'))::qtg.audit_event ORDER BY e.ord)
          FROM unnest(p_events[v_from : v_from + v_chunk - 1]) WITH ORDINALITY
               AS e(actor, entity, entity_id, request_id, action, from_state, to_state, detail, ord);
    END LOOP;
    RETURN v_n;
END
$$;
