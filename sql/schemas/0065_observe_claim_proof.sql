-- depends: 0064_observe_hold_bound
--
-- An observer's claim writes nothing. Before, claim_observe_batch wrote a
-- version of each node it claimed (a new claim_hash, claim_token, claimed_by
-- and claimed_at) and complete_observe_batch wrote a second one: a poll that
-- found nothing left two row versions, and their WAL, behind. The claim and
-- its report share one transaction, which holds the node's row lock from the
-- claim to the commit, so what the report must prove is that its secret was
-- handed out by a claim of this very transaction, at the node's current
-- claim_token, and that no one has written the node since. The secret is now
-- a MAC of exactly that:
--   HMAC-SHA256(key, network / node id / claim_token / the row version the
--               claim locked / transaction id / the server's start time)
-- (observe_claim_secret). The guard recomputes it for the node as it is and
-- the caller's transaction; a secret kept from an earlier transaction, made
-- for another node, network or claim, outlived by a write to the node (a
-- quarantine), or kept across a restart or a failover, matches nothing. The
-- report then bumps claim_token, so one claim makes one report.
--
-- qtg.claim_proof_key   the MAC's key, one for the database: 32 random bytes
--                       (two gen_random_uuid(), from pg_strong_random) kept
--                       as HMAC's two padded keys (the key XOR 0x36 and XOR
--                       0x5c, 64 bytes each). Only the owner reads it: no
--                       network role, reader or operator is granted it (it is
--                       in the common schema, outside the reader's grant on
--                       its network's tables), so no login can make a secret
--                       of its own. A new key (the row replaced) refuses only
--                       the reports of the transactions running at that
--                       moment: their nodes are observed again at the next
--                       turn.

SET LOCAL ROLE qtg_owner;

CREATE TABLE qtg.claim_proof_key (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    inner_key bytea NOT NULL CHECK (octet_length(inner_key) = 64),
    outer_key bytea NOT NULL CHECK (octet_length(outer_key) = 64),
    made_at   timestamptz NOT NULL DEFAULT statement_timestamp()
);
REVOKE ALL ON qtg.claim_proof_key FROM PUBLIC;

WITH k AS (
    SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) || '\x'::bytea AS key
), padded AS (
    SELECT k.key || decode(repeat('00', 64 - octet_length(k.key)), 'hex') AS key FROM k
)
INSERT INTO qtg.claim_proof_key (inner_key, outer_key)
SELECT decode(string_agg(lpad(to_hex(get_byte(p.key, i) # 54), 2, '0'), '' ORDER BY i), 'hex'),
       decode(string_agg(lpad(to_hex(get_byte(p.key, i) # 92), 2, '0'), '' ORDER BY i), 'hex')
  FROM padded p, generate_series(0, 63) AS i
 GROUP BY p.key;
