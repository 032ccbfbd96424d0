-- evm_nonce_closed: whether a nonce of a treasury account is known closed on
-- its chain, as the evm_nonce_reaper reported it (record_nonce_closed): an
-- audit row of entity 'chain' with action nonce_closed (a fill mined),
-- nonce_consumed (taken by a transaction the engine never recorded) or
-- nonce_found_mined (a transaction of a failed or abandoned intent mined). The
-- audit row is the record; nothing else is stored. Internal.
CREATE OR REPLACE FUNCTION evm_nonce_closed(p_chain_key text, p_sender text, p_nonce bigint) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT 1 FROM audit_outbox a
         WHERE a.entity = 'chain' AND a.entity_id = p_chain_key
           AND a.action IN ('nonce_closed', 'nonce_consumed', 'nonce_found_mined')
           AND a.detail ->> 'sender' = p_sender
           AND a.detail ->> 'nonce' = p_nonce::text)
$$;
