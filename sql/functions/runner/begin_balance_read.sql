-- begin_balance_read: (none) -> a balance read, handed to the balance_snapshot
-- sidecar. Takes the database clock BEFORE the runner reads anything
-- (read_started_at: verify_drift counts a node certainly landed only if it
-- finished before this) and returns what to read: every treasury account on
-- every registered chain that has a USDC token (the chain's RPC URL as the
-- NAME of its variable, the token's address and decimals) and every exchange
-- venue's FUND account (the NAMES of its URL's and key file's variables).
-- The runner reports what it read, or why it could not, through
-- record_balance_snapshots with the read's id, as the same login.
CREATE OR REPLACE FUNCTION begin_balance_read()
RETURNS TABLE (
    read_id         bigint,
    read_started_at timestamptz,
    account_kind    text,
    account_key     text,
    address         text,
    asset           text,
    rpc_url_env     text,
    token_address   text,
    decimals        smallint,
    venue_kind      text,
    base_url_env    text,
    key_file_env    text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock();
    v_id  bigint;
BEGIN
    PERFORM check_read_committed('begin_balance_read');
    INSERT INTO balance_reads (started_at, started_by) VALUES (v_now, session_user) RETURNING id INTO v_id;
    RETURN QUERY
        SELECT v_id, v_now, 'chain'::text, a.chain_key, a.address, t.symbol, c.rpc_url_env, t.address, t.decimals,
               NULL::text, NULL::text, NULL::text
          FROM treasury_accounts a
          JOIN chains c ON c.chain_key = a.chain_key
          JOIN chain_tokens t ON t.chain_key = a.chain_key AND t.symbol = 'USDC'
        UNION ALL
        SELECT v_id, v_now, 'venue'::text, v.venue_key, 'FUND'::text, 'USDC'::text, NULL::text, NULL::text,
               NULL::smallint, v.kind, v.base_url_env, v.key_file_env
          FROM exchange_venues v
         ORDER BY 3, 4, 5;
END
$$;
