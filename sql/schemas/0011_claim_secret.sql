-- depends: 0010_heartbeat_interval
--
-- movement_request_nodes.claim_hash: the SHA-256 of the current claim's
-- secret. Every claim (claim_ready_nodes, claim_observe, claim_recovery_nodes)
-- hands its claimer a fresh secret of 244 random bits (claim_secret: two
-- gen_random_uuid(), from pg_strong_random) and stores only its hash here, so
-- that a login that can read the table (the network's reader role; operators
-- are members) never learns a live secret. Every completion presents the
-- secret; the guard (lock_claimed_nodes) locks only the nodes whose hash
-- matches. claim_token stays as the claim counter (it names the intent of
-- each claim and its idempotency key) and is never accepted as proof.
-- NULL: never claimed. A node claimed before this migration has no hash, so
-- its old token proves nothing: its lease runs out and recovery claims it.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_request_nodes
    ADD COLUMN claim_hash bytea CHECK (octet_length(claim_hash) = 32);
$ddl$);
