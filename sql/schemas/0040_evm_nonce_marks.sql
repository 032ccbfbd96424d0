-- depends: 0039_pipeline_rollups
--
-- The evm_nonce_reaper's gap search (evm_nonce_gaps, every 15 s) and the
-- evm_accounts view walked every nonce a treasury account ever used: about
-- 0.3 s a call at 100,000 nonces, and growing with the account's history.
-- Almost all of those nonces are settled for good, and a settled nonce can
-- never become a gap:
--   - an intent holds it SUBMITTED and the intent's node has finished (a
--     finished node never changes state again, nor is its intent changed), or
--   - a fill was recorded at it (evm_nonce_gaps never lists it again), or
--   - it was reported closed on the chain (evm_closed_nonces).
--
-- evm_nonce_marks, one row per treasury account that has used a nonce:
--   settled_below  every nonce of the account from its first intent's up to
--                  (not including) this one is settled for good
--   moved_at       when settle_evm_nonces last moved it
--
-- settle_evm_nonces (the reaper, before each gap search) moves the mark up to
-- the first nonce that is not settled: a gap, or a transaction still out. The
-- mark never passes a nonce the gap search could list, now or later, and only
-- ever moves up. The gap search and evm_accounts read from the mark up.
-- Without a row they read from the account's first nonce, as before.
--
-- evm_transactions_fills: the fills alone (one per gap closed), which
-- evm_stale_transactions lists every round; without it that read every
-- transaction the engine ever signed.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE evm_nonce_marks (
    chain_key     text NOT NULL,
    address       text NOT NULL,
    settled_below bigint NOT NULL CHECK (settled_below >= 0),
    moved_at      timestamptz NOT NULL,
    PRIMARY KEY (chain_key, address),
    FOREIGN KEY (chain_key, address) REFERENCES evm_nonces
);

CREATE INDEX evm_transactions_fills ON evm_transactions (chain_key, sender, nonce) WHERE purpose = 'fill';
$ddl$);
