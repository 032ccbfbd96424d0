-- depends: 0049_approval_after_creation
--
-- A balance baseline is one runner's reading until an operator confirms it:
-- verify_drift makes an account's first successful snapshot its baseline, but
-- a drift measured from an unconfirmed baseline raises its alert and trips no
-- breaker (a runner login could otherwise invent the reading every later
-- comparison is made from). confirm_balance_baseline records who confirmed
-- it; a re-baseline by two operators (acknowledge_drift_alert) is confirmed
-- by the second. Baselines set before by an acknowledgement are confirmed by
-- the operator who set them; the others wait for an operator.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE balance_baselines
    ADD COLUMN confirmed_by text,
    ADD COLUMN confirmed_at timestamptz,
    ADD CHECK ((confirmed_by IS NULL) = (confirmed_at IS NULL));
UPDATE balance_baselines SET confirmed_by = set_by, confirmed_at = set_at
 WHERE reason LIKE 'drift alert % acknowledged: %';
$ddl$);
