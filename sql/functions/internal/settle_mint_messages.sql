-- settle_mint_messages: one message, one mint. Each cctp_mint node of
-- p_node_ids, just COMPLETED, completes on the message its burn names
-- (cctp_burn_message) which it signed and owns in cctp_message_mints
-- (record_intent_prepared_batch writes the row at the mint's first record;
-- a mint signed before that rule gets it here when no other mint holds the
-- message). QT032, and nothing written, when a mint recorded no bytes, its
-- burn shows no message nonce, or another mint owns the message. Internal:
-- finish_nodes, on every path that completes a node. Locks: the messages'
-- keys it writes.
CREATE OR REPLACE FUNCTION settle_mint_messages(p_node_ids bigint[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_problem text;
BEGIN
    WITH mints AS (
        SELECT n.id AS node_id, m.burn_node_id, o.mint_node_id AS owner,
               CASE WHEN m.nonce ~ '^0x[0-9a-f]{64}$' THEN m.nonce END AS nonce,
               EXISTS (SELECT 1 FROM node_intents t WHERE t.node_id = n.id AND t.signed_tx_hash IS NOT NULL)
                   AS signed
          FROM movement_request_nodes n
         CROSS JOIN cctp_burn_message(n.id) m
          LEFT JOIN cctp_message_mints o ON o.nonce = m.nonce
         WHERE n.id = ANY (p_node_ids)
    ), claimed AS (
        INSERT INTO cctp_message_mints (nonce, burn_node_id, mint_node_id, claimed_at)
        SELECT k.nonce, k.burn_node_id, k.node_id, clock()
          FROM mints k
         WHERE k.owner IS NULL AND k.signed AND k.nonce IS NOT NULL
         ORDER BY k.nonce
    )
    SELECT min(CASE
                   WHEN NOT k.signed THEN
                       format('node %s: a cctp_mint completes on the receiveMessage it signed, and it recorded '
                              'none (record_intent_prepared)', k.node_id)
                   WHEN k.nonce IS NULL THEN
                       format('node %s: a cctp_mint completes on the message its one cctp_burn parent '
                              'attested, and no such parent shows a message nonce', k.node_id)
                   ELSE
                       format('node %s: the message its burn (node %s) names, nonce %s, is node %s''s to mint: '
                              'one message is minted by one mint, and a mint completes on its own',
                              k.node_id, k.burn_node_id, k.nonce, k.owner)
               END)
      INTO v_problem
      FROM mints k
     WHERE k.owner IS DISTINCT FROM k.node_id
       AND NOT (k.owner IS NULL AND k.signed AND k.nonce IS NOT NULL);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = 'QT032';
    END IF;
END
$$;
