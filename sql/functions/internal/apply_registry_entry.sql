-- apply_registry_entry: an approved 'registry' proposal applied, through the
-- upsert of its entry's kind (upsert_chain, upsert_chain_token,
-- upsert_chain_protocol, upsert_ccip_lane, upsert_exchange_venue), which
-- checks and audits it as it checks the admin's own call: a value it refuses
-- fails the approval, and nothing changes (a number its column cannot hold
-- as QT002). p_subject and p_value as
-- registry_entry_value gives them. Internal: approve_proposal.
CREATE OR REPLACE FUNCTION apply_registry_entry(p_subject text, p_value jsonb) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_part text[] := string_to_array(p_subject, '/');
BEGIN
    CASE v_part[1]
        WHEN 'chain' THEN
            PERFORM upsert_chain(v_part[2], (p_value ->> 'chain_id')::bigint, p_value ->> 'rpc_url_env',
                                 (p_value ->> 'finality_depth')::integer, (p_value ->> 'block_time_ms')::integer,
                                 (p_value ->> 'max_fee_per_gas')::numeric,
                                 (p_value ->> 'max_priority_fee_per_gas')::numeric);
        WHEN 'token' THEN
            PERFORM upsert_chain_token(v_part[2], v_part[3], p_value ->> 'address',
                                       (p_value ->> 'decimals')::integer);
        WHEN 'protocol' THEN
            PERFORM upsert_chain_protocol(v_part[2], v_part[3], (p_value ->> 'remote_id')::numeric,
                                          p_value -> 'contracts');
        WHEN 'ccip_lane' THEN
            PERFORM upsert_ccip_lane(v_part[2], v_part[3], p_value ->> 'version', p_value ->> 'token_data',
                                     (p_value ->> 'fee_margin_bps')::integer, (p_value ->> 'max_fee_wei')::numeric,
                                     p_value ->> 'onramp', p_value ->> 'offramp');
        WHEN 'venue' THEN
            PERFORM upsert_exchange_venue(v_part[2], p_value ->> 'kind', p_value ->> 'base_url_env',
                                          p_value ->> 'key_file_env');
    END CASE;
EXCEPTION WHEN data_exception THEN
    RAISE EXCEPTION 'registry entry %: a value does not fit its column: %', p_subject, SQLERRM
        USING ERRCODE = 'QT002', HINT = 'Reject the proposal and propose the entry''s values as its upsert takes them.';
END
$$;
