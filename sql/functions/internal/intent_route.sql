-- intent_route: what a node's prepared payload must say, derived from the
-- approved route as the registry says now (its executor's route procedure),
-- in the payload's own names: the executor, the route document (every key
-- the payload must carry, with its value) and the names of the other keys
-- the payload may carry (what the executor measured at prepare: gas, fees,
-- the destination's first block to search, the burn's message nonce...).
--
--   executor        route document                               may also carry
--   evm_transfer    chain leg, token, token_address, recipient,  gas, fees
--                   amount_units
--   cctp_burn       chain leg, the burn's contracts, domains,    gas, fees
--                   mint_recipient, amount_units, max_fee_units,
--                   min_finality_threshold
--   cctp_mint       chain leg, both domains' contracts, the      the message's nonce, fee_executed,
--                   expected mint_recipient and amount           expiration_block, reattested, source
--                                                                tx, search_from_block, gas, fees
--   ccip            chain leg, Router, OnRamp, the destination's gas, fees, ccip_fee (the quote),
--                   chain, OffRamp and token, recipient, amount, dest_from_block
--                   the lane's version, gas limit and fee rule
--   stargate        chain leg, pools and endpoint ids, the       gas, fees, native_fee, calldata, the
--                   source's TokenMessaging, token, recipient,   quote, dst_from_block
--                   amount, least to receive, mode
--   bybit_withdraw  the venue (the NAMES of its URL's and key    nothing
--                   file's variables), its chain, coin, token,
--                   recipient, amount, and request_id (the
--                   venue's salt and the intent's key, hashed)
--   bybit_deposit   the venue, its chain, coin, deposit address, the paying parent, its tx and value,
--                   amount                                       since_ms
-- The chain leg: chain_key, chain_id, rpc_url_env (a NAME), finality_depth,
-- block_time_s, sender, signer_id; its fee caps (max_fee_cap,
-- priority_fee_cap) are carried freely, the signed bytes being held to the
-- chain's caps when recorded (intent_tx_problem). "fees" is max_fee_per_gas
-- and max_priority_fee_per_gas.
-- sim moves no money (its world is a table of the engine's), and an executor
-- the admin registered beyond the shipped ones has no route here: route NULL.
-- Raises what the route procedure raises (QT002, QT011, QT014, QT032).
-- Reads only. Internal: intent_payload_problem.
CREATE OR REPLACE FUNCTION intent_route(
    p_node_id    bigint,
    p_intent_key text,
    OUT executor_key text,
    OUT route        jsonb,
    OUT extras       text[]
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    c_fees CONSTANT text[] := '{gas,max_fee_per_gas,max_priority_fee_per_gas,max_fee_cap,priority_fee_cap}';
    -- the words of a CCTP message both of its legs carry: the burn signs them, the mint checks them
    c_cctp CONSTANT text[] := '{token_address,source_domain,destination_domain,token_messenger,message_transmitter,'
                              'mint_recipient,amount_units,max_fee_units}';
    v_row  jsonb;
BEGIN
    SELECT n.executor_key INTO executor_key FROM movement_request_nodes n WHERE n.id = p_node_id;
    CASE executor_key
        WHEN 'evm_transfer' THEN
            SELECT to_jsonb(r) INTO v_row FROM evm_transfer_route(p_node_id) r;
            route := jsonb_pick(v_row, '{token,token_address,recipient,amount_units}');
            extras := c_fees;
        WHEN 'cctp_burn' THEN
            SELECT to_jsonb(r) INTO v_row FROM cctp_burn_route(p_node_id) r;
            route := jsonb_pick(v_row, c_cctp || '{destination_chain,destination_token_messenger,'
                                                 'min_finality_threshold}'::text[]);
            extras := c_fees;
        WHEN 'cctp_mint' THEN
            SELECT to_jsonb(r) INTO v_row FROM cctp_mint_route(p_node_id) r;
            route := jsonb_pick(v_row, c_cctp || '{source_chain,source_token_messenger,source_token}'::text[]);
            extras := c_fees || '{message_nonce,fee_executed,expiration_block,reattested,source_tx_hash,'
                                'search_from_block}'::text[];
        WHEN 'ccip' THEN
            SELECT to_jsonb(r) INTO v_row FROM ccip_send_route(p_node_id) r;
            route := jsonb_pick(v_row, '{token_address,source_selector,router,onramp,dest_chain_key,dest_chain_id,'
                                       'dest_rpc_url_env,dest_finality_depth,dest_selector,dest_offramp,'
                                       'dest_token_address,recipient,amount_units,ccip_version,gas_limit,'
                                       'fee_margin_bps,max_fee_wei}')
                     || jsonb_build_object('dest_block_time_s', (v_row ->> 'dest_block_time_ms')::numeric / 1000);
            extras := c_fees || '{ccip_fee,dest_from_block}'::text[];
        WHEN 'stargate' THEN
            SELECT to_jsonb(r) INTO v_row FROM stargate_send_route(p_node_id) r;
            route := jsonb_pick(v_row, '{token,token_address,recipient,amount_units,mode,src_eid,min_amount_units,'
                                       'dst_chain_key,dst_rpc_url_env,dst_finality_depth,dst_eid,dst_pool}')
                     || jsonb_build_object('protocol', 'stargate', 'pool', v_row -> 'src_pool',
                                           'token_messaging', v_row -> 'src_token_messaging',
                                           'dst_block_time_s', (v_row ->> 'dst_block_time_ms')::numeric / 1000);
            extras := c_fees || '{native_fee,calldata,quoted_received_units,dst_from_block}'::text[];
        WHEN 'bybit_withdraw' THEN
            SELECT to_jsonb(r) INTO v_row FROM bybit_withdraw_route(p_node_id) r;
            route := jsonb_pick(v_row, '{venue_key,kind,base_url_env,key_file_env,chain_key,venue_chain,rpc_url_env,'
                                       'finality_depth,coin,token_address,recipient,amount,amount_units}')
                     || jsonb_build_object('request_id',
                            left(encode(sha256(convert_to((v_row ->> 'request_salt') || ':' || p_intent_key, 'UTF8')),
                                        'hex'), 32));
            extras := '{}';
            RETURN;
        WHEN 'bybit_deposit' THEN
            SELECT to_jsonb(r) INTO v_row FROM bybit_deposit_route(p_node_id) r;
            route := jsonb_pick(v_row, '{venue_key,kind,base_url_env,key_file_env,chain_key,venue_chain,coin,'
                                       'deposit_address,amount}');
            extras := '{tx_hash,parent,transfer_value,since_ms}';
            RETURN;
        ELSE
            RETURN;  -- sim, or an executor without a route
    END CASE;
    -- the chain leg every EVM executor signs on
    route := route || jsonb_pick(v_row, '{chain_key,chain_id,rpc_url_env,finality_depth,sender,signer_id}')
                   || jsonb_build_object('block_time_s', (v_row ->> 'block_time_ms')::numeric / 1000);
END
$$;
