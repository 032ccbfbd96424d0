-- set_balance_settings: the network's drift settings. An admin step (SECURITY
-- INVOKER, no grant): the threshold decides when lost money alerts, so no
-- network role changes it.
--   p_drift_threshold         USDC an account's unexplained change may be from
--                             zero before verify_drift raises an alert (0.01)
--   p_venue_withdraw_fee_cap  the most an exchange withdrawal may take above its
--                             amount from the venue's FUND account (1)
--   p_max_balance             a reported balance above this is refused (1e15)
--   p_snapshot_keep_days      days a verified balance snapshot is kept before
--                             prune_balance_snapshots deletes it (400; 0 keeps
--                             them all)
-- NULL keeps a setting as it is. QT005 a number that is NaN, Infinity,
-- negative or beyond its bound. Audited as entity 'balance' when something
-- changed. Takes effect at the next verification.
CREATE OR REPLACE FUNCTION set_balance_settings(
    p_drift_threshold        numeric DEFAULT NULL,
    p_venue_withdraw_fee_cap numeric DEFAULT NULL,
    p_max_balance            numeric DEFAULT NULL,
    p_snapshot_keep_days     integer DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_before balance_settings;
    v_after  balance_settings;
BEGIN
    PERFORM check_number('set_balance_settings', 'the drift threshold', p_drift_threshold, 0, 1e12, false, true);
    PERFORM check_number('set_balance_settings', 'the venue withdrawal fee cap', p_venue_withdraw_fee_cap, 0, 1e12, false, true);
    PERFORM check_number('set_balance_settings', 'the largest balance', p_max_balance, 0, 1e30, true, true);
    PERFORM check_number('set_balance_settings', 'the days a snapshot is kept', p_snapshot_keep_days, 0, 36500);
    SELECT * INTO STRICT v_before FROM balance_settings FOR UPDATE;
    UPDATE balance_settings
       SET drift_threshold = coalesce(p_drift_threshold, drift_threshold),
           venue_withdraw_fee_cap = coalesce(p_venue_withdraw_fee_cap, venue_withdraw_fee_cap),
           max_balance = coalesce(p_max_balance, max_balance),
           snapshot_keep_days = coalesce(p_snapshot_keep_days, snapshot_keep_days),
           updated_by = session_user,
           updated_at = clock()
    RETURNING * INTO v_after;
    IF (v_before.drift_threshold, v_before.venue_withdraw_fee_cap, v_before.max_balance, v_before.snapshot_keep_days)
       IS DISTINCT FROM (v_after.drift_threshold, v_after.venue_withdraw_fee_cap, v_after.max_balance,
                         v_after.snapshot_keep_days) THEN
        PERFORM write_audit(ARRAY[(NULL, 'balance', 'settings', NULL, 'balance_settings_changed', NULL, NULL,
                                   jsonb_build_object('before', jsonb_build_object(
                                                          'drift_threshold', v_before.drift_threshold,
                                                          'venue_withdraw_fee_cap', v_before.venue_withdraw_fee_cap,
                                                          'max_balance', v_before.max_balance,
                                                          'snapshot_keep_days', v_before.snapshot_keep_days),
                                                      'after', jsonb_build_object(
                                                          'drift_threshold', v_after.drift_threshold,
                                                          'venue_withdraw_fee_cap', v_after.venue_withdraw_fee_cap,
                                                          'max_balance', v_after.max_balance,
                                                          'snapshot_keep_days', v_after.snapshot_keep_days)))::qtg.audit_event]);
    END IF;
END
$$;
