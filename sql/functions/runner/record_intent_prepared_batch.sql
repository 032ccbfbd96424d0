-- record_intent_prepared_batch: record_intent_prepared for many nodes in one
-- call and one transaction, set-based. Per node: intent CLAIMED | PREPARED ->
-- PREPARED; the node stays SUBMITTING.
--
-- Element i of every array describes one node (arrays of equal length, no node
-- twice, at most 1000; QT002 otherwise, and nothing changes). Every rule of
-- record_intent_prepared holds per node, and a node that breaks one is left
-- unchanged and reported in its row instead of failing the batch:
--   QT011 no such node; QT030 not the node's current claim secret, or the
--   claim's lease ran out (do not broadcast: recovery may own it); QT021 not
--   SUBMITTING, no open intent for the current claim, or an intent already
--   PREPARED recorded again as another side effect (another nonce or external
--   request id; without either, another hash or payload); QT002 a malformed
--   secret, or neither a signed tx hash, an external request id nor a
--   payload; QT005 a payload or a text beyond engine_limits; QT050 a record the
--   engine cannot apply to its node (it breaks a constraint inside the engine:
--   the others are recorded all the same).
-- EVM: a node that names the account its nonce belongs to (p_chain_keys and
-- p_senders, a treasury account, with its nonce and signed hash) gets the
-- nonce allocated here, in this transaction, from evm_nonces: the records of
-- one account in a call must hold consecutive nonces from the account's next
-- one on (or above it, when the chain's own count is ahead: the skip is in the
-- audit row; at most 64 above it, c_max_skip: bytes signed any further ahead
-- could only be mined after that many transactions nobody recorded, and
-- would leave that many nonces for the reaper to fill, each a paid
-- self-transfer; and at most 64 skipped nonces an account in a day,
-- evm_nonces.skipped_nonces since skipped_since, skip_count: each claim
-- could skip 64 again); a record below it or
-- too far above it, or a call the nonces of which are not consecutive, is
-- refused for that account's nodes with QT031 (the message says the next
-- nonce: sign again at it). The first record of an account sets its next
-- nonce wherever it is (the engine has no count of its own yet). Compare and set on the account's row, so
-- concurrent dispatchers never share a nonce, and a crash before the commit
-- allocates nothing. A PREPARED intent recorded again at its own nonce (a
-- replacement) allocates nothing. The signed raw transaction (p_raw_txs, 0x
-- hex, at most 128 KiB) goes into evm_transactions with its hash before
-- anything is broadcast; a raw transaction needs its hash, nonce and account
-- (QT002), and an EVM record its bytes, whose keccak256 the hash must be
-- (QT002; about a millisecond a record): a node of an executor that signs
-- (signs_evm) records nothing without them (QT002), or a hash alone would
-- name any transaction as its own. QT014: the account is not a
-- treasury account of a registered chain.
-- The raw transaction is read here, not taken on the runner's word
-- (intent_tx_problem): signed for the chain's id, at the nonce recorded with
-- it, under the chain's fee caps (QT002), recorded under its route's chain and
-- sender (QT032: the nonce reaper signs a stale call again with the key of the
-- account it is recorded under), and making exactly its route's one call
-- (QT032: an evm_transfer node its transfer, a cctp_burn, cctp_mint, ccip or
-- stargate node its bridge call; a node of any other executor signs no
-- transaction).
-- What is sent is what was approved: the payload (and an exchange's request
-- id) must be what the node's route says now (intent_payload_problem: QT032,
-- or QT002 for a payload that is not an object), whatever the executor; the
-- payload kept from an earlier record of the claim is checked when none is
-- given again.
-- One message, one mint: a cctp_mint node's first record makes the message
-- its burn's evidence names (cctp_burn_message) its own (cctp_message_mints);
-- another mint's bytes for that message are refused (QT032, naming both
-- burns: a burn's evidence is its runner's word, and one of them names
-- another burn's message).
-- A node presented with a wrong secret is never locked.
-- A recorded node gets one intent_prepared audit row (actor: the claimer),
-- exactly as record_intent_prepared writes it; signed_tx_hashes keeps every
-- hash ever signed.
-- Locks: the nodes' requests in id order, then the nodes in id order, then
-- their intents, then the accounts' evm_nonces rows (the documented order; two
-- batches never wait on each other in a cycle); a mint's first record then
-- writes its message's cctp_message_mints key, which a concurrent record of
-- the same message waits on (only two mints of one message share a key).
-- Plans: one per statement for the session (force_generic_plan), as
-- complete_submit_batch: planned per call, the record's one statement took
-- about 0.9 ms to plan, most of a one-node call. The generic plan reaches each
-- node's intent by the node's row (node_intents on node id and claim token
-- from movement_request_nodes): joined on the input's node id instead, a plan
-- made without the batch in sight could read the intents index on the claim
-- token alone, every intent of that token for every node.
-- Returns one row per element, in input order: the intent id, or the error.
CREATE OR REPLACE FUNCTION record_intent_prepared_batch(
    p_node_ids             bigint[],
    p_claim_secrets        text[],
    p_nonces               bigint[] DEFAULT NULL,
    p_signed_tx_hashes     text[] DEFAULT NULL,
    p_external_request_ids text[] DEFAULT NULL,
    p_payloads             jsonb[] DEFAULT NULL,
    p_chain_keys           text[] DEFAULT NULL,
    p_senders              text[] DEFAULT NULL,
    p_raw_txs              text[] DEFAULT NULL
) RETURNS TABLE (node_id bigint, intent_id bigint, error_code text, error_message text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    c_max_skip constant integer := 64;  -- above the account's next nonce
    v_now      timestamptz := clock();
    v_n        integer := coalesce(cardinality(p_node_ids), 0);
    v_codes    text[];
    v_messages text[];
    v_round    integer;
BEGIN
    PERFORM check_read_committed('record_intent_prepared_batch');
    PERFORM check_arrays('record_intent_prepared_batch', v_n, ARRAY[cardinality(p_claim_secrets)],
                         ARRAY[cardinality(p_nonces), cardinality(p_signed_tx_hashes),
                               cardinality(p_external_request_ids), cardinality(p_payloads),
                               cardinality(p_chain_keys), cardinality(p_senders), cardinality(p_raw_txs)]);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO v_codes, v_messages
      FROM lock_claimed_nodes('record_intent_prepared', p_node_ids, p_claim_secrets, '{SUBMITTING}',
                              p_live_lease => true, p_claims => 'dispatched');
    SELECT * INTO v_codes, v_messages
      FROM limit_refusals('record_intent_prepared', p_node_ids, p_payloads, p_signed_tx_hashes,
                          p_external_request_ids, v_codes, v_messages);

    -- each node's record on its own (apply_each, as complete_submit_batch
    -- does): should one node break a rule inside the engine, the statement runs
    -- again for one node at a time, and that node alone is refused (QT050)
    <<apply_each>>
    FOREACH v_round IN ARRAY apply_rounds(v_codes) LOOP
        BEGIN
            WITH given AS (
                SELECT u.*
                  FROM unnest(p_node_ids,
                              coalesce(p_nonces, array_fill(NULL::bigint, ARRAY[v_n])),
                              coalesce(p_signed_tx_hashes, array_fill(NULL::text, ARRAY[v_n])),
                              coalesce(p_external_request_ids, array_fill(NULL::text, ARRAY[v_n])),
                              coalesce(p_payloads, array_fill(NULL::jsonb, ARRAY[v_n])),
                              coalesce(p_chain_keys, array_fill(NULL::text, ARRAY[v_n])),
                              coalesce(p_senders, array_fill(NULL::text, ARRAY[v_n])),
                              coalesce(p_raw_txs, array_fill(NULL::text, ARRAY[v_n])),
                              apply_mask(v_codes, v_round))
                       WITH ORDINALITY AS u(node_id, nonce, signed_tx_hash, external_request_id, payload,
                                            chain_key, sender, raw_tx, skip, ord)
                 WHERE u.skip IS NULL
            ), judged AS (
                SELECT g.*, mint.mint_burn, mint.mint_nonce,
                       CASE
                           WHEN g.nonce < 0 THEN
                               format('QT002 record_intent_prepared: node %s: a nonce is not negative, got %s',
                                      g.node_id, g.nonce)
                           WHEN g.signed_tx_hash IS NULL AND g.external_request_id IS NULL AND g.payload IS NULL THEN
                               'QT002 record_intent_prepared: give a signed tx hash, an external request id or a payload'
                           WHEN g.raw_tx IS NULL AND signs_evm((SELECT n.executor_key FROM movement_request_nodes n
                                                                  WHERE n.id = g.node_id)) THEN
                               format('QT002 record_intent_prepared: node %s: an EVM step records the transaction '
                                      'it signed: its chain, sender, nonce, hash and bytes together', g.node_id)
                           WHEN (g.chain_key IS NULL) <> (g.sender IS NULL)
                                OR (g.chain_key IS NOT NULL
                                    AND (g.nonce IS NULL OR g.signed_tx_hash IS NULL OR g.raw_tx IS NULL))
                                OR (g.raw_tx IS NOT NULL AND g.chain_key IS NULL) THEN
                               format('QT002 record_intent_prepared: node %s: a signed transaction is recorded with '
                                      'its chain, sender, nonce, hash and bytes together', g.node_id)
                           WHEN g.chain_key IS NOT NULL AND g.signed_tx_hash !~ '^0x[0-9a-f]{64}$' THEN
                               format('QT002 record_intent_prepared: node %s: a transaction hash is 0x and 64 '
                                      'lower-case hex digits', g.node_id)
                           WHEN g.raw_tx IS NOT NULL AND length(g.raw_tx) > 2 + 2 * 131072 THEN
                               format('QT005 record_intent_prepared: node %s: a raw transaction is at most 128 KiB, '
                                      'got %s bytes', g.node_id, (length(g.raw_tx) - 2) / 2)
                           WHEN g.raw_tx IS NOT NULL AND g.raw_tx !~ '^0x([0-9a-f]{2})+$' THEN
                               format('QT002 record_intent_prepared: node %s: a raw transaction is 0x and lower-case '
                                      'hex bytes', g.node_id)
                           WHEN g.chain_key IS NOT NULL AND NOT EXISTS (
                                    SELECT 1 FROM treasury_accounts a
                                     WHERE a.chain_key = g.chain_key AND a.address = g.sender) THEN
                               format('QT014 record_intent_prepared: node %s: %s is not a treasury account of chain %s '
                                      'on this network', g.node_id, g.sender, g.chain_key)
                           -- last, as the dearest: the hash is the bytes' own (a hash of any
                           -- transaction on the chain, a reverted one, would be read as the node's)
                           ELSE coalesce(tx.problem, route.problem, mint.problem,
                                         CASE WHEN '0x' || encode(keccak256(decode(substr(g.raw_tx, 3), 'hex')), 'hex')
                                                   <> g.signed_tx_hash
                                              THEN format('QT002 record_intent_prepared: node %s: %s is not the hash of '
                                                          'the raw transaction given', g.node_id, g.signed_tx_hash)
                                         END)
                       END AS refused
                  FROM given g
                  -- what the signed bytes do, read from them: their chain, nonce, fees and call
                  LEFT JOIN LATERAL (
                      SELECT intent_tx_problem(g.node_id, g.chain_key, g.sender, g.nonce, g.raw_tx,
                                               coalesce(g.payload, (
                                                   SELECT t.prepared_payload
                                                     FROM movement_request_nodes n
                                                     JOIN node_intents t ON t.node_id = n.id AND t.claim_token = n.claim_token
                                                    WHERE n.id = g.node_id))) AS problem
                       WHERE g.raw_tx IS NOT NULL AND length(g.raw_tx) <= 2 + 2 * 131072
                  ) tx ON true
                  -- what the payload says, against the approved route (kept when not given again)
                  LEFT JOIN LATERAL (
                      SELECT intent_payload_problem(g.node_id, t.idempotency_key, coalesce(g.payload, t.prepared_payload),
                                                    coalesce(g.external_request_id, t.external_request_id),
                                                    p_recording => true) AS problem
                        FROM movement_request_nodes n
                        JOIN node_intents t ON t.node_id = n.id AND t.claim_token = n.claim_token
                       WHERE n.id = g.node_id
                  ) route ON true
                  -- one message, one mint: the message this mint's burn names, and the mint
                  -- that signed it first (cctp_message_mints)
                  LEFT JOIN LATERAL (
                      SELECT m.burn_node_id AS mint_burn, m.nonce AS mint_nonce,
                             CASE WHEN o.mint_node_id IS NOT NULL THEN
                                 format('QT032 record_intent_prepared: node %s: the message its burn (node %s) '
                                        'names, nonce %s, is node %s''s to mint (of burn %s): one message is '
                                        'minted by one mint. A burn''s evidence is its runner''s word: find which '
                                        'burn the message is of on the source chain before either mint is signed '
                                        'again', g.node_id, m.burn_node_id, m.nonce, o.mint_node_id, o.burn_node_id)
                             END AS problem
                        FROM movement_request_nodes n
                       CROSS JOIN cctp_burn_message(n.id) m
                        LEFT JOIN cctp_message_mints o ON o.nonce = m.nonce AND o.mint_node_id <> n.id
                       WHERE g.raw_tx IS NOT NULL AND n.id = g.node_id AND n.executor_key = 'cctp_mint'
                  ) mint ON true
            ), input AS (
                SELECT j.node_id, j.nonce, j.signed_tx_hash, j.external_request_id, j.payload,
                       j.chain_key, j.sender, j.raw_tx, j.ord, j.mint_burn, j.mint_nonce,
                       left(j.refused, 5) AS refusal, substr(j.refused, 7) AS reason
                  FROM judged j
            ), checked AS (
                -- a PREPARED intent is re-recorded only as the same side effect: the same
                -- nonce of the same account (a replacement, e.g. a fee bump, may carry a new
                -- signed hash), the same external request id, and without either the same
                -- hash and payload
                SELECT i.node_id, i.nonce, i.signed_tx_hash, i.external_request_id, i.payload, i.ord,
                       i.chain_key, i.sender, i.raw_tx, i.mint_burn, i.mint_nonce,
                       i.chain_key IS NOT NULL
                           AND NOT (t.intent_state = 'PREPARED' AND t.nonce IS NOT DISTINCT FROM i.nonce) AS allocates,
                       coalesce(i.refusal, CASE WHEN t.intent_state = 'PREPARED' AND NOT (
                                coalesce(i.nonce, t.nonce) IS NOT DISTINCT FROM t.nonce
                            AND coalesce(i.chain_key, t.chain_key) IS NOT DISTINCT FROM t.chain_key
                            AND coalesce(i.sender, t.sender) IS NOT DISTINCT FROM t.sender
                            AND coalesce(i.external_request_id, t.external_request_id)
                                    IS NOT DISTINCT FROM t.external_request_id
                            AND (t.nonce IS NOT NULL OR (
                                     coalesce(i.signed_tx_hash, t.signed_tx_hash) IS NOT DISTINCT FROM t.signed_tx_hash
                                 AND coalesce(i.payload, t.prepared_payload) IS NOT DISTINCT FROM t.prepared_payload)))
                            THEN 'QT021' END) AS refusal,
                       CASE WHEN i.refusal IS NOT NULL THEN i.reason
                            ELSE format('record_intent_prepared: node %s already has a prepared side effect; a new record must '
                                        'keep it (the same nonce of the same account, external request id, or hash and '
                                        'payload)', i.node_id)
                       END AS reason
                  FROM input i
                  LEFT JOIN movement_request_nodes n ON n.id = i.node_id
                  LEFT JOIN node_intents t ON t.node_id = n.id AND t.claim_token = n.claim_token
            ), accounts AS (
                -- the nonces each account allocates in this call: consecutive, or none
                SELECT c.chain_key, c.sender, min(c.nonce) AS lo, max(c.nonce) AS hi,
                       count(*) = count(DISTINCT c.nonce) AND max(c.nonce) - min(c.nonce) + 1 = count(*) AS consecutive
                  FROM checked c
                 WHERE c.refusal IS NULL AND c.allocates
                 GROUP BY c.chain_key, c.sender
            ), allocated AS (
                -- compare and set on the account's row: the row lock orders concurrent
                -- dispatchers, and the later one sees the next nonce the first committed
                INSERT INTO evm_nonces AS e (chain_key, address, next_nonce, updated_at)
                SELECT a.chain_key, a.sender, a.hi + 1, v_now
                  FROM accounts a
                 WHERE a.consecutive
                 ORDER BY a.chain_key, a.sender
                ON CONFLICT (chain_key, address) DO UPDATE
                   SET next_nonce = excluded.next_nonce, updated_at = excluded.updated_at,
                       -- a skip (the call's first nonce above the account's next)
                       -- adds to the account's day of skips, or starts a day
                       skipped_nonces = skip_count(e.skipped_nonces, e.skipped_since, v_now,
                                                   (SELECT a.lo FROM accounts a
                                                     WHERE a.chain_key = e.chain_key AND a.sender = e.address)
                                                   - e.next_nonce),
                       skipped_since = CASE WHEN (SELECT a.lo FROM accounts a
                                                   WHERE a.chain_key = e.chain_key AND a.sender = e.address)
                                                 = e.next_nonce
                                              OR skip_day_runs(e.skipped_since, v_now)
                                            THEN e.skipped_since ELSE v_now END
                 WHERE skip_count(e.skipped_nonces, e.skipped_since, v_now,
                                  (SELECT a.lo FROM accounts a
                                    WHERE a.chain_key = e.chain_key AND a.sender = e.address)
                                  - e.next_nonce) <= c_max_skip
                RETURNING e.chain_key, e.address
            ), applied AS (
                SELECT c.*
                  FROM checked c
                 WHERE c.refusal IS NULL
                   AND (NOT c.allocates
                        OR EXISTS (SELECT 1 FROM allocated a WHERE a.chain_key = c.chain_key AND a.address = c.sender))
            ), prepared AS (
                UPDATE node_intents t
                   SET intent_state        = 'PREPARED',
                       nonce               = coalesce(i.nonce, t.nonce),
                       chain_key           = coalesce(i.chain_key, t.chain_key),
                       sender              = coalesce(i.sender, t.sender),
                       signed_tx_hash      = coalesce(i.signed_tx_hash, t.signed_tx_hash),
                       signed_tx_hashes    = CASE WHEN i.signed_tx_hash IS NULL OR i.signed_tx_hash = ANY (t.signed_tx_hashes)
                                                  THEN t.signed_tx_hashes ELSE t.signed_tx_hashes || i.signed_tx_hash END,
                       external_request_id = coalesce(i.external_request_id, t.external_request_id),
                       prepared_payload    = coalesce(i.payload, t.prepared_payload),
                       prepared_at         = v_now
                  FROM applied i
                  JOIN movement_request_nodes n ON n.id = i.node_id
                 WHERE t.node_id = i.node_id
                   AND t.claim_token = n.claim_token
                   AND t.intent_state IN ('CLAIMED', 'PREPARED')
                RETURNING t.id, t.node_id
            ), minted AS (
                -- a mint's message is its own from its first record on (two records of
                -- one message in one call, or racing: the key breaks, the nodes are judged
                -- again one at a time, and the later is refused)
                INSERT INTO cctp_message_mints (nonce, burn_node_id, mint_node_id, claimed_at)
                SELECT i.mint_nonce, i.mint_burn, i.node_id, v_now
                  FROM applied i
                  JOIN prepared p ON p.node_id = i.node_id
                 WHERE i.mint_nonce IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM cctp_message_mints o WHERE o.nonce = i.mint_nonce)
                 ORDER BY i.ord
            ), transactions AS (
                -- the signed bytes, committed before they are broadcast
                INSERT INTO evm_transactions (tx_hash, chain_key, sender, nonce, intent_id, purpose, raw_tx,
                                              recorded_by, recorded_at)
                SELECT i.signed_tx_hash, i.chain_key, i.sender, i.nonce, p.id,
                       CASE WHEN i.allocates THEN 'intent' ELSE 'replacement' END, i.raw_tx, n.claimed_by, v_now
                  FROM applied i
                  JOIN prepared p ON p.node_id = i.node_id
                  JOIN movement_request_nodes n ON n.id = i.node_id
                 WHERE i.raw_tx IS NOT NULL
                 ORDER BY i.ord
                ON CONFLICT (tx_hash) DO NOTHING
                RETURNING tx_hash
            ), audited AS (
                SELECT write_audit(array_agg((n.claimed_by, 'node', i.node_id::text, n.request_id, 'intent_prepared',
                                              'SUBMITTING', 'SUBMITTING',
                                              jsonb_build_object('intent_id', p.id, 'nonce', i.nonce,
                                                                 'signed_tx_hash', i.signed_tx_hash,
                                                                 'external_request_id', i.external_request_id)
                                              || CASE WHEN i.chain_key IS NULL THEN '{}'::jsonb
                                                      ELSE jsonb_build_object('chain_key', i.chain_key, 'sender', i.sender)
                                                 END
                                             )::qtg.audit_event ORDER BY i.ord)) AS written
                  FROM applied i
                  JOIN prepared p ON p.node_id = i.node_id
                  JOIN movement_request_nodes n ON n.id = i.node_id
            ), answered AS (
                SELECT i.ord,
                       coalesce(i.refusal,
                                CASE WHEN p.id IS NULL AND i.allocates AND a.node_id IS NULL THEN 'QT031'
                                     WHEN p.id IS NULL THEN 'QT021' END) AS code,
                       CASE
                           WHEN i.refusal IS NOT NULL THEN i.reason
                           WHEN p.id IS NULL AND i.allocates AND a.node_id IS NULL THEN
                               format('record_intent_prepared: node %s: nonce %s of %s on %s is not the account''s '
                                      'next one (%s, or up to 64 above it where the chain''s own count is ahead, '
                                      'at most 64 skipped nonces a day: %s skipped since %s; or the nonces of one '
                                      'account in a call are not consecutive): sign again at the next nonce '
                                      '(evm_next_nonce); a chain count further ahead means another sender uses the '
                                      'key: an admin checks the account before moving its evm_nonces row',
                                      i.node_id, i.nonce, i.sender, i.chain_key,
                                      coalesce(e.next_nonce::text, 'none yet'), coalesce(e.skipped_nonces, 0),
                                      coalesce(e.skipped_since::text, 'never'))
                           WHEN p.id IS NULL THEN
                               format('record_intent_prepared: node %s has no open intent for its current claim', i.node_id)
                       END AS message
                  FROM checked i
                  LEFT JOIN applied a ON a.node_id = i.node_id
                  LEFT JOIN prepared p ON p.node_id = i.node_id
                  LEFT JOIN evm_nonces e ON e.chain_key = i.chain_key AND e.address = i.sender
                 CROSS JOIN audited
            )
            SELECT array_agg(CASE WHEN a.ord IS NULL THEN v_codes[o.ord] ELSE a.code END ORDER BY o.ord),
                   array_agg(CASE WHEN a.ord IS NULL THEN v_messages[o.ord] ELSE a.message END ORDER BY o.ord)
              INTO v_codes, v_messages
              FROM generate_series(1, v_n) AS o(ord)
              LEFT JOIN answered a ON a.ord = o.ord;
            EXIT apply_each WHEN v_round = 0;
        EXCEPTION WHEN OTHERS THEN
            IF transient_error(SQLSTATE) THEN
                RAISE;
            END IF;
            SELECT * INTO v_codes, v_messages
              FROM apply_refusal(v_codes, v_messages, v_round,
                                 format('record_intent_prepared: node %s: its record could not be applied', p_node_ids[v_round]),
                                 SQLERRM, SQLSTATE);
        END;
    END LOOP;

    RETURN QUERY
    SELECT a.node_id, a.intent_id, a.error_code, a.error_message
      FROM apply_answers(p_node_ids, v_codes, v_messages) a;
END
$$;
