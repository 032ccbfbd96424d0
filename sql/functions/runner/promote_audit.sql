-- promote_audit: audit_outbox -> audit_log, the oldest unpromoted batches
-- first (audit_batches, by base), whole batches until at least p_max events
-- (or none are left), each event chained to the one before (audit_row_hash)
-- in id order, with the login of the call that wrote it (the batch's); the
-- promoted batches are deleted in the same transaction (audit_log holds all
-- they held). The audit_outbox_promoter sidecar calls it. Locks the chain's
-- head row first (audit_chain_head), so promotions are serial: two promoters
-- never fork the chain, the second waits and goes on from the first's head. A
-- crash before the commit promotes nothing and deletes nothing. Returns how
-- many events were promoted.
CREATE OR REPLACE FUNCTION promote_audit(p_worker text, p_max integer DEFAULT 500) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock();
    v_head  audit_chain_head;
    v_row   audit_log;
    v_rows  audit_log[] := '{}';
    v_batch audit_batches;
    v_bases bigint[] := '{}';
    v_event record;
BEGIN
    PERFORM check_read_committed('promote_audit');
    PERFORM check_worker('promote_audit', p_worker);
    PERFORM check_args('promote_audit', p_max => p_max, p_max_limit => 10000);

    SELECT * INTO STRICT v_head FROM audit_chain_head FOR UPDATE;
    FOR v_batch IN
        SELECT * FROM audit_batches WHERE promoted_at IS NULL ORDER BY base FOR UPDATE
    LOOP
        FOR v_event IN
            SELECT e.* FROM unnest(v_batch.events) WITH ORDINALITY
                   AS e(actor, entity, entity_id, request_id, action, from_state, to_state, detail, ord)
             ORDER BY e.ord
        LOOP
            v_row := ROW(v_head.seq + 1, v_batch.base + v_event.ord, v_batch.occurred_at, v_event.actor,
                         v_event.entity, v_event.entity_id, v_event.request_id, v_event.action,
                         v_event.from_state, v_event.to_state, v_event.detail, v_now,
                         v_head.row_hash, NULL, v_batch.login)::audit_log;
            v_row.row_hash := audit_row_hash(v_head.row_hash, v_row);
            v_rows := v_rows || v_row;
            v_head.seq := v_row.seq;
            v_head.row_hash := v_row.row_hash;
        END LOOP;
        v_bases := v_bases || v_batch.base;
        EXIT WHEN cardinality(v_rows) >= p_max;
    END LOOP;
    IF cardinality(v_rows) = 0 THEN
        RETURN 0;
    END IF;
    INSERT INTO audit_log SELECT * FROM unnest(v_rows);
    DELETE FROM audit_batches WHERE base = ANY (v_bases);
    UPDATE audit_chain_head SET seq = v_head.seq, row_hash = v_head.row_hash, updated_at = v_now;
    RETURN cardinality(v_rows);
END
$$;
