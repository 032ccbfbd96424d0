-- depends: 0068_public_privileges
--
-- A record may sign above an account's next nonce, where the chain's own
-- count is ahead (another sender used the key), by at most 64. Each nonce
-- skipped so is a gap the evm_nonce_reaper closes with a paid self-transfer,
-- and each fresh claim could skip 64 again: a runner login recording far
-- ahead claim after claim made the treasury pay 64 fills a claim. The skips
-- of an account are now counted, and at most 64 are followed in a day:
--   evm_nonces.skipped_nonces  the nonces skipped since skipped_since
--   evm_nonces.skipped_since   when the day of skips began (the first skip
--                              after the last day ended); NULL before any

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE evm_nonces
    ADD COLUMN skipped_nonces integer NOT NULL DEFAULT 0 CHECK (skipped_nonces >= 0),
    ADD COLUMN skipped_since  timestamptz,
    ADD CHECK ((skipped_since IS NULL) = (skipped_nonces = 0));
$ddl$);
