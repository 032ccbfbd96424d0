-- audit_registry: the audit row of a change an admin step made to the chain
-- registry (upsert_chain, upsert_chain_token, upsert_chain_protocol,
-- upsert_treasury_account, upsert_exchange_venue, upsert_venue_chain,
-- upsert_venue_deposit_address, allow_destination, disallow_destination):
-- entity 'chain' (the registry), p_entity_id the chain's (or the venue's) key,
-- action p_action, detail p_detail; no movement, no states, the session's
-- login as the actor. Internal; writes through write_audit.
CREATE OR REPLACE FUNCTION audit_registry(p_entity_id text, p_action text, p_detail jsonb) RETURNS void
LANGUAGE sql
AS $$
    SELECT write_audit(ARRAY[(NULL, 'chain', p_entity_id, NULL, p_action, NULL, NULL, p_detail)::qtg.audit_event]);
$$;
