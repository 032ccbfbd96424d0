-- intent_payload_problem: why the payload (and external request id) recorded
-- on a node's intent is not what its approved route says, or NULL when it is.
-- The payload is what observation and recovery read to find the side effect
-- again, and what recovery repeats (a venue's request, a re-signed send): it
-- must name exactly the recipient, amount, asset, venue, chain, contracts and
-- the NAMES of the variables locating URLs and secrets that the route
-- procedure of the node's executor derives from the approved movement now
-- (intent_route), and nothing else but what the executor measured at prepare:
--   QT032 a route key missing or different (each named, with the route's
--         value and the payload's), a key the executor does not record, a
--         bybit_withdraw external request id other than the one derived from
--         the venue's salt and the intent's key, a stargate calldata other
--         than the route's send, a cctp_mint fee outside 0..the route's
--         maxFee or a message nonce other than its cctp_burn parent's
--         evidence shows, a bybit_deposit's paying parent or its transfer other than
--         a parent's evidence shows (for an evm_transfer or cctp_mint parent, a
--         transaction its intent signed), or a transfer another deposit step's
--         prepared or submitted intent names, or (when it is recorded,
--         p_recording) a since_ms, from when the venue's records are read,
--         more than a day off bybit_deposit_route's; or what the route procedure refuses
--         now (QT014, QT032, QT002 are passed on as they are)
--   QT002 a payload that is not a JSON object, one missing on an exchange's
--         executor (an EVM node's signed bytes are checked by
--         intent_tx_problem, with or without a payload), or a measured value
--         that is an object or an array
-- sim moves no money; an executor the admin registered beyond the ones this
-- build ships has no route the engine knows (the admin registers executors,
-- never a runner, and a runner carries only registered ones): their payloads
-- are their own. The answer is 'QTnnn message'.
-- Reads only. Internal: record_intent_prepared_batch asks it for every record
-- (p_recording);
-- intent_document for every intent it hands to an observer or recovery, so
-- that a payload that no longer matches the registry is never acted on.
CREATE OR REPLACE FUNCTION intent_payload_problem(
    p_node_id             bigint,
    p_intent_key          text,
    p_payload             jsonb,
    p_external_request_id text,
    p_recording           boolean DEFAULT false
) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_what  text := format('record_intent_prepared: node %s', p_node_id);
    v_r     record;
    v_wrong text;
BEGIN
    BEGIN
        SELECT * INTO v_r FROM intent_route(p_node_id, p_intent_key);
    EXCEPTION WHEN SQLSTATE 'QT002' OR SQLSTATE 'QT011' OR SQLSTATE 'QT014' OR SQLSTATE 'QT032' THEN
        RETURN SQLSTATE || ' ' || SQLERRM;
    END;
    IF v_r.route IS NULL THEN
        RETURN NULL;  -- sim, or an executor this build ships no route for
    END IF;
    IF p_payload IS NULL AND v_r.executor_key NOT LIKE 'bybit%' THEN
        RETURN NULL;  -- an EVM record without a payload: its signed bytes are what is checked
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RETURN format('QT002 %s: a %s node records its route as a JSON object (its prepared payload)',
                      v_what, v_r.executor_key);
    END IF;

    SELECT string_agg(format('%s (the route says %s, the payload %s)', e.key, left(e.value #>> '{}', 70),
                             coalesce(left(p_payload -> e.key #>> '{}', 70), 'nothing')), '; ' ORDER BY e.key)
      INTO v_wrong
      FROM jsonb_each(v_r.route) e
     WHERE NOT json_same(e.value, p_payload -> e.key);
    IF v_wrong IS NOT NULL THEN
        RETURN format('QT032 %s: the payload is not the approved route: %s', v_what, v_wrong);
    END IF;
    SELECT string_agg(left(e.key, 70), ', ' ORDER BY e.key) INTO v_wrong
      FROM jsonb_each(p_payload) e
     WHERE NOT v_r.route ? e.key AND e.key <> ALL (v_r.extras);
    IF v_wrong IS NOT NULL THEN
        RETURN format('QT032 %s: a %s payload carries no %s', v_what, v_r.executor_key, v_wrong);
    END IF;
    SELECT string_agg(e.key, ', ' ORDER BY e.key) INTO v_wrong
      FROM jsonb_each(p_payload) e
     WHERE NOT v_r.route ? e.key AND jsonb_typeof(e.value) IN ('object', 'array');
    IF v_wrong IS NOT NULL THEN
        RETURN format('QT002 %s: %s in the payload is a plain value, not an object or array', v_what, v_wrong);
    END IF;

    IF v_r.executor_key = 'bybit_withdraw' AND p_external_request_id IS DISTINCT FROM v_r.route ->> 'request_id' THEN
        RETURN format('QT032 %s: a bybit_withdraw intent''s requestId is %s (its venue''s salt and the intent''s key), '
                      'not %s', v_what, v_r.route ->> 'request_id', coalesce(left(p_external_request_id, 70), 'none'));
    END IF;
    IF v_r.executor_key = 'stargate' AND (
           (p_payload ->> 'native_fee') !~ '^[0-9]{1,30}$'
           OR p_payload ->> 'calldata' IS DISTINCT FROM
              '0x' || encode(stargate_send_calldata((SELECT to_jsonb(r) FROM stargate_send_route(p_node_id) r),
                                                    (p_payload ->> 'native_fee')::numeric), 'hex')) THEN
        RETURN format('QT032 %s: a stargate payload''s calldata is its route''s send, paying its native_fee', v_what);
    END IF;
    IF v_r.executor_key = 'cctp_mint' AND NOT (
           coalesce(p_payload ->> 'fee_executed', '0') ~ '^[0-9]{1,78}$'
           AND coalesce(p_payload ->> 'fee_executed', '0')::numeric <= (v_r.route ->> 'max_fee_units')::numeric) THEN
        RETURN format('QT032 %s: a cctp_mint payload''s fee_executed is at most its route''s max_fee_units (%s)',
                      v_what, v_r.route ->> 'max_fee_units');
    END IF;
    IF v_r.executor_key = 'cctp_mint' AND (
           SELECT m.burn_node_id IS NULL OR m.nonce IS DISTINCT FROM lower(p_payload ->> 'message_nonce')
             FROM cctp_burn_message(p_node_id) m) THEN
        RETURN format('QT032 %s: a cctp_mint payload''s message_nonce is the nonce its cctp_burn parent''s evidence '
                      'shows, not %s', v_what, left(p_payload ->> 'message_nonce', 70));
    END IF;
    IF v_r.executor_key = 'bybit_deposit' AND NOT EXISTS (
           SELECT 1
             FROM movement_plan_edges edge
             JOIN movement_request_nodes parent ON parent.id = edge.parent_node_id
            WHERE edge.child_node_id = p_node_id
              AND parent.node_key = p_payload ->> 'parent'
              AND coalesce(parent.evidence ->> 'tx_hash', parent.external_ref) = p_payload ->> 'tx_hash'
              AND coalesce(parent.evidence -> 'transfer' ->> 'value', '') = p_payload ->> 'transfer_value'
              AND lower(coalesce(parent.evidence -> 'transfer' ->> 'to', parent.evidence ->> 'recipient'))
                  = v_r.route ->> 'deposit_address'
              -- a parent that signs its own transaction (a transfer, a mint) paid
              -- with one its intent signed, not any transaction its evidence names
              AND (parent.executor_key NOT IN ('evm_transfer', 'cctp_mint') OR EXISTS (
                     SELECT 1 FROM node_intents paid
                      WHERE paid.node_id = parent.id AND paid.intent_state IN ('PREPARED', 'SUBMITTED')
                        AND lower(p_payload ->> 'tx_hash') IN (SELECT lower(h) FROM unnest(paid.signed_tx_hashes) h)))) THEN
        RETURN format('QT032 %s: a bybit_deposit payload names a parent step of its node and the transfer to %s '
                      'that the parent''s evidence shows (a transfer or a mint: one its intent signed)', v_what,
                      v_r.route ->> 'deposit_address');
    END IF;
    -- the venue's records are read from since_ms for 29 days: a window that
    -- opens after the transfer was sent, or long before it, never shows it
    -- (checked as it is recorded: a payload an older runner recorded, a day
    -- before its prepare, keeps being read as it was)
    IF p_recording AND v_r.executor_key = 'bybit_deposit' AND NOT coalesce(
           (p_payload ->> 'since_ms') ~ '^[0-9]{1,15}$'
           AND (SELECT (p_payload ->> 'since_ms')::bigint BETWEEN r.since_ms - 86400000 AND r.since_ms + 86400000
                  FROM bybit_deposit_route(p_node_id) r), false) THEN
        RETURN format('QT032 %s: a bybit_deposit payload reads the venue''s records from since_ms %s; it is within '
                      'a day of %s (bybit_deposit_route: a day before a parent first signed or sent)', v_what,
                      coalesce(left(p_payload ->> 'since_ms', 40), 'nothing'),
                      coalesce((SELECT r.since_ms::text FROM bybit_deposit_route(p_node_id) r), 'no time yet'));
    END IF;
    -- one transfer credits one deposit step: the evidence of a parent is the
    -- runner's word, and naming another movement's credited transfer would
    -- release a second withdrawal on one deposit (node_intents_deposit_tx_key
    -- holds it under concurrent records)
    IF v_r.executor_key = 'bybit_deposit' AND EXISTS (
           SELECT 1
             FROM node_intents other
            WHERE other.prepared_payload ? 'deposit_address'
              AND other.intent_state IN ('PREPARED', 'SUBMITTED')
              AND lower(other.prepared_payload ->> 'chain_key') = lower(p_payload ->> 'chain_key')
              AND lower(other.prepared_payload ->> 'tx_hash') = lower(p_payload ->> 'tx_hash')
              AND other.node_id <> p_node_id) THEN
        RETURN format('QT032 %s: transfer %s on %s is the deposit another step waits for: one transfer credits '
                      'one deposit step', v_what, left(p_payload ->> 'tx_hash', 70), p_payload ->> 'chain_key');
    END IF;
    RETURN NULL;
END
$$;
