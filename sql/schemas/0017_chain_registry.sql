-- depends: 0015_quarantine_and_claimers 0016_input_bounds
--
-- The chain registry of a network: which EVM chains it moves money on, the
-- tokens and treasury accounts there, and where money may go. The admin
-- maintains it (sql/functions/admin/: upsert_chain, upsert_chain_token,
-- upsert_treasury_account, allow_destination, disallow_destination, each
-- audited); the network's reader role SELECTs it like every table, and
-- operators through their membership in it.
--
-- chains               chain_key         the engine's name for the chain (local-a, base, ...)
--                      chain_id          the EIP-155 chain id, one row per id
--                      rpc_url_env       the NAME of the environment variable that
--                                        holds the RPC URL in the runner's
--                                        environment: a URL (which may carry an
--                                        API key) never enters a table
--                      finality_depth    confirmations before a receipt is final
--                      block_time_ms     the chain's block time
-- chain_tokens         a token contract per chain: symbol, address, decimals
-- treasury_accounts    our own accounts per chain, each with the id of the
--                      signer that holds its key (the key never enters the database)
-- allowed_destinations addresses outside the treasury that money may be sent to
--
-- Addresses are stored lower-case (0x + 40 hex digits).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE chains (
    chain_key      text PRIMARY KEY CHECK (chain_key ~ '^[a-z][a-z0-9-]{0,62}$'),
    chain_id       bigint NOT NULL UNIQUE CHECK (chain_id > 0),
    rpc_url_env    text NOT NULL CHECK (rpc_url_env ~ '^[A-Z][A-Z0-9_]{0,127}$'),
    finality_depth integer NOT NULL CHECK (finality_depth BETWEEN 0 AND 10000),
    block_time_ms  integer NOT NULL CHECK (block_time_ms BETWEEN 1 AND 3600000),
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);

CREATE TABLE chain_tokens (
    chain_key  text NOT NULL REFERENCES chains,
    symbol     text NOT NULL CHECK (symbol ~ '^[A-Za-z0-9.]{1,16}$'),
    address    text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
    decimals   smallint NOT NULL CHECK (decimals BETWEEN 0 AND 36),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (chain_key, symbol),
    UNIQUE (chain_key, address)
);

CREATE TABLE treasury_accounts (
    chain_key  text NOT NULL REFERENCES chains,
    address    text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
    signer_id  text NOT NULL CHECK (signer_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$'),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (chain_key, address)
);

CREATE TABLE allowed_destinations (
    chain_key text NOT NULL REFERENCES chains,
    address   text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
    label     text NOT NULL CHECK (btrim(label) <> '' AND length(label) <= 200),
    added_by  text NOT NULL,
    added_at  timestamptz NOT NULL,
    PRIMARY KEY (chain_key, address)
);

ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain'));
$ddl$);
