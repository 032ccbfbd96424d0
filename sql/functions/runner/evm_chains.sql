-- evm_chains: the network's registered EVM chains as a runner needs them
-- (an executor's health check visits each): key, chain id, the NAME of the
-- environment variable holding the RPC URL, finality depth, block time.
-- Reads only.
CREATE OR REPLACE FUNCTION evm_chains()
RETURNS TABLE (chain_key text, chain_id bigint, rpc_url_env text, finality_depth integer, block_time_ms integer)
LANGUAGE sql STABLE
AS $$
    SELECT c.chain_key, c.chain_id, c.rpc_url_env, c.finality_depth, c.block_time_ms FROM chains c ORDER BY c.chain_key
$$;
