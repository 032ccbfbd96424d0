-- registry_entry_value: the values an entry of the chain registry has now, as
-- a 'registry' proposal records them (config_value), or NULL when there is no
-- such entry. p_subject names the entry:
--   chain/KEY                  chains: chain_id, rpc_url_env, finality_depth,
--                              block_time_ms, max_fee_per_gas, max_priority_fee_per_gas
--   token/CHAIN/SYMBOL         chain_tokens: address, decimals
--   protocol/CHAIN/PROTOCOL    chain_protocols: remote_id, contracts
--   ccip_lane/SOURCE/DEST      ccip_lanes: version, onramp, offramp, token_data,
--                              fee_margin_bps, max_fee_wei
--   venue/KEY                  exchange_venues: kind, base_url_env, key_file_env
-- (each row's values but its key and its times). Locks the entry's row (FOR
-- UPDATE), as config_value does. QT002 a subject of none of these forms.
-- Internal: config_value, propose_registry_change.
CREATE OR REPLACE FUNCTION registry_entry_value(p_subject text) RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_part  text[] := string_to_array(p_subject, '/');
    v_value jsonb;
BEGIN
    CASE coalesce(v_part[1], '') || '/' || coalesce(cardinality(v_part), 0)
        WHEN 'chain/2' THEN
            SELECT to_jsonb(c) - 'chain_key' - 'created_at' - 'updated_at' INTO v_value
              FROM chains c WHERE c.chain_key = v_part[2] FOR UPDATE;
        WHEN 'token/3' THEN
            SELECT to_jsonb(t) - 'chain_key' - 'symbol' - 'updated_at' INTO v_value
              FROM chain_tokens t WHERE t.chain_key = v_part[2] AND t.symbol = v_part[3] FOR UPDATE;
        WHEN 'protocol/3' THEN
            SELECT to_jsonb(p) - 'chain_key' - 'protocol' - 'updated_at' INTO v_value
              FROM chain_protocols p WHERE p.chain_key = v_part[2] AND p.protocol = v_part[3] FOR UPDATE;
        WHEN 'ccip_lane/3' THEN
            SELECT to_jsonb(l) - 'source_chain_key' - 'dest_chain_key' - 'updated_at' INTO v_value
              FROM ccip_lanes l WHERE l.source_chain_key = v_part[2] AND l.dest_chain_key = v_part[3] FOR UPDATE;
        WHEN 'venue/2' THEN
            SELECT to_jsonb(v) - 'venue_key' - 'request_salt' - 'created_at' - 'updated_at' INTO v_value
              FROM exchange_venues v WHERE v.venue_key = v_part[2] FOR UPDATE;
        ELSE
            RAISE EXCEPTION 'registry entry %: not a registry subject', coalesce(left(p_subject, 200), 'NULL')
                USING ERRCODE = 'QT002',
                      HINT = 'Name chain/KEY, token/CHAIN/SYMBOL, protocol/CHAIN/PROTOCOL, ccip_lane/SOURCE/DEST or venue/KEY.';
    END CASE;
    RETURN v_value;
END
$$;
