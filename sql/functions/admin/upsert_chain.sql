-- upsert_chain: registers an EVM chain on this network, or updates one. The
-- RPC URL itself never enters the database: p_rpc_url_env is the NAME of the
-- environment variable that holds it where runners run (upper-case letters,
-- digits and _). The chain id of a registered chain cannot change (a different
-- chain is a different key). An admin step (`qtg chains up` records the local
-- chains through it): the folder admin/ leaves it SECURITY INVOKER with no grant.
-- The fee caps (wei per gas) bound every transaction an executor signs on the
-- chain; NULL keeps what is registered (the defaults for a new chain).
-- Audited as entity 'chain' when something changed.
CREATE OR REPLACE FUNCTION upsert_chain(
    p_chain_key      text,
    p_chain_id       bigint,
    p_rpc_url_env    text,
    p_finality_depth integer,
    p_block_time_ms  integer,
    p_max_fee_per_gas          numeric DEFAULT NULL,
    p_max_priority_fee_per_gas numeric DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_previous chains;
    v_max_fee  numeric;
    v_tip      numeric;
BEGIN
    PERFORM check_registry_name('upsert_chain: chain key must be lower-case letters, digits and -', p_chain_key,
                                '^[a-z][a-z0-9-]{0,62}$', 'Use a key like base, arbitrum or local-a.');
    IF p_chain_id IS NULL OR p_chain_id <= 0 THEN
        RAISE EXCEPTION 'upsert_chain: chain id of % must be positive, got %', p_chain_key, coalesce(p_chain_id::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give the chain''s EIP-155 chain id (eth_chainId).';
    END IF;
    IF p_rpc_url_env IS NULL OR p_rpc_url_env !~ '^[A-Z][A-Z0-9_]{0,127}$' THEN
        -- the value is not echoed: it may be the URL (and its API key) itself
        RAISE EXCEPTION 'upsert_chain: the RPC URL of % must be named by an environment variable (upper-case letters, digits and _)', p_chain_key
            USING ERRCODE = 'QT002',
                  HINT = 'Give the variable''s name, e.g. QTG_RPC_BASE, and set the URL in the runners'' environment.';
    END IF;
    IF p_finality_depth IS NULL OR p_finality_depth NOT BETWEEN 0 AND 10000 THEN
        RAISE EXCEPTION 'upsert_chain: finality depth of % must be 0 to 10000 blocks, got %', p_chain_key, coalesce(p_finality_depth::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give the confirmations after which a receipt is final.';
    END IF;
    IF p_block_time_ms IS NULL OR p_block_time_ms NOT BETWEEN 1 AND 3600000 THEN
        RAISE EXCEPTION 'upsert_chain: block time of % must be 1 ms to 1 hour, got %', p_chain_key, coalesce(p_block_time_ms::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give the chain''s block time in milliseconds.';
    END IF;

    PERFORM check_number('upsert_chain', 'max_fee_per_gas (wei)', p_max_fee_per_gas, 1, 1e16);
    PERFORM check_number('upsert_chain', 'max_priority_fee_per_gas (wei)', p_max_priority_fee_per_gas, 1, 1e16);
    IF p_max_fee_per_gas <> trunc(p_max_fee_per_gas) OR p_max_priority_fee_per_gas <> trunc(p_max_priority_fee_per_gas) THEN
        RAISE EXCEPTION 'upsert_chain: fee caps of % are whole numbers of wei', p_chain_key
            USING ERRCODE = 'QT002', HINT = 'Give the caps in wei per gas, e.g. 200000000000 for 200 gwei.';
    END IF;

    SELECT * INTO v_previous FROM chains WHERE chain_key = p_chain_key FOR UPDATE;
    v_max_fee := coalesce(p_max_fee_per_gas, v_previous.max_fee_per_gas, 200000000000);
    v_tip := coalesce(p_max_priority_fee_per_gas, v_previous.max_priority_fee_per_gas, 5000000000);
    IF v_tip > v_max_fee THEN
        RAISE EXCEPTION 'upsert_chain: the tip cap of % (% wei) is above its fee cap (% wei)', p_chain_key, v_tip, v_max_fee
            USING ERRCODE = 'QT002', HINT = 'max_priority_fee_per_gas is part of max_fee_per_gas: give a tip cap at most the fee cap.';
    END IF;
    IF v_previous.chain_key IS NOT NULL AND v_previous.chain_id <> p_chain_id THEN
        RAISE EXCEPTION 'upsert_chain: % is registered with chain id %, not %', p_chain_key, v_previous.chain_id, p_chain_id
            USING ERRCODE = 'QT002', HINT = 'A different chain is registered under a new key.';
    END IF;
    IF EXISTS (SELECT 1 FROM chains WHERE chain_id = p_chain_id AND chain_key <> p_chain_key) THEN
        RAISE EXCEPTION 'upsert_chain: chain id % is registered under another key', p_chain_id
            USING ERRCODE = 'QT002', HINT = 'Update that chain under its own key.';
    END IF;
    IF v_previous.chain_key IS NOT NULL
       AND (v_previous.rpc_url_env, v_previous.finality_depth, v_previous.block_time_ms,
            v_previous.max_fee_per_gas, v_previous.max_priority_fee_per_gas)
         = (p_rpc_url_env, p_finality_depth, p_block_time_ms, v_max_fee, v_tip) THEN
        RETURN;
    END IF;

    INSERT INTO chains (chain_key, chain_id, rpc_url_env, finality_depth, block_time_ms, max_fee_per_gas,
                        max_priority_fee_per_gas, created_at, updated_at)
    VALUES (p_chain_key, p_chain_id, p_rpc_url_env, p_finality_depth, p_block_time_ms, v_max_fee, v_tip, v_now, v_now)
    ON CONFLICT (chain_key) DO UPDATE
       SET rpc_url_env              = excluded.rpc_url_env,
           finality_depth           = excluded.finality_depth,
           block_time_ms            = excluded.block_time_ms,
           max_fee_per_gas          = excluded.max_fee_per_gas,
           max_priority_fee_per_gas = excluded.max_priority_fee_per_gas,
           updated_at               = excluded.updated_at;
    PERFORM audit_registry(p_chain_key,
                           CASE WHEN v_previous.chain_key IS NULL THEN 'chain_registered' ELSE 'chain_updated' END,
                           jsonb_build_object('chain_id', p_chain_id, 'rpc_url_env', p_rpc_url_env,
                                              'finality_depth', p_finality_depth, 'block_time_ms', p_block_time_ms,
                                              'max_fee_per_gas', v_max_fee, 'max_priority_fee_per_gas', v_tip));
END
$$;
