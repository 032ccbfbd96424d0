-- depends: 0020_protocol_registry
--
-- The exchange venues of a network, beside the chain registry: what the
-- exchange executors (bybit_withdraw, bybit_deposit) and the
-- capital_transfer_followup sidecar need to know of an exchange. The admin
-- maintains them (sql/functions/admin/: upsert_exchange_venue,
-- upsert_venue_chain, upsert_venue_deposit_address, each audited as entity
-- 'chain'); the reader role SELECTs them like every table.
--
-- exchange_venues          venue_key     the engine's name for the venue (bybit, ...)
--                          kind          the API it speaks (bybit: Bybit v5)
--                          base_url_env  the NAME of the environment variable holding
--                                        its base URL in the runner's environment
--                          key_file_env  the NAME of the environment variable holding
--                                        the path of its API key file: neither a URL
--                                        nor a key ever enters a table
--                          request_salt  random, made when the venue is registered in
--                                        this database: mixed into the withdrawal
--                                        requestIds, so that two databases (another
--                                        deployment, a rebuilt one) sharing an exchange
--                                        account never send the same requestId for
--                                        different withdrawals (node ids repeat)
-- venue_chains             the venue's name for each of our chains (local-a -> the
--                          exchange's "chain" parameter), one name per chain
-- venue_deposit_addresses  the venue's deposit address per chain and coin; registering
--                          one also allow-lists it on its chain (allow_destination), so a
--                          transfer into the exchange passes evm_transfer_route
--
-- capital_transfer_followups: a transfer that completed into a venue's deposit
-- address, followed until the venue credits it (the capital_transfer_followup
-- sidecar): WAITING, then CREDITED (the amount the movement sent), MISMATCH
-- (credited, another amount) or FAILED (the venue's record says failed).
-- deadline_at: when a deposit still WAITING becomes a problem
-- (capital_transfer_mismatches).
--
-- Addresses are stored lower-case (0x + 40 hex digits).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE exchange_venues (
    venue_key    text PRIMARY KEY CHECK (venue_key ~ '^[a-z][a-z0-9-]{0,62}$'),
    kind         text NOT NULL CHECK (kind IN ('bybit')),
    base_url_env text NOT NULL CHECK (base_url_env ~ '^[A-Z][A-Z0-9_]{0,127}$'),
    key_file_env text NOT NULL CHECK (key_file_env ~ '^[A-Z][A-Z0-9_]{0,127}$'),
    request_salt text NOT NULL DEFAULT md5(gen_random_uuid()::text),
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

CREATE TABLE venue_chains (
    venue_key   text NOT NULL REFERENCES exchange_venues,
    chain_key   text NOT NULL REFERENCES chains,
    venue_chain text NOT NULL CHECK (venue_chain ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (venue_key, chain_key),
    UNIQUE (venue_key, venue_chain)
);

CREATE TABLE venue_deposit_addresses (
    venue_key  text NOT NULL,
    chain_key  text NOT NULL,
    coin       text NOT NULL CHECK (coin ~ '^[A-Za-z0-9.]{1,16}$'),
    address    text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (venue_key, chain_key, coin),
    FOREIGN KEY (venue_key, chain_key) REFERENCES venue_chains
);
CREATE INDEX venue_deposit_addresses_address_idx ON venue_deposit_addresses (chain_key, address);

CREATE TABLE capital_transfer_followups (
    node_id         bigint PRIMARY KEY REFERENCES movement_request_nodes ON DELETE CASCADE,
    request_id      bigint NOT NULL,
    venue_key       text NOT NULL,
    chain_key       text NOT NULL,
    coin            text NOT NULL,
    deposit_address text NOT NULL,
    tx_hash         text NOT NULL,
    expected_amount numeric NOT NULL,
    followup_state  text NOT NULL CHECK (followup_state IN ('WAITING', 'CREDITED', 'MISMATCH', 'FAILED')),
    credited_amount numeric,
    record          jsonb,
    landed_at       timestamptz NOT NULL,
    deadline_at     timestamptz NOT NULL,
    next_check_at   timestamptz NOT NULL,
    checks          integer NOT NULL DEFAULT 0,
    last_error      text,
    resolved_at     timestamptz,
    CHECK ((followup_state = 'WAITING') = (resolved_at IS NULL))
);
CREATE INDEX capital_transfer_followups_due_idx ON capital_transfer_followups (next_check_at)
    WHERE followup_state = 'WAITING';

-- the followup's discovery: completed transfers by chain and recipient
CREATE INDEX movement_request_nodes_transfer_to_idx
    ON movement_request_nodes ((node_config ->> 'chain'), lower(node_config ->> 'to'))
    WHERE executor_key = 'evm_transfer' AND node_state = 'COMPLETED';
$ddl$);
