-- verify_drift: the verify_drift_worker's round. Takes up to p_max snapshots
-- not verified yet, oldest first (FOR UPDATE SKIP LOCKED: two workers never
-- take one), and for each:
--   a failed read                        FAILED_READ: nothing is concluded
--   an account without a baseline        its first successful snapshot becomes
--                                        the baseline, unconfirmed (audited:
--                                        BASELINE)
--   older than the account's baseline    BEFORE_BASELINE (re-baselined since)
--   otherwise                            the expected range from the engine's own
--                                        records (balance_expectations); the
--                                        unexplained change is actual - [low, high]:
--     within balance_settings.drift_threshold of zero   OK
--     beyond it                                         DRIFT: the account's OPEN
--        alert is raised (expected range, actual, baseline, snapshot, audited
--        'drift_alert_raised') and the breakers of the lanes and venues
--        (executors) of the nodes touching the account since its baseline are
--        tripped through set_breaker, by p_worker, once an operator
--        confirmed the account's baseline (confirm_balance_baseline: until
--        then it is one runner's reading, and trips nothing); with no such
--        node, none (a
--        reading is one runner's word: it may stop the scopes that moved the
--        account, never every scope of the network; the alert is for the
--        operators, who may stop more: trip_breaker). An
--        account with an OPEN alert keeps that one alert: a later drifting
--        snapshot updates its latest snapshot, range and actual balance.
-- Before it computes the ranges it moves the accounts' anchors
-- (advance_balance_anchors): the effects decided for good more than
-- p_anchor_lag_seconds ago are summed once, and a range then reads only the
-- effects decided since (a read that started before its account's anchor, as
-- one recorded that much later than it started, is counted from the baseline).
-- A snapshot back within the range does not close an alert: two operators do
-- (acknowledge_drift_alert). Every snapshot taken is marked verified, with its
-- outcome and expected range (what balance_status shows). Returns
-- one row per snapshot. QT002 no worker name, p_max outside 1..1000 or
-- p_anchor_lag_seconds outside 1..86400.
-- Locks: the snapshots, then the anchors, the baselines and alerts they touch.
CREATE OR REPLACE FUNCTION verify_drift(p_worker text, p_max integer DEFAULT 100,
                                        p_anchor_lag_seconds numeric DEFAULT 300)
RETURNS TABLE (
    snapshot_id   bigint,
    account_kind  text,
    account_key   text,
    address       text,
    asset         text,
    actual        numeric,
    expected_low  numeric,
    expected_high numeric,
    outcome       text,
    alert_id      bigint
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_count    integer;
    v_now      timestamptz := clock();
    v_set      balance_settings;
    v_ids      bigint[];
    v_row      record;
    v_outcome  text;
    v_alert    bigint;
    v_inserted boolean;
    v_breakers text[];
    v_scope    text[];
    v_entity   text;
BEGIN
    PERFORM check_read_committed('verify_drift');
    PERFORM check_worker('verify_drift', p_worker);
    PERFORM check_args('verify_drift', p_max => p_max, p_max_limit => 1000);
    IF p_anchor_lag_seconds IS NULL OR p_anchor_lag_seconds = 'NaN' OR p_anchor_lag_seconds < 1
       OR p_anchor_lag_seconds > 86400 THEN
        RAISE EXCEPTION 'verify_drift: p_anchor_lag_seconds must be between 1 and 86400, got %',
                        coalesce(p_anchor_lag_seconds::text, 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'How long a balance read may take to be recorded before it is counted the slow way.';
    END IF;
    SELECT * INTO STRICT v_set FROM balance_settings;

    SELECT array_agg(x.id ORDER BY x.id) INTO v_ids
      FROM (SELECT s.id FROM balance_snapshots s WHERE s.verified_at IS NULL
             ORDER BY s.id LIMIT p_max FOR UPDATE SKIP LOCKED) x;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    -- accounts seen for the first time: their first successful snapshot is the baseline
    WITH firsts AS (
        SELECT DISTINCT ON (s.account_kind, s.account_key, s.address, s.asset) s.*
          FROM balance_snapshots s
         WHERE s.id = ANY (v_ids) AND s.balance IS NOT NULL
         ORDER BY s.account_kind, s.account_key, s.address, s.asset, s.id
    ), added AS (
        INSERT INTO balance_baselines (account_kind, account_key, address, asset, snapshot_id, set_at, set_by, reason)
        SELECT f.account_kind, f.account_key, f.address, f.asset, f.id, v_now, p_worker, 'first snapshot'
          FROM firsts f
        ON CONFLICT DO NOTHING
        RETURNING *
    )
    SELECT write_audit(array_agg((p_worker, 'balance',
                                  a.account_kind || ':' || a.account_key || ':' || a.address || ':' || a.asset,
                                  NULL, 'balance_baseline_set', NULL, 'BASELINED',
                                  jsonb_build_object('snapshot_id', a.snapshot_id, 'reason', a.reason))::qtg.audit_event))
      INTO v_count
      FROM added a;

    PERFORM advance_balance_anchors(v_now, p_anchor_lag_seconds);

    FOR v_row IN
        SELECT s.id, s.account_kind, s.account_key, s.address, s.asset, s.balance,
               e.baseline_snapshot_id, e.expected_low, e.expected_high, e.lanes, e.executors,
               bl.snapshot_id AS base_id, bl.confirmed_by IS NOT NULL AS confirmed
          FROM balance_snapshots s
          LEFT JOIN balance_baselines bl ON bl.account_kind = s.account_kind AND bl.account_key = s.account_key
                                        AND bl.address = s.address AND bl.asset = s.asset
          LEFT JOIN balance_expectations(v_ids) e ON e.snapshot_id = s.id
         WHERE s.id = ANY (v_ids)
         ORDER BY s.id
    LOOP
        v_alert := NULL;
        v_outcome := CASE
            WHEN v_row.balance IS NULL THEN 'FAILED_READ'
            WHEN v_row.base_id = v_row.id THEN 'BASELINE'
            WHEN v_row.expected_low IS NULL THEN 'BEFORE_BASELINE'
            WHEN v_row.balance < v_row.expected_low - v_set.drift_threshold
              OR v_row.balance > v_row.expected_high + v_set.drift_threshold THEN 'DRIFT'
            ELSE 'OK' END;
        IF v_outcome = 'DRIFT' THEN
            v_entity := v_row.account_kind || ':' || v_row.account_key || ':' || v_row.address || ':' || v_row.asset;
            INSERT INTO balance_drift_alerts AS d (account_kind, account_key, address, asset, alert_state,
                                                   baseline_snapshot_id, first_snapshot_id, last_snapshot_id,
                                                   expected_low, expected_high, actual, raised_at, last_seen_at, raised_by)
            VALUES (v_row.account_kind, v_row.account_key, v_row.address, v_row.asset, 'OPEN',
                    v_row.baseline_snapshot_id, v_row.id, v_row.id,
                    v_row.expected_low, v_row.expected_high, v_row.balance, v_now, v_now, p_worker)
            ON CONFLICT (account_kind, account_key, address, asset) WHERE alert_state = 'OPEN'
            DO UPDATE SET last_snapshot_id = excluded.last_snapshot_id,
                          expected_low = excluded.expected_low,
                          expected_high = excluded.expected_high,
                          actual = excluded.actual,
                          last_seen_at = excluded.last_seen_at
            RETURNING d.id, (d.xmax = 0) INTO v_alert, v_inserted;
            IF v_inserted THEN
                v_breakers := ARRAY(SELECT 'lane:' || l FROM unnest(v_row.lanes) l
                                     WHERE v_row.confirmed
                                    UNION
                                    SELECT 'venue:' || x FROM unnest(v_row.executors) x
                                     WHERE v_row.confirmed);
                v_breakers := ARRAY(SELECT b FROM unnest(v_breakers) b ORDER BY b);
                FOREACH v_entity IN ARRAY v_breakers LOOP
                    v_scope := string_to_array(v_entity, ':');
                    PERFORM set_breaker(v_scope[1], v_scope[2],
                        format('drift alert %s: %s %s %s holds %s %s, expected %s to %s', v_alert,
                               v_row.account_kind, v_row.account_key, v_row.address, trim_scale(v_row.balance),
                               v_row.asset, trim_scale(v_row.expected_low), trim_scale(v_row.expected_high)),
                        p_worker);
                END LOOP;
                UPDATE balance_drift_alerts SET breakers = v_breakers WHERE id = v_alert;
                v_entity := v_row.account_kind || ':' || v_row.account_key || ':' || v_row.address || ':' || v_row.asset;
                PERFORM write_audit(ARRAY[(p_worker, 'balance', v_entity, NULL, 'drift_alert_raised', NULL, 'OPEN',
                                           jsonb_build_object('alert_id', v_alert, 'snapshot_id', v_row.id,
                                                              'baseline_snapshot_id', v_row.baseline_snapshot_id,
                                                              'actual', v_row.balance,
                                                              'expected_low', v_row.expected_low,
                                                              'expected_high', v_row.expected_high,
                                                              'breakers', v_breakers))::qtg.audit_event]);
            END IF;
        END IF;
        UPDATE balance_snapshots
           SET verified_at = v_now, outcome = v_outcome,
               expected_low = v_row.expected_low, expected_high = v_row.expected_high
         WHERE id = v_row.id;
        snapshot_id := v_row.id;
        account_kind := v_row.account_kind;
        account_key := v_row.account_key;
        address := v_row.address;
        asset := v_row.asset;
        actual := v_row.balance;
        expected_low := v_row.expected_low;
        expected_high := v_row.expected_high;
        outcome := v_outcome;
        alert_id := v_alert;
        RETURN NEXT;
    END LOOP;
END
$$;
