-- upsert_chain_protocol: records a bridge protocol on a registered chain (its
-- id in the protocol and the protocol's contracts there), or changes it. An
-- admin step (`qtg chains up` records the local doubles through it): SECURITY
-- INVOKER, no grant.
--   p_protocol   cctp | ccip | stargate
--   p_remote_id  the chain's id in the protocol: the CCTP domain (uint32), the
--                CCIP chain selector (uint64), the LayerZero endpoint id (uint32)
--   p_contracts  {"ContractName": "0x...address", ...}: 1 to 16 names of
--                letters and digits, each an EVM address (stored lower-case)
-- QT014 the chain is not registered; QT002 anything else malformed, or the
-- remote id already names another chain in the protocol. Audited as entity
-- 'chain' when something changed; registering the same again changes nothing.
CREATE OR REPLACE FUNCTION upsert_chain_protocol(
    p_chain_key text,
    p_protocol  text,
    p_remote_id numeric,
    p_contracts jsonb
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous  chain_protocols;
    v_contracts jsonb := '{}';
    v_entry     record;
    v_max       numeric;
BEGIN
    PERFORM registered_chain('upsert_chain_protocol', p_chain_key);
    v_max := CASE p_protocol WHEN 'ccip' THEN 18446744073709551615 ELSE 4294967295 END;
    PERFORM check_registry_name('upsert_chain_protocol: protocol must be cctp, ccip or stargate', p_protocol,
                                '^(cctp|ccip|stargate)$', 'Name one of the protocols the executors speak.');
    IF p_remote_id IS NULL OR p_remote_id = 'NaN' OR p_remote_id < 0 OR p_remote_id > v_max
       OR p_remote_id <> trunc(p_remote_id) THEN
        RAISE EXCEPTION 'upsert_chain_protocol: the % id of % must be a whole number from 0 to %, got %',
                        p_protocol, p_chain_key, v_max, coalesce(p_remote_id::text, 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'Give the CCTP domain, the CCIP chain selector or the LayerZero endpoint id of the chain.';
    END IF;
    IF p_contracts IS NULL OR jsonb_typeof(p_contracts) <> 'object'
       OR (SELECT count(*) FROM jsonb_object_keys(p_contracts)) NOT BETWEEN 1 AND 16 THEN
        RAISE EXCEPTION 'upsert_chain_protocol: the contracts of % on % must be an object of 1 to 16 names', p_protocol, p_chain_key
            USING ERRCODE = 'QT002', HINT = 'Give {"ContractName": "0x...address", ...}.';
    END IF;
    FOR v_entry IN SELECT key, value FROM jsonb_each(p_contracts) ORDER BY key LOOP
        IF v_entry.key !~ '^[A-Za-z][A-Za-z0-9]{0,63}$' OR jsonb_typeof(v_entry.value) <> 'string' THEN
            RAISE EXCEPTION 'upsert_chain_protocol: contract % of % on % must be a name of letters and digits with an address',
                            quote_literal(left(v_entry.key, 80)), p_protocol, p_chain_key
                USING ERRCODE = 'QT002', HINT = 'Give {"ContractName": "0x...address", ...}.';
        END IF;
        v_contracts := v_contracts || jsonb_build_object(v_entry.key,
            evm_address(format('upsert_chain_protocol: %s %s on %s', p_protocol, v_entry.key, p_chain_key),
                        v_entry.value #>> '{}'));
    END LOOP;
    IF EXISTS (SELECT 1 FROM chain_protocols
                WHERE protocol = p_protocol AND remote_id = p_remote_id AND chain_key <> p_chain_key) THEN
        RAISE EXCEPTION 'upsert_chain_protocol: % id % already names another chain', p_protocol, p_remote_id
            USING ERRCODE = 'QT002', HINT = 'Each chain has its own id in a protocol: check the id, or change that chain first.';
    END IF;

    SELECT * INTO v_previous FROM chain_protocols WHERE chain_key = p_chain_key AND protocol = p_protocol FOR UPDATE;
    IF v_previous.chain_key IS NOT NULL AND (v_previous.remote_id, v_previous.contracts) = (p_remote_id, v_contracts) THEN
        RETURN;
    END IF;
    INSERT INTO chain_protocols (chain_key, protocol, remote_id, contracts, updated_at)
    VALUES (p_chain_key, p_protocol, p_remote_id, v_contracts, clock())
    ON CONFLICT (chain_key, protocol) DO UPDATE
       SET remote_id = excluded.remote_id, contracts = excluded.contracts, updated_at = excluded.updated_at;
    PERFORM audit_registry(p_chain_key, 'protocol_set',
                           jsonb_strip_nulls(jsonb_build_object(
                               'protocol', p_protocol, 'remote_id', p_remote_id, 'contracts', v_contracts,
                               'previous_remote_id', v_previous.remote_id, 'previous_contracts', v_previous.contracts)));
END
$$;
