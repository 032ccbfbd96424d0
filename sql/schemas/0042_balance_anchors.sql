-- depends: 0041_capital_transfer_followups_at_landing
--
-- verify_drift (every 10 s) computed each account's expected balance from its
-- baseline and every side-effect node that finished since: a baseline moves
-- only when two operators re-baseline the account, so that read grew with the
-- whole history since (1.85 s a call at 100,000 transfers, and past the
-- runner's statement timeout at a few million, after which no drift would be
-- seen). Most of those nodes are decided for good: their effect on the
-- account is certain or void, and what it adds to the expected balance since
-- the baseline never changes again.
--
-- balance_anchors, one row per account with a baseline:
--   baseline_snapshot_id  the baseline the sums are relative to (a new
--                         baseline starts the row again; pruned with it)
--   through_at            every effect on the account decided (certain, or
--                         void) before it is summed in low .. high
--   low, high             what those effects change the balance by since the
--                         baseline's read
--   lanes, executors      of the nodes of those effects (the breakers a drift
--                         alert trips)
--   fence_at              where through_at moves next, once none of the
--   fence_xacts           transactions running when it was drawn (virtual
--                         ids) still runs: a decision stamped before fence_at
--                         was made by one of them or by one already ended
--   moved_at              when through_at last moved
-- verify_drift moves the anchors (advance_balance_anchors) and reads each
-- snapshot read from through_at on as the anchor's sums plus the effects not
-- decided by then; a snapshot read before through_at is computed from the
-- baseline, as before.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE balance_anchors (
    account_kind         text NOT NULL,
    account_key          text NOT NULL,
    address              text NOT NULL,
    asset                text NOT NULL,
    baseline_snapshot_id bigint NOT NULL REFERENCES balance_snapshots ON DELETE CASCADE,
    through_at           timestamptz NOT NULL,
    low                  numeric NOT NULL,
    high                 numeric NOT NULL,
    lanes                text[] NOT NULL DEFAULT '{}',
    executors            text[] NOT NULL DEFAULT '{}',
    fence_at             timestamptz,
    fence_xacts          text[] NOT NULL DEFAULT '{}',
    moved_at             timestamptz NOT NULL,
    PRIMARY KEY (account_kind, account_key, address, asset),
    CHECK (low <= high)
);
$ddl$);
