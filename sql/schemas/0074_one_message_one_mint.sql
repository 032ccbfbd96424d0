-- depends: 0073_drift_ack_actual
--
-- A cctp_mint node mints the message its cctp_burn parent's evidence names
-- (bridge_call_problem holds the signed bytes to that nonce). That evidence
-- is the runner's word: a runner login could complete one burn with another
-- burn's attested message of the same amount to the same recipient (public
-- from Iris by that burn's transaction). Both mints then named one message:
-- the first minted it, the second completed on that mint, and the first
-- burn's own message was minted by no one, seen only as an account short by
-- one mint. One message is now minted by one mint node:
--   cctp_message_mints  nonce         the message's nonce (0x and 64
--                                     lower-case hex digits; CCTP v2's
--                                     MessageTransmitterV2 receives a nonce
--                                     once), the key
--                       burn_node_id  the burn whose evidence named it
--                       mint_node_id  the mint that signed it first
--                       claimed_at    when (the engine's clock; for a mint
--                                     signed before this migration, its
--                                     first record)
-- record_intent_prepared_batch writes a mint's row with the first bytes it
-- records and refuses another mint's bytes for that nonce (QT032, naming
-- both burns), and a mint completes only on its own row (finish_nodes).
-- No procedure gives a message to another mint: settling such a conflict
-- is the owner's hand, once the runner login that named the message is
-- stopped (docs/executors.md). Only the owner writes it; the reader role SELECTs it like
-- every table (granted by the installer). Mints already signed get their
-- rows here; a database where two mints already signed one message is not
-- migrated: the migration says which, for an operator to settle first.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE cctp_message_mints (
    nonce        text NOT NULL CHECK (nonce ~ '^0x[0-9a-f]{64}$'),
    burn_node_id bigint NOT NULL REFERENCES movement_request_nodes (id),
    mint_node_id bigint NOT NULL REFERENCES movement_request_nodes (id),
    claimed_at   timestamptz NOT NULL,
    CONSTRAINT cctp_message_mints_one_mint_a_message PRIMARY KEY (nonce)
);
DO $fill$
DECLARE
    v_mint  record;
    v_twice text;
BEGIN
    FOR v_mint IN
        SELECT m.id AS mint_node_id, min(b.id) AS burn_node_id, lower(min(b.evidence ->> 'nonce')) AS nonce,
               (SELECT min(t.prepared_at) FROM node_intents t
                 WHERE t.node_id = m.id AND t.signed_tx_hash IS NOT NULL) AS signed_at
          FROM movement_request_nodes m
          JOIN movement_plan_edges edge ON edge.child_node_id = m.id
          JOIN movement_request_nodes b ON b.id = edge.parent_node_id AND b.executor_key = 'cctp_burn'
         WHERE m.executor_key = 'cctp_mint'
           AND EXISTS (SELECT 1 FROM node_intents t WHERE t.node_id = m.id AND t.signed_tx_hash IS NOT NULL)
         GROUP BY m.id
        HAVING count(*) = 1 AND lower(min(b.evidence ->> 'nonce')) ~ '^0x[0-9a-f]{64}$'
         ORDER BY m.id
    LOOP
        INSERT INTO cctp_message_mints (nonce, burn_node_id, mint_node_id, claimed_at)
        VALUES (v_mint.nonce, v_mint.burn_node_id, v_mint.mint_node_id, coalesce(v_mint.signed_at, now()))
        ON CONFLICT (nonce) DO NOTHING;
        IF NOT FOUND THEN
            v_twice := concat_ws('; ', v_twice,
                                 format('%s (mint %s of burn %s, and mint %s)', v_mint.nonce, v_mint.mint_node_id,
                                        v_mint.burn_node_id,
                                        (SELECT c.mint_node_id FROM cctp_message_mints c WHERE c.nonce = v_mint.nonce)));
        END IF;
    END LOOP;
    IF v_twice IS NOT NULL THEN
        RAISE EXCEPTION 'network %: mint nodes signed one message twice: %', current_schema(), v_twice
            USING ERRCODE = 'QT032',
                  HINT = 'One message is minted by one mint: find on the source chain which burn each message is '
                         'of. As the owner, correct the evidence of the burn that names another''s message and '
                         'settle its mint by hand, then migrate again.';
    END IF;
END
$fill$;
$ddl$);
