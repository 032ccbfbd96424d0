-- record_capital_transfer_check: WAITING -> WAITING | CREDITED | MISMATCH |
-- FAILED, the capital_transfer_followup sidecar's report of what the venue
-- says about a followed transfer.
--   PENDING   no record of the transaction yet, or not credited yet: WAITING,
--             checked again after p_retry_after_seconds (30 s unless given)
--   ERROR     the venue could not be asked (p_error says why): the same
--   CREDITED  the venue credited p_credited_amount: CREDITED when it is the
--             movement's amount, MISMATCH otherwise
--   FAILED    the venue's record says the deposit failed
-- The venue's record (p_record) is kept as evidence. A followup no longer
-- WAITING changes nothing (a second instance's late report): returns its state.
-- The resolution is audited (entity 'node': deposit_credited,
-- deposit_amount_mismatch, deposit_failed). QT011 no followup for the node;
-- QT002 a bad status, a CREDITED without a positive amount; QT005 a number or a
-- document beyond its bounds. Locks: the followup row.
CREATE OR REPLACE FUNCTION record_capital_transfer_check(
    p_node_id             bigint,
    p_status              text,
    p_credited_amount     numeric DEFAULT NULL,
    p_record              jsonb DEFAULT NULL,
    p_error               text DEFAULT NULL,
    p_retry_after_seconds numeric DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock();
    v_row capital_transfer_followups;
    v_to  text;
BEGIN
    PERFORM check_read_committed('record_capital_transfer_check');
    PERFORM check_args('record_capital_transfer_check', p_outcome => p_status,
                       p_outcomes => '{PENDING,ERROR,CREDITED,FAILED}', p_retry_after => p_retry_after_seconds);
    PERFORM check_limits('record_capital_transfer_check', p_json => ARRAY[p_record], p_text => ARRAY[p_error]);
    PERFORM check_number('record_capital_transfer_check', 'the credited amount', p_credited_amount, 0, 1e12, true);
    IF p_status = 'CREDITED' AND p_credited_amount IS NULL THEN
        RAISE EXCEPTION 'record_capital_transfer_check: a CREDITED report gives the credited amount'
            USING ERRCODE = 'QT002', HINT = 'Pass the amount the venue''s deposit record shows.';
    END IF;
    SELECT * INTO v_row FROM capital_transfer_followups WHERE node_id = p_node_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'record_capital_transfer_check: node % has no capital transfer followup', coalesce(p_node_id::text, 'NULL')
            USING ERRCODE = 'QT011', HINT = 'Report only what claim_capital_transfers handed out.';
    END IF;
    IF v_row.followup_state <> 'WAITING' THEN
        RETURN v_row.followup_state;
    END IF;
    v_to := CASE p_status
                WHEN 'CREDITED' THEN CASE WHEN p_credited_amount = v_row.expected_amount THEN 'CREDITED' ELSE 'MISMATCH' END
                WHEN 'FAILED' THEN 'FAILED'
                ELSE 'WAITING'
            END;
    UPDATE capital_transfer_followups
       SET followup_state  = v_to,
           credited_amount = coalesce(p_credited_amount, credited_amount),
           record          = coalesce(p_record, record),
           last_error      = CASE WHEN p_status = 'ERROR' THEN p_error END,
           next_check_at   = CASE WHEN v_to = 'WAITING'
                                  THEN v_now + make_interval(secs => coalesce(p_retry_after_seconds, 30)::double precision)
                                  ELSE next_check_at END,
           resolved_at     = CASE WHEN v_to <> 'WAITING' THEN v_now END
     WHERE node_id = p_node_id;
    IF v_to <> 'WAITING' THEN
        PERFORM write_audit(ARRAY[(NULL, 'node', p_node_id::text, v_row.request_id,
                                   CASE v_to WHEN 'CREDITED' THEN 'deposit_credited'
                                             WHEN 'MISMATCH' THEN 'deposit_amount_mismatch'
                                             ELSE 'deposit_failed' END,
                                   'WAITING', v_to,
                                   jsonb_strip_nulls(jsonb_build_object(
                                       'venue', v_row.venue_key, 'chain', v_row.chain_key, 'tx_hash', v_row.tx_hash,
                                       'expected_amount', v_row.expected_amount,
                                       'credited_amount', p_credited_amount, 'record', p_record)))::qtg.audit_event]);
    END IF;
    RETURN v_to;
END
$$;
