-- upsert_ccip_lane: records a CCIP lane from one registered chain to another
-- (ccip_lanes: its version, ramps, token pool data and fee rule), or changes
-- it. An admin step (`qtg chains up` records the local chains' lanes through
-- it): SECURITY INVOKER, no grant.
--   p_version         '1.5' or '1.6': the version of the lane's ramps, whose
--                     events the observer reads
--   p_token_data      'cctp' (USDC through Chainlink's USDC pool: a manual
--                     execution carries the burn's CCTP attestation) or 'none'
--   p_fee_margin_bps  0 to 10000: what a send pays over the Router's quote
--   p_max_fee_wei     1 wei to 100 ether: the most one send pays
--   p_onramp, p_offramp  the OnRamp on the source, the OffRamp on the
--                     destination; on a v1.6 lane NULL takes the chains'
--                     (chain_protocols: the source's CcipOnRamp, the
--                     destination's CcipOffRamp), a v1.5 lane names its own
-- QT014 a chain or its ccip row not registered; QT002 anything else
-- malformed (the same chain at both ends, a version the engine does not read,
-- a v1.5 lane without its ramps). Audited as entity 'chain' (the source) when
-- something changed; recording the same again changes nothing.
CREATE OR REPLACE FUNCTION upsert_ccip_lane(
    p_source_chain_key text,
    p_dest_chain_key   text,
    p_version          text,
    p_token_data       text DEFAULT 'none',
    p_fee_margin_bps   integer DEFAULT 1000,
    p_max_fee_wei      numeric DEFAULT 1000000000000000000,
    p_onramp           text DEFAULT NULL,
    p_offramp          text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_what     text := 'upsert_ccip_lane';
    v_source   chain_protocols;
    v_dest     chain_protocols;
    v_onramp   text;
    v_offramp  text;
    v_previous ccip_lanes;
BEGIN
    PERFORM registered_chain(v_what, p_source_chain_key);
    PERFORM registered_chain(v_what, p_dest_chain_key);
    IF p_source_chain_key = p_dest_chain_key THEN
        RAISE EXCEPTION '%: a lane goes from one chain to another, not from % to itself', v_what, p_source_chain_key
            USING ERRCODE = 'QT002', HINT = 'Name the source and the destination chain.';
    END IF;
    v_source := chain_protocol(p_source_chain_key, 'ccip');
    v_dest := chain_protocol(p_dest_chain_key, 'ccip');
    IF p_version IS NULL OR p_version NOT IN ('1.5', '1.6') THEN
        RAISE EXCEPTION '%: the CCIP version of a lane is 1.5 or 1.6, got %', v_what,
                        coalesce(quote_literal(left(p_version, 80)), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'The engine reads the events of CCIP v1.5 and v1.6 ramps; a lane on another version is not recorded.';
    END IF;
    IF p_token_data IS NULL OR p_token_data NOT IN ('none', 'cctp') THEN
        RAISE EXCEPTION '%: token_data is cctp or none, got %', v_what,
                        coalesce(quote_literal(left(p_token_data, 80)), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'cctp: USDC moved by Chainlink''s USDC pool over CCTP; none: any other pool.';
    END IF;
    IF p_fee_margin_bps IS NULL OR p_fee_margin_bps NOT BETWEEN 0 AND 10000 THEN
        RAISE EXCEPTION '%: the fee margin is 0 to 10000 basis points, got %', v_what,
                        coalesce(p_fee_margin_bps::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'A send pays the Router''s quote and this many basis points of it.';
    END IF;
    IF p_max_fee_wei IS NULL OR p_max_fee_wei = 'NaN' OR p_max_fee_wei <= 0
       OR p_max_fee_wei > 100000000000000000000 OR p_max_fee_wei <> trunc(p_max_fee_wei) THEN
        RAISE EXCEPTION '%: the most a send pays is a whole number of wei from 1 to 100 ether, got %', v_what,
                        coalesce(p_max_fee_wei::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Give the fee cap in wei of the source chain''s native coin.';
    END IF;
    v_onramp := coalesce(p_onramp, CASE WHEN p_version = '1.6' THEN v_source.contracts ->> 'CcipOnRamp' END);
    v_offramp := coalesce(p_offramp, CASE WHEN p_version = '1.6' THEN v_dest.contracts ->> 'CcipOffRamp' END);
    IF v_onramp IS NULL OR v_offramp IS NULL THEN
        RAISE EXCEPTION '%: the v% lane from % to % needs its OnRamp and OffRamp', v_what, p_version,
                        p_source_chain_key, p_dest_chain_key
            USING ERRCODE = 'QT002',
                  HINT = 'A v1.5 lane has ramps of its own: name them; a v1.6 lane takes the chains'' CcipOnRamp and CcipOffRamp.';
    END IF;
    v_onramp := evm_address(v_what || ': the OnRamp', v_onramp);
    v_offramp := evm_address(v_what || ': the OffRamp', v_offramp);

    SELECT * INTO v_previous FROM ccip_lanes
     WHERE source_chain_key = p_source_chain_key AND dest_chain_key = p_dest_chain_key FOR UPDATE;
    IF v_previous.source_chain_key IS NOT NULL
       AND (v_previous.version, v_previous.onramp, v_previous.offramp, v_previous.token_data,
            v_previous.fee_margin_bps, v_previous.max_fee_wei)
           = (p_version, v_onramp, v_offramp, p_token_data, p_fee_margin_bps, p_max_fee_wei) THEN
        RETURN;
    END IF;
    INSERT INTO ccip_lanes (source_chain_key, dest_chain_key, version, onramp, offramp, token_data, fee_margin_bps,
                            max_fee_wei, updated_at)
    VALUES (p_source_chain_key, p_dest_chain_key, p_version, v_onramp, v_offramp, p_token_data, p_fee_margin_bps,
            p_max_fee_wei, clock())
    ON CONFLICT (source_chain_key, dest_chain_key) DO UPDATE
       SET version = excluded.version, onramp = excluded.onramp, offramp = excluded.offramp,
           token_data = excluded.token_data, fee_margin_bps = excluded.fee_margin_bps,
           max_fee_wei = excluded.max_fee_wei, updated_at = excluded.updated_at;
    PERFORM write_audit(ARRAY[(NULL, 'chain', p_source_chain_key, NULL, 'ccip_lane_set', NULL, NULL,
                               jsonb_strip_nulls(jsonb_build_object(
                                   'dest_chain_key', p_dest_chain_key, 'version', p_version, 'onramp', v_onramp,
                                   'offramp', v_offramp, 'token_data', p_token_data,
                                   'fee_margin_bps', p_fee_margin_bps, 'max_fee_wei', p_max_fee_wei,
                                   'previous', CASE WHEN v_previous.source_chain_key IS NOT NULL THEN
                                       to_jsonb(v_previous) - 'source_chain_key' - 'dest_chain_key' - 'updated_at'
                                   END)))::qtg.audit_event]);
END
$$;
