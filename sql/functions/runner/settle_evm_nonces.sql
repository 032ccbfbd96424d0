-- settle_evm_nonces: moves each treasury account's settled mark
-- (evm_nonce_marks, 0040_evm_nonce_marks) up over the nonces that are settled
-- for good, so that evm_nonce_gaps and evm_accounts read an account's nonces
-- from the mark up instead of every nonce it ever used. The evm_nonce_reaper
-- calls it before each gap search, and again while it is behind.
-- A nonce is settled for good when an intent holds it SUBMITTED and the
-- intent's node has finished, when a fill was recorded at it, or when it was
-- reported closed on the chain: none of these facts is ever undone, so a mark
-- read from committed rows stays true and needs no fence. Per account, from
-- its mark (or, the first time, its first intent's nonce) up, at most p_max
-- nonces below its next nonce are read in order; the mark stops at the first
-- one that is not settled (a gap the reaper must close, or a transaction still
-- out), so it never passes a nonce evm_nonce_gaps could list, now or later.
-- A mark only moves up: two calls at once keep the higher one.
-- QT002 for p_max outside 1 to 100,000. Locks: the mark rows it moves.
-- Returns one row per account with a nonce in use: its mark, how far this call
-- moved it, and behind (p_max was reached before an unsettled nonce or the
-- next nonce: the caller calls again).
CREATE OR REPLACE FUNCTION settle_evm_nonces(p_max integer DEFAULT 10000)
RETURNS TABLE (chain_key text, address text, settled_below bigint, moved bigint, behind boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := clock();
    v_account record;
    v_from    bigint;
    v_upto    bigint;
    v_open    bigint;
    v_mark    bigint;
BEGIN
    PERFORM check_read_committed('settle_evm_nonces');
    PERFORM check_args('settle_evm_nonces', p_max => p_max, p_max_limit => 100000);
    FOR v_account IN
        SELECT e.chain_key, e.address, e.next_nonce, m.settled_below
          FROM evm_nonces e
          LEFT JOIN evm_nonce_marks m ON m.chain_key = e.chain_key AND m.address = e.address
         ORDER BY e.chain_key, e.address
    LOOP
        v_from := coalesce(v_account.settled_below,
                           (SELECT min(i.nonce) FROM node_intents i
                             WHERE i.chain_key = v_account.chain_key AND i.sender = v_account.address));
        CONTINUE WHEN v_from IS NULL;   -- no nonce used yet
        v_upto := least(v_account.next_nonce, v_from + p_max);

        -- the first nonce from the mark that is not settled: each probed by its
        -- key, in order, stopping there
        SELECT g.nonce INTO v_open
          FROM generate_series(v_from, v_upto - 1) AS g(nonce)
         WHERE NOT EXISTS (SELECT 1 FROM node_intents i
                             JOIN movement_request_nodes n ON n.id = i.node_id
                            WHERE i.chain_key = v_account.chain_key AND i.sender = v_account.address
                              AND i.nonce = g.nonce AND i.intent_state = 'SUBMITTED'
                              AND n.finished_at IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM evm_transactions x
                            WHERE x.chain_key = v_account.chain_key AND x.sender = v_account.address
                              AND x.nonce = g.nonce AND x.purpose = 'fill')
           AND NOT EXISTS (SELECT 1 FROM evm_closed_nonces c
                            WHERE c.chain_key = v_account.chain_key AND c.address = v_account.address
                              AND c.nonce = g.nonce)
         ORDER BY g.nonce
         LIMIT 1;
        v_mark := coalesce(v_open, v_upto);

        IF v_account.settled_below IS NULL OR v_mark > v_account.settled_below THEN
            INSERT INTO evm_nonce_marks AS m (chain_key, address, settled_below, moved_at)
            VALUES (v_account.chain_key, v_account.address, v_mark, v_now)
            ON CONFLICT ON CONSTRAINT evm_nonce_marks_pkey DO UPDATE
               SET settled_below = greatest(m.settled_below, EXCLUDED.settled_below),
                   moved_at      = CASE WHEN EXCLUDED.settled_below > m.settled_below THEN EXCLUDED.moved_at
                                        ELSE m.moved_at END
            RETURNING m.settled_below INTO v_mark;
        END IF;

        chain_key := v_account.chain_key;
        address := v_account.address;
        settled_below := v_mark;
        moved := v_mark - coalesce(v_account.settled_below, v_from);
        behind := v_open IS NULL AND v_upto < v_account.next_nonce;
        RETURN NEXT;
    END LOOP;
END
$$;
