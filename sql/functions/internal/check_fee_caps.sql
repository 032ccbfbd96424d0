-- check_fee_caps: raises QT002 when a signed transaction's fees (wei per gas,
-- as evm_decode_raw reads them) pass its chain's caps (chains.max_fee_per_gas,
-- chains.max_priority_fee_per_gas), naming the call and what is signed; a
-- refused call changes nothing. Internal.
CREATE OR REPLACE FUNCTION check_fee_caps(
    p_call     text,
    p_what     text,
    p_max_fee  numeric,
    p_tip      numeric,
    p_chain    chains
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_max_fee > p_chain.max_fee_per_gas OR p_tip > p_chain.max_priority_fee_per_gas THEN
        RAISE EXCEPTION '%: the %''s fees (% / % wei per gas) pass the chain''s caps (% / %)', p_call, p_what,
                        p_max_fee, p_tip, p_chain.max_fee_per_gas, p_chain.max_priority_fee_per_gas
            USING ERRCODE = 'QT002', HINT = 'Sign under the caps of the chains table.';
    END IF;
END
$$;
