-- depends: 0020_protocol_registry
--
-- ccip_manual_executions: the manual executions the ccip_stranded_reaper made
-- of CCIP messages whose destination execution FAILED (OffRamp
-- manuallyExecute), each recorded (record_ccip_manual_execution) BEFORE it is
-- broadcast, as every signed transaction of the engine is: the signed bytes,
-- their hash and the account and nonce that sign them (the reaper's own
-- keeper account, never a treasury account, so the engine's nonce allocation
-- of treasury accounts is not touched). A reaper that dies between the record
-- and the broadcast broadcasts the recorded bytes on its next round; a new
-- attempt names the newest one it follows (compare and set), so two reapers
-- never both record one. The OffRamp lets a message succeed once anyway.
--
-- movement_request_nodes gains a partial index on the reaper's predicate: the
-- ccip nodes still observed whose last evidence says the execution FAILED.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE ccip_manual_executions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_id     bigint NOT NULL REFERENCES movement_request_nodes,
    message_id  text NOT NULL CHECK (message_id ~ '^0x[0-9a-f]{64}$'),
    chain_key   text NOT NULL REFERENCES chains,
    executor    text NOT NULL CHECK (executor ~ '^0x[0-9a-f]{40}$'),
    nonce       bigint NOT NULL CHECK (nonce >= 0),
    tx_hash     text NOT NULL UNIQUE CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    raw_tx      text NOT NULL,
    recorded_by text NOT NULL,
    recorded_at timestamptz NOT NULL
);

CREATE INDEX ccip_manual_executions_message ON ccip_manual_executions (message_id, id);

CREATE INDEX movement_request_nodes_ccip_stranded ON movement_request_nodes (id)
 WHERE executor_key = 'ccip' AND node_state = 'OBSERVING' AND evidence ->> 'ccip_state' = 'FAILURE';
$ddl$);
