-- registry_address: p_address, an EVM address on the registered chain
-- p_chain_key, as an admin step records it (treasury accounts, allowed
-- destinations): the chain locked FOR UPDATE first (registered_chain: QT014
-- when the network has no such chain), then the address stored lower-case
-- (evm_address: QT002, named "p_call: address"). Internal.
CREATE OR REPLACE FUNCTION registry_address(p_call text, p_chain_key text, p_address text) RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM registered_chain(p_call, p_chain_key);
    RETURN evm_address(p_call || ': address', p_address);
END
$$;
