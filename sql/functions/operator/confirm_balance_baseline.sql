-- confirm_balance_baseline: an account's baseline, set from one runner's
-- reading (its first successful snapshot), confirmed by an operator who
-- checked that balance: from then on a drift from it trips the breakers of
-- the scopes that moved the account (verify_drift); before, it only raises
-- the alert. One operator suffices: the balance is the one the runner read,
-- and the confirmation names it (p_snapshot_id must be the baseline's, so an
-- operator confirms what they saw, not what a later read put there).
-- Confirming again is a no-op that returns the first confirmation's login.
-- QT002 a blank reason or a missing argument; QT005 a reason beyond
-- engine_limits; QT083 no baseline for that account, or p_snapshot_id is not
-- its baseline's (it changed since the operator looked). Audited
-- 'balance_baseline_confirmed'. Locks: the baseline.
-- Returns the login that confirmed it.
CREATE OR REPLACE FUNCTION confirm_balance_baseline(
    p_account_kind text,
    p_account_key  text,
    p_address      text,
    p_asset        text,
    p_snapshot_id  bigint,
    p_reason       text
) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := clock();
    v_actor  text := session_user;
    v_base   balance_baselines;
    v_entity text;
BEGIN
    IF num_nulls(p_account_kind, p_account_key, p_address, p_asset, p_snapshot_id) > 0 THEN
        RAISE EXCEPTION 'confirm_balance_baseline: name the account (kind, key, address, asset) and the baseline''s snapshot'
            USING ERRCODE = 'QT002', HINT = 'balance_status lists each account with its baseline_snapshot_id.';
    END IF;
    PERFORM check_reason('confirm_balance_baseline', p_reason, 'E.g. "matches the custodian''s statement of 2026-12-05".',
                         p_blank => 'confirm_balance_baseline: say how the balance was checked',
                         p_text => ARRAY[p_reason, p_account_kind, p_account_key, p_address, p_asset]);
    SELECT * INTO v_base FROM balance_baselines b
     WHERE b.account_kind = p_account_kind AND b.account_key = p_account_key
       AND b.address = p_address AND b.asset = p_asset
       FOR UPDATE;
    IF NOT FOUND OR v_base.snapshot_id <> p_snapshot_id THEN
        RAISE EXCEPTION 'confirm_balance_baseline: % % % % has no baseline at snapshot %',
                        p_account_kind, left(p_account_key, 80), left(p_address, 80), left(p_asset, 20), p_snapshot_id
            USING ERRCODE = 'QT083',
                  HINT = 'balance_status shows the account''s baseline_snapshot_id now; confirm that one.';
    END IF;
    IF v_base.confirmed_by IS NOT NULL THEN
        RETURN v_base.confirmed_by;
    END IF;
    UPDATE balance_baselines b
       SET confirmed_by = v_actor, confirmed_at = v_now
     WHERE b.account_kind = p_account_kind AND b.account_key = p_account_key
       AND b.address = p_address AND b.asset = p_asset;
    v_entity := p_account_kind || ':' || p_account_key || ':' || p_address || ':' || p_asset;
    PERFORM write_audit(ARRAY[(v_actor, 'balance', v_entity, NULL, 'balance_baseline_confirmed', 'BASELINED',
                               'CONFIRMED', jsonb_build_object('snapshot_id', p_snapshot_id,
                                                               'reason', p_reason))::qtg.audit_event]);
    RETURN v_actor;
END
$$;
