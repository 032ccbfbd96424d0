-- bridge_call_problem: why a signed call of a cctp_burn, cctp_mint or stargate
-- node may not be broadcast, or NULL when it may (intent_tx_problem asks it,
-- after the chain id, nonce and fee caps). The call must be the one its route
-- says, read from the bytes (an approve() on the token is none of these: the
-- allowance is the operator's setup step):
--   cctp_burn  TokenMessengerV2.depositForBurn(the route's amount, destination
--              domain, mint recipient as bytes32, the chain's USDC, no
--              destination caller, the route's maxFee and
--              minFinalityThreshold), byte for byte, on the route's
--              TokenMessengerV2, with no ether.
--   cctp_mint  MessageTransmitterV2.receiveMessage(message, attestation) on the
--              route's transmitter, with no ether, of a message from the
--              route's source domain to its destination domain whose burn
--              body burns the route's source USDC to its mint recipient for
--              its amount, at the nonce of the message its one cctp_burn
--              parent attested (its evidence's nonce): every mint a node
--              signs (a message re-attested after its expiry included) is of
--              that one message, which the transmitter receives once (the
--              attestation is the transmitter's to check).
--   stargate   StargatePool.send exactly as stargate_send_calldata encodes it
--              on the route's source pool, the ether sent being the messaging
--              fee it names, at most 1 ether (a sanity bound).
-- The answer is 'QTnnn message'. Reads only. Internal.
CREATE OR REPLACE FUNCTION bridge_call_problem(
    p_node_id   bigint,
    p_executor  text,
    p_chain_key text,
    p_to        text,
    p_value     numeric,
    p_data      bytea
) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_what    text := format('record_intent_prepared: node %s', p_node_id);
    v_route   jsonb;
    v_message bytea;
    v_nonce   text;
BEGIN
    BEGIN
        v_route := CASE p_executor
                       WHEN 'cctp_burn' THEN (SELECT to_jsonb(r) FROM cctp_burn_route(p_node_id) r)
                       WHEN 'cctp_mint' THEN (SELECT to_jsonb(r) FROM cctp_mint_route(p_node_id) r)
                       WHEN 'stargate' THEN (SELECT to_jsonb(r) FROM stargate_send_route(p_node_id) r)
                   END;
    EXCEPTION WHEN SQLSTATE 'QT002' OR SQLSTATE 'QT014' OR SQLSTATE 'QT032' THEN
        RETURN SQLSTATE || ' ' || SQLERRM;
    END;
    IF p_executor = 'cctp_burn' THEN
        IF p_to = v_route ->> 'token_messenger' AND p_value = 0 AND p_data =
               '\x8e0250ee'::bytea  -- depositForBurn(uint256,uint32,bytes32,address,bytes32,uint256,uint32)
               || ccip_word((v_route ->> 'amount_units')::numeric)
               || ccip_word((v_route ->> 'destination_domain')::numeric)
               || decode(lpad(substr(v_route ->> 'mint_recipient', 3), 64, '0'), 'hex')
               || decode(lpad(substr(v_route ->> 'token_address', 3), 64, '0'), 'hex')
               || ccip_word(0)
               || ccip_word((v_route ->> 'max_fee_units')::numeric)
               || ccip_word((v_route ->> 'min_finality_threshold')::numeric) THEN
            RETURN NULL;
        END IF;
        RETURN format('QT032 %s: a cctp_burn node signs depositForBurn on %s''s TokenMessengerV2 %s of %s base units '
                      'to %s on domain %s (its route''s maxFee and finality, no destination caller) and nothing else',
                      v_what, p_chain_key, v_route ->> 'token_messenger', v_route ->> 'amount_units',
                      v_route ->> 'mint_recipient', v_route ->> 'destination_domain');
    END IF;

    IF p_executor = 'cctp_mint' THEN
        IF p_to = v_route ->> 'message_transmitter' AND p_value = 0 THEN
            v_message := cctp_received_message(p_data);
        END IF;
        v_nonce := (cctp_burn_message(p_node_id)).nonce;
        IF v_nonce IS NULL OR v_nonce !~ '^0x[0-9a-f]{64}$' THEN
            RETURN format('QT032 %s: a cctp_mint node mints the message its one cctp_burn parent attested, and no '
                          'such parent shows a message nonce', v_what);
        END IF;
        IF length(v_message) >= 148 + 100
           AND substring(v_message FROM 13 FOR 32) = decode(substr(v_nonce, 3), 'hex')
           AND substring(v_message FROM 5 FOR 4) = substring(ccip_word((v_route ->> 'source_domain')::numeric) FROM 29)
           AND substring(v_message FROM 9 FOR 4) = substring(ccip_word((v_route ->> 'destination_domain')::numeric) FROM 29)
           AND substring(v_message FROM 149 + 4 FOR 32) = decode(lpad(substr(v_route ->> 'source_token', 3), 64, '0'), 'hex')
           AND substring(v_message FROM 149 + 36 FOR 32) = decode(lpad(substr(v_route ->> 'mint_recipient', 3), 64, '0'), 'hex')
           AND substring(v_message FROM 149 + 68 FOR 32) = ccip_word((v_route ->> 'amount_units')::numeric) THEN
            RETURN NULL;
        END IF;
        RETURN format('QT032 %s: a cctp_mint node signs receiveMessage on %s''s MessageTransmitterV2 %s of its burn''s '
                      'message (nonce %s) from domain %s of %s base units to %s, and nothing else',
                      v_what, p_chain_key, v_route ->> 'message_transmitter', v_nonce, v_route ->> 'source_domain',
                      v_route ->> 'amount_units', v_route ->> 'mint_recipient');
    END IF;

    IF p_executor = 'stargate' AND p_to = v_route ->> 'src_pool' AND p_value <= 1000000000000000000
       AND p_data = stargate_send_calldata(v_route, p_value) THEN
        RETURN NULL;
    END IF;
    RETURN format('QT032 %s: a stargate node signs send on %s''s pool %s of %s base units to %s on endpoint %s '
                  '(at least %s received, %s, the fee paid in ether, at most 1 ether) and nothing else',
                  v_what, p_chain_key, v_route ->> 'src_pool', v_route ->> 'amount_units', v_route ->> 'recipient',
                  v_route ->> 'dst_eid', v_route ->> 'min_amount_units', v_route ->> 'mode');
END
$$;
