-- depends: 0017_chain_registry
--
-- EVM nonces allocated in the database, and every signed transaction recorded
-- before it is broadcast.
--
-- evm_nonces        one row per treasury account that has signed through the
--                   engine: the next nonce the engine will hand out on that
--                   chain. record_intent_prepared_batch allocates from it in the
--                   transaction that records the signed intent (compare and set:
--                   a record at a nonce below next_nonce is refused with QT031,
--                   and the runner signs again at the next one), so two
--                   dispatchers never share a nonce and a crash before the
--                   commit allocates nothing.
-- evm_transactions  every signed transaction, by hash: its chain, sender, nonce,
--                   raw bytes (0x hex) and what it is for: a node's intent, a
--                   replacement of one (a fee bump at the same nonce), or a fill
--                   (a zero-value self-transfer closing a nonce whose intent will
--                   never broadcast, written by the evm_nonce_reaper). A row is
--                   committed before its transaction is broadcast, so recovery
--                   checks exact hashes and can rebroadcast the identical bytes.
--
-- chains gain the fee caps an EVM executor signs under (wei per gas):
-- max_fee_per_gas caps what a transaction may pay per gas in all, and
-- max_priority_fee_per_gas the tip; no transaction is signed above them, fee
-- bumps included (upsert_chain sets them; defaults 200 gwei and 5 gwei).
--
-- node_intents gains chain_key and sender: the account whose nonce the intent
-- holds (both or neither; with them, a nonce).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE chains
    ADD COLUMN max_fee_per_gas          numeric NOT NULL DEFAULT 200000000000
        CHECK (max_fee_per_gas > 0 AND max_fee_per_gas <= 1e16 AND max_fee_per_gas = trunc(max_fee_per_gas)),
    ADD COLUMN max_priority_fee_per_gas numeric NOT NULL DEFAULT 5000000000
        CHECK (max_priority_fee_per_gas > 0 AND max_priority_fee_per_gas = trunc(max_priority_fee_per_gas)),
    ADD CONSTRAINT chains_fee_caps_check CHECK (max_priority_fee_per_gas <= max_fee_per_gas);

CREATE TABLE evm_nonces (
    chain_key  text NOT NULL,
    address    text NOT NULL,
    next_nonce bigint NOT NULL CHECK (next_nonce >= 0),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (chain_key, address),
    FOREIGN KEY (chain_key, address) REFERENCES treasury_accounts
);

ALTER TABLE node_intents
    ADD COLUMN chain_key text,
    ADD COLUMN sender    text,
    ADD CONSTRAINT node_intents_account_check
        CHECK ((chain_key IS NULL) = (sender IS NULL) AND (chain_key IS NULL OR nonce IS NOT NULL)),
    ADD CONSTRAINT node_intents_account_fkey
        FOREIGN KEY (chain_key, sender) REFERENCES evm_nonces;

CREATE TABLE evm_transactions (
    id          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tx_hash     text PRIMARY KEY CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    chain_key   text NOT NULL,
    sender      text NOT NULL,
    nonce       bigint NOT NULL CHECK (nonce >= 0),
    intent_id   bigint REFERENCES node_intents ON DELETE CASCADE,
    purpose     text NOT NULL CHECK (purpose IN ('intent', 'replacement', 'fill')),
    raw_tx      text NOT NULL CHECK (raw_tx ~ '^0x([0-9a-f]{2})+$' AND length(raw_tx) <= 2 + 2 * 131072),
    recorded_by text NOT NULL,
    recorded_at timestamptz NOT NULL,
    FOREIGN KEY (chain_key, sender) REFERENCES evm_nonces,
    CHECK ((purpose = 'fill') = (intent_id IS NULL))
);
CREATE INDEX evm_transactions_account_nonce ON evm_transactions (chain_key, sender, nonce);
CREATE INDEX evm_transactions_intent ON evm_transactions (intent_id) WHERE intent_id IS NOT NULL;
$ddl$);
