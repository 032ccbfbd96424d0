-- signs_evm: whether a node of executor p_executor signs an EVM transaction:
-- evm_transfer, cctp_burn, cctp_mint, ccip and stargate, each exactly its
-- route's one call (intent_tx_problem holds the bytes to it). A node of any
-- other executor (sim, the exchange steps, one the admin registered) signs
-- none. Internal (inlined): intent_tx_problem, record_intent_prepared_batch,
-- evm_nonce_open.
CREATE OR REPLACE FUNCTION signs_evm(p_executor text) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_executor IN ('evm_transfer', 'cctp_burn', 'cctp_mint', 'ccip', 'stargate');
$$;
