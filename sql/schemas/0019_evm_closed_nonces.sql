-- depends: 0018_evm_nonces
--
-- evm_closed_nonces: the nonces of treasury accounts the evm_nonce_reaper
-- found consumed on their chain (record_nonce_closed): by a fill it recorded
-- (fill_mined), by a transaction the engine never recorded (consumed), or by a
-- failed or abandoned intent's own transaction (found_mined: money moved for a
-- node the engine holds failed; an operator looks at it). One row per nonce,
-- so the reaper's listings (evm_nonce_gaps, evm_stale_transactions) skip it by
-- its key instead of searching the audit log; each report is audited as well.
--
-- node_intents gains an index on the account and nonce of EVM intents: the
-- reaper asks per nonce whether a live intent holds it.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE evm_closed_nonces (
    chain_key text NOT NULL,
    address   text NOT NULL,
    nonce     bigint NOT NULL CHECK (nonce >= 0),
    how       text NOT NULL CHECK (how IN ('fill_mined', 'consumed', 'found_mined')),
    tx_hash   text CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    evidence  jsonb NOT NULL CHECK (jsonb_typeof(evidence) = 'object'),
    closed_by text NOT NULL,
    closed_at timestamptz NOT NULL,
    PRIMARY KEY (chain_key, address, nonce),
    FOREIGN KEY (chain_key, address) REFERENCES evm_nonces
);

CREATE INDEX node_intents_account_nonce ON node_intents (chain_key, sender, nonce) WHERE chain_key IS NOT NULL;
$ddl$);
