-- record_balance_snapshots: a balance read -> recorded, its snapshots written
-- (one per account, the i-th of each array). A successful read gives the
-- balance (and, on a chain, the block it was read at); a failed one gives the
-- error and no balance: a chain down is a failed read, never a zero.
-- Refused, nothing written:
--   QT080  the read is unknown, recorded already, or another login's
--   QT002  arrays of different lengths or empty, a kind other than chain/venue,
--          a missing key, address or asset, neither or both of balance and
--          error, a block number on a venue or missing on a chain balance, a
--          negative block, an account twice
--   QT005  a balance that is NaN, Infinity, negative or above
--          balance_settings.max_balance; an error text beyond engine_limits
--   QT014  an account that is not a treasury account of a registered chain (with
--          its USDC) or a registered venue's FUND account
-- Locks: the read row.
CREATE OR REPLACE FUNCTION record_balance_snapshots(
    p_read_id       bigint,
    p_account_kinds text[],
    p_account_keys  text[],
    p_addresses     text[],
    p_assets        text[],
    p_balances      numeric[],
    p_block_numbers bigint[],
    p_errors        text[]
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock();
    v_read  balance_reads;
    v_max   numeric;
    v_n     integer := cardinality(p_account_kinds);
    v_bad   record;
    v_count integer;
BEGIN
    PERFORM check_read_committed('record_balance_snapshots');
    IF v_n IS NULL OR v_n = 0 OR v_n > 10000
       OR v_n IS DISTINCT FROM cardinality(p_account_keys) OR v_n IS DISTINCT FROM cardinality(p_addresses)
       OR v_n IS DISTINCT FROM cardinality(p_assets) OR v_n IS DISTINCT FROM cardinality(p_balances)
       OR v_n IS DISTINCT FROM cardinality(p_block_numbers) OR v_n IS DISTINCT FROM cardinality(p_errors) THEN
        RAISE EXCEPTION 'record_balance_snapshots: the seven arrays must have one element per account, 1 to 10000, of one length'
            USING ERRCODE = 'QT002', HINT = 'Pass NULL in balances or errors where there is none.';
    END IF;
    PERFORM check_limits('record_balance_snapshots', p_text => p_errors);
    SELECT s.max_balance INTO STRICT v_max FROM balance_settings s;
    FOR i IN 1 .. v_n LOOP
        PERFORM check_number('record_balance_snapshots', 'a balance', p_balances[i], 0, v_max);
    END LOOP;
    SELECT u.ord, u.kind, u.key, u.address, u.asset INTO v_bad
      FROM unnest(p_account_kinds, p_account_keys, p_addresses, p_assets, p_balances, p_block_numbers, p_errors)
           WITH ORDINALITY AS u(kind, key, address, asset, balance, block, error, ord)
     WHERE u.kind IS NULL OR u.kind NOT IN ('chain', 'venue')
        OR u.key IS NULL OR u.address IS NULL OR u.asset IS NULL
        OR (u.balance IS NULL) = (u.error IS NULL)
        OR (u.error IS NOT NULL AND btrim(u.error) = '')
        OR (u.kind = 'venue' AND u.block IS NOT NULL)
        OR (u.kind = 'chain' AND u.balance IS NOT NULL AND u.block IS NULL)
        OR u.block < 0
     ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'record_balance_snapshots: element % (% % % %) is not a read: a kind chain or venue, its key, address and asset, a balance or an error (not both), and a block number for a chain balance only',
                        v_bad.ord, coalesce(v_bad.kind, 'NULL'), coalesce(quote_literal(left(v_bad.key, 64)), 'NULL'),
                        coalesce(quote_literal(left(v_bad.address, 64)), 'NULL'), coalesce(quote_literal(left(v_bad.asset, 16)), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Report each account begin_balance_read handed out once.';
    END IF;
    SELECT u.kind, u.key, u.address, u.asset INTO v_bad
      FROM unnest(p_account_kinds, p_account_keys, p_addresses, p_assets) AS u(kind, key, address, asset)
     GROUP BY 1, 2, 3, 4 HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'record_balance_snapshots: the account % % % % is given twice', v_bad.kind,
                        left(v_bad.key, 64), left(v_bad.address, 64), left(v_bad.asset, 16)
            USING ERRCODE = 'QT002', HINT = 'Report each account once a read.';
    END IF;
    SELECT u.kind, u.key, u.address, u.asset INTO v_bad
      FROM unnest(p_account_kinds, p_account_keys, p_addresses, p_assets) AS u(kind, key, address, asset)
     WHERE NOT (u.kind = 'chain' AND u.asset = 'USDC' AND EXISTS (
                    SELECT 1 FROM treasury_accounts a
                      JOIN chain_tokens t ON t.chain_key = a.chain_key AND t.symbol = u.asset
                     WHERE a.chain_key = u.key AND a.address = u.address))
       AND NOT (u.kind = 'venue' AND u.address = 'FUND' AND u.asset = 'USDC'
                AND EXISTS (SELECT 1 FROM exchange_venues v WHERE v.venue_key = u.key))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'record_balance_snapshots: % % % % is not an account of this network', v_bad.kind,
                        quote_literal(left(v_bad.key, 64)), quote_literal(left(v_bad.address, 64)),
                        quote_literal(left(v_bad.asset, 16))
            USING ERRCODE = 'QT014', HINT = 'Report the accounts begin_balance_read handed out: treasury accounts (lower-case) and venues'' FUND, in USDC.';
    END IF;
    SELECT * INTO v_read FROM balance_reads r WHERE r.id = p_read_id FOR UPDATE;
    IF NOT FOUND OR v_read.recorded_at IS NOT NULL OR v_read.started_by <> session_user THEN
        RAISE EXCEPTION 'record_balance_snapshots: read % is unknown, recorded already, or another login''s',
                        coalesce(p_read_id::text, 'NULL')
            USING ERRCODE = 'QT080', HINT = 'Call begin_balance_read first, as this login, and record each read once.';
    END IF;

    INSERT INTO balance_snapshots (read_id, account_kind, account_key, address, asset, balance, block_number, error,
                                   read_started_at, recorded_at, recorded_by)
    SELECT p_read_id, u.kind, u.key, u.address, u.asset, u.balance, u.block, u.error, v_read.started_at, v_now, session_user
      FROM unnest(p_account_kinds, p_account_keys, p_addresses, p_assets, p_balances, p_block_numbers, p_errors)
           WITH ORDINALITY AS u(kind, key, address, asset, balance, block, error, ord)
     ORDER BY u.ord;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    UPDATE balance_reads SET recorded_at = v_now WHERE id = p_read_id;
    RETURN v_count;
END
$$;
