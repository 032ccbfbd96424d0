-- acknowledge_drift_alert: OPEN -> OPEN (acknowledgement requested) -> ACKNOWLEDGED,
-- the account re-baselined. Accepting a balance the engine cannot explain
-- (money lost, or money that arrived from outside) takes two different
-- operators, as resetting a breaker does: the first call records who asked,
-- why, and the balance the alert shows then (ack_actual; audited
-- 'drift_ack_requested', returns ACK_REQUESTED); a second call by another
-- login acknowledges that balance (audited 'drift_acknowledged' with both
-- logins, both reasons, the balance, the old and the new baseline): the
-- alert's latest snapshot, which shows it, becomes the account's baseline
-- (or a later reading verify_drift found in range: the drift undone since),
-- confirmed (two operators accepted it), so the expectation starts again
-- from it; a reading after it is verified against it (a further drift is a
-- new alert). A request whose balance the alert no longer shows (a later
-- reading drifted otherwise) is no request: the call, by either login, asks
-- anew at the balance shown now (audited 'drift_ack_requested' with the
-- request it replaces). The same login asking twice for one
-- balance is a four-eyes refusal: an audited WARNING with SQLSTATE QT022,
-- the alert unchanged. The breakers the alert tripped stay tripped: two
-- operators reset them (reset_breaker) once the cause is dealt with.
-- QT002 a blank reason; QT005 a reason beyond engine_limits; QT081 no such
-- alert; QT082 the alert is acknowledged already. Locks: the alert, then the
-- account's baseline.
CREATE OR REPLACE FUNCTION acknowledge_drift_alert(p_alert_id bigint, p_reason text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := clock();
    v_actor  text := session_user;
    v_alert  balance_drift_alerts;
    v_entity text;
    v_old    bigint;
    v_new    bigint;
BEGIN
    PERFORM check_reason('acknowledge_drift_alert', p_reason,
                         'Say what explains the drift (e.g. a top-up from outside, a theft written off).',
                         p_blank => 'acknowledge_drift_alert: give the reason the balance is accepted');
    SELECT * INTO v_alert FROM balance_drift_alerts WHERE id = p_alert_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'acknowledge_drift_alert: no drift alert %', coalesce(p_alert_id::text, 'NULL')
            USING ERRCODE = 'QT081', HINT = 'The drift_alerts view lists them.';
    END IF;
    IF v_alert.alert_state <> 'OPEN' THEN
        RAISE EXCEPTION 'acknowledge_drift_alert: drift alert % was acknowledged by % and % at %', p_alert_id,
                        v_alert.ack_requested_by, v_alert.acknowledged_by, v_alert.acknowledged_at
            USING ERRCODE = 'QT082', HINT = 'A new drift of the account raises a new alert.';
    END IF;
    v_entity := v_alert.account_kind || ':' || v_alert.account_key || ':' || v_alert.address || ':' || v_alert.asset;
    IF v_alert.ack_requested_by IS NULL OR v_alert.ack_actual IS DISTINCT FROM v_alert.actual THEN
        UPDATE balance_drift_alerts
           SET ack_requested_by = v_actor, ack_requested_at = v_now, ack_reason = p_reason,
               ack_actual = v_alert.actual
         WHERE id = p_alert_id;
        PERFORM write_audit(ARRAY[(v_actor, 'balance', v_entity, NULL, 'drift_ack_requested', 'OPEN', 'OPEN',
                                   jsonb_strip_nulls(jsonb_build_object(
                                       'alert_id', p_alert_id, 'reason', p_reason, 'actual', v_alert.actual,
                                       'replaces', CASE WHEN v_alert.ack_requested_by IS NOT NULL THEN
                                           jsonb_build_object('requested_by', v_alert.ack_requested_by,
                                                              'actual', v_alert.ack_actual,
                                                              'reason', v_alert.ack_reason) END))
                                  )::qtg.audit_event]);
        RETURN 'ACK_REQUESTED';
    END IF;
    IF v_alert.ack_requested_by = v_actor THEN
        PERFORM refuse_four_eyes('balance', v_entity, NULL, 'drift_ack_refused', 'OPEN',
                                 jsonb_build_object('alert_id', p_alert_id, 'reason', 'the same operator asked twice'),
                                 format('drift alert %s was asked to be acknowledged by %s already; '
                                        'a second operator must confirm it', p_alert_id, v_actor),
                                 'Another operator, logged in as themselves, calls acknowledge_drift_alert.');
        RETURN 'ACK_REQUESTED';
    END IF;

    -- the reading that shows the balance both accepted, or a later one found in
    -- range (the drift undone since: taking it accepts nothing more)
    SELECT s.id INTO v_new
      FROM balance_snapshots s
     WHERE s.account_kind = v_alert.account_kind AND s.account_key = v_alert.account_key
       AND s.address = v_alert.address AND s.asset = v_alert.asset
       AND s.id > v_alert.last_snapshot_id AND s.outcome = 'OK'
     ORDER BY s.id DESC LIMIT 1;
    v_new := coalesce(v_new, v_alert.last_snapshot_id);
    SELECT b.snapshot_id INTO v_old FROM balance_baselines b
     WHERE b.account_kind = v_alert.account_kind AND b.account_key = v_alert.account_key
       AND b.address = v_alert.address AND b.asset = v_alert.asset
       FOR UPDATE;
    UPDATE balance_baselines
       SET snapshot_id = v_new, set_at = v_now, set_by = v_actor, confirmed_by = v_actor, confirmed_at = v_now,
           reason = format('drift alert %s acknowledged: %s', p_alert_id, p_reason)
     WHERE account_kind = v_alert.account_kind AND account_key = v_alert.account_key
       AND address = v_alert.address AND asset = v_alert.asset;
    UPDATE balance_drift_alerts
       SET alert_state = 'ACKNOWLEDGED', acknowledged_by = v_actor, acknowledged_at = v_now,
           ack_reason = ack_reason || E'\n' || p_reason
     WHERE id = p_alert_id;
    PERFORM write_audit(ARRAY[(v_actor, 'balance', v_entity, NULL, 'drift_acknowledged', 'OPEN', 'ACKNOWLEDGED',
                               jsonb_build_object('alert_id', p_alert_id,
                                                  'requested_by', v_alert.ack_requested_by,
                                                  'requested_reason', v_alert.ack_reason,
                                                  'reason', p_reason,
                                                  'actual', v_alert.actual,
                                                  'old_baseline_snapshot_id', v_old,
                                                  'new_baseline_snapshot_id', v_new))::qtg.audit_event]);
    RETURN 'ACKNOWLEDGED';
END
$$;
