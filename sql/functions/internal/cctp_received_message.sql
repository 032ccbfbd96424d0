-- cctp_received_message: the message that calldata of
-- MessageTransmitterV2.receiveMessage(bytes message, bytes attestation) (selector
-- 0x57ecfd28) hands the transmitter, read from its ABI encoding (at most
-- 64 KiB of it); NULL when p_data is not such a call. What it says is for the
-- caller to check (the route's domains, token, recipient and amount; the
-- burn's nonce; its expirationBlock).
-- Internal: bridge_call_problem, cctp_mint_expiry_problem.
CREATE OR REPLACE FUNCTION cctp_received_message(p_data bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_offset numeric;
BEGIN
    IF p_data IS NULL OR length(p_data) < 4 + 64 OR substring(p_data FROM 1 FOR 4) <> '\x57ecfd28'::bytea THEN
        RETURN NULL;
    END IF;
    v_offset := abi_uint(p_data, 4);
    IF v_offset > length(p_data) - 36 THEN
        RETURN NULL;
    END IF;
    RETURN substring(p_data FROM (5 + v_offset + 32)::integer
                     FOR least(abi_uint(p_data, (4 + v_offset)::integer), 65536)::integer);
END
$$;
