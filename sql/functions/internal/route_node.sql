-- route_node: the node a route function is asked about (evm_transfer_route,
-- stargate_send_route, ccip_send_route, cctp_burn_route, cctp_mint_route,
-- bybit_withdraw_route, bybit_deposit_route): its config and its movement's
-- amount. The caller names the node in its own words: QT011 p_missing (HINT
-- p_node_hint) when node p_node_id does not exist; QT002 p_unconfigured (HINT
-- p_config_hint) when its config lacks one of p_keys. Internal. Reads only;
-- takes no lock.
CREATE OR REPLACE FUNCTION route_node(
    p_node_id       bigint,
    p_keys          text[],
    p_missing       text,
    p_node_hint     text,
    p_unconfigured  text,
    p_config_hint   text
) RETURNS TABLE (node_config jsonb, amount numeric)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    SELECT n.node_config, r.amount INTO node_config, amount
      FROM movement_request_nodes n
      JOIN movement_requests r ON r.id = n.request_id
     WHERE n.id = p_node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%', p_missing USING ERRCODE = 'QT011', HINT = p_node_hint;
    END IF;
    IF NOT (node_config ?& p_keys) THEN
        RAISE EXCEPTION '%', p_unconfigured USING ERRCODE = 'QT002', HINT = p_config_hint;
    END IF;
    RETURN NEXT;
END
$$;
