-- rehearsal_registry_tables: the network's configuration tables, the ones a
-- rehearsal carries from the database a movement is in into the throwaway
-- database that replays it, in foreign-key order (each after the tables it
-- references). What the executors' route functions read (chains, tokens,
-- treasury accounts, allowed destinations, the bridge protocols' contracts,
-- CCIP lanes, exchange venues, their names for chains and their deposit
-- addresses), what the movement checks and the claims read (executors and
-- their config schemas, lane pacing, templates, value limits, the engine's
-- limits) and the balance checks' settings. The one list:
-- rehearsal_input reads these tables, load_rehearsal_registry writes them
-- (and deletes in the reverse order). Every other table of a network is
-- state, not configuration (movements, nodes, intents, nonces, audit,
-- heartbeats, proposals, breakers, balances), or callbacks and their
-- targets (a rehearsal sends none; a target names where its secret is):
-- tests/procedures/test_rehearsals.py lists those, so that a new table is
-- put in one list or the other. Internal; reads nothing.
CREATE OR REPLACE FUNCTION rehearsal_registry_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY['chains', 'chain_tokens', 'treasury_accounts', 'allowed_destinations', 'chain_protocols',
                 'ccip_lanes', 'exchange_venues', 'venue_chains', 'venue_deposit_addresses', 'executors',
                 'lane_baselines', 'movement_templates', 'value_limits', 'engine_limits', 'balance_settings'];
$$;
