-- promote_audit: audit_outbox -> audit_log, the oldest unpromoted rows first,
-- up to p_max, each chained to the one before (audit_row_hash); the outbox
-- rows get promoted_at. The audit_outbox_promoter sidecar calls it. Locks the
-- chain's head row first (audit_chain_head), so promotions are serial: two
-- promoters never fork the chain, the second waits and goes on from the
-- first's head. A crash before the commit promotes nothing. Returns how many
-- rows were promoted.
CREATE OR REPLACE FUNCTION promote_audit(p_worker text, p_max integer DEFAULT 500) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock();
    v_head  audit_chain_head;
    v_row   audit_log;
    v_rows  audit_log[] := '{}';
    v_out   audit_outbox;
BEGIN
    IF p_worker IS NULL OR btrim(p_worker) = '' THEN
        RAISE EXCEPTION 'promote_audit needs the worker''s name' USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_args('promote_audit', p_max => p_max, p_max_limit => 10000);
    PERFORM check_limits('promote_audit', p_text => ARRAY[p_worker]);

    SELECT * INTO STRICT v_head FROM audit_chain_head FOR UPDATE;
    FOR v_out IN
        SELECT * FROM audit_outbox WHERE promoted_at IS NULL ORDER BY id LIMIT p_max FOR UPDATE
    LOOP
        v_row := ROW(v_head.seq + 1, v_out.id, v_out.occurred_at, v_out.actor, v_out.entity, v_out.entity_id,
                     v_out.request_id, v_out.action, v_out.from_state, v_out.to_state, v_out.detail, v_now,
                     v_head.row_hash, NULL)::audit_log;
        v_row.row_hash := audit_row_hash(v_head.row_hash, v_row);
        v_rows := v_rows || v_row;
        v_head.seq := v_row.seq;
        v_head.row_hash := v_row.row_hash;
    END LOOP;
    IF cardinality(v_rows) = 0 THEN
        RETURN 0;
    END IF;
    INSERT INTO audit_log SELECT * FROM unnest(v_rows);
    UPDATE audit_outbox o SET promoted_at = v_now
      FROM unnest(v_rows) r WHERE o.id = r.outbox_id;
    UPDATE audit_chain_head SET seq = v_head.seq, row_hash = v_head.row_hash, updated_at = v_now;
    RETURN cardinality(v_rows);
END
$$;
