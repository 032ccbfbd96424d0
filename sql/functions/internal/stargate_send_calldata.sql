-- stargate_send_calldata: the one call a stargate node may sign, in the
-- canonical ABI encoding the executor signs (qtg_runner.executors.stargate):
-- StargatePool.send(SendParam{dstEid, to: the recipient as bytes32, amountLD,
-- minAmountLD, extraOptions: empty, composeMsg: empty, oftCmd: empty (taxi) or
-- one zero byte (bus)}, MessagingFee{nativeFee: p_native_fee, lzTokenFee: 0},
-- refundAddress: the sender), from stargate_send_route's row (p_route, as
-- to_jsonb). Internal: intent_payload_problem (the payload's calldata) and
-- bridge_call_problem (the signed bytes).
CREATE OR REPLACE FUNCTION stargate_send_calldata(p_route jsonb, p_native_fee numeric) RETURNS bytea
LANGUAGE sql IMMUTABLE
AS $$
    SELECT '\xc7c7f5b3'::bytea  -- send((uint32,bytes32,uint256,uint256,bytes,bytes,bytes),(uint256,uint256),address)
           || ccip_word(128) || ccip_word(p_native_fee) || ccip_word(0)
           || decode(lpad(substr(p_route ->> 'sender', 3), 64, '0'), 'hex')
           || ccip_word((p_route ->> 'dst_eid')::numeric)
           || decode(lpad(substr(p_route ->> 'recipient', 3), 64, '0'), 'hex')
           || ccip_word((p_route ->> 'amount_units')::numeric) || ccip_word((p_route ->> 'min_amount_units')::numeric)
           || ccip_word(224) || ccip_word(256) || ccip_word(288) || ccip_word(0) || ccip_word(0)
           || CASE WHEN p_route ->> 'mode' = 'bus' THEN ccip_word(1) || ccip_word(0) ELSE ccip_word(0) END
$$;
