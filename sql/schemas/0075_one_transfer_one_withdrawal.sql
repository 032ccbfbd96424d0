-- depends: 0074_one_message_one_mint
--
-- A bybit_withdraw node completes on the venue's record of its withdrawal
-- (its id is the node's alone: movement_request_nodes_withdrawal_ref_key)
-- and on the chain's Transfer that record's txID shows paying the recipient
-- the amount. Nothing kept two withdrawals from completing on one Transfer:
-- a stale, replayed or hostile venue record naming a sibling's txID (the
-- same amount to the same recipient) completed the second node with nothing
-- paid for it. One Transfer now settles one withdrawal:
--   withdrawal_transfers  chain_key   the node's chain (its config's)
--                         tx_hash     the txID (0x and 64 lower-case hex)
--                         log_index   the Transfer's log (its logIndex)
--                         node_id     the withdrawal it settled (one
--                                     Transfer each)
--                         settled_at  when (the engine's clock)
-- keyed on the Transfer (chain, transaction, log). finish_nodes writes a
-- node's row when it completes on evidence that names them (tx_id and
-- transfer.log_index, as the executor reads them), on every path, and
-- refuses a completion whose evidence names no Transfer, or one another
-- node settled on (QT032). Only
-- the owner writes it; the reader role SELECTs it like every table. The
-- withdrawals already completed get their rows here; a database where two
-- completed on one Transfer is not migrated: the migration says which, for
-- an operator to settle first.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE withdrawal_transfers (
    chain_key  text NOT NULL,
    tx_hash    text NOT NULL CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
    log_index  integer NOT NULL CHECK (log_index >= 0),
    node_id    bigint NOT NULL UNIQUE REFERENCES movement_request_nodes (id),
    settled_at timestamptz NOT NULL,
    CONSTRAINT withdrawal_transfers_one_withdrawal_a_transfer PRIMARY KEY (chain_key, tx_hash, log_index)
);
DO $fill$
DECLARE
    v_paid  record;
    v_twice text;
BEGIN
    FOR v_paid IN
        SELECT lower(n.node_config ->> 'chain') AS chain_key, lower(n.evidence ->> 'tx_id') AS tx_hash,
               (n.evidence -> 'transfer' ->> 'log_index')::integer AS log_index, n.id AS node_id,
               coalesce(n.finished_at, n.updated_at) AS settled_at
          FROM movement_request_nodes n
         WHERE n.executor_key = 'bybit_withdraw' AND n.node_state = 'COMPLETED'
           AND lower(n.evidence ->> 'tx_id') ~ '^0x[0-9a-f]{64}$'
           AND n.evidence -> 'transfer' ->> 'log_index' ~ '^[0-9]{1,9}$'
         ORDER BY n.id
    LOOP
        INSERT INTO withdrawal_transfers (chain_key, tx_hash, log_index, node_id, settled_at)
        VALUES (v_paid.chain_key, v_paid.tx_hash, v_paid.log_index, v_paid.node_id, v_paid.settled_at)
        ON CONFLICT (chain_key, tx_hash, log_index) DO NOTHING;
        IF NOT FOUND THEN
            v_twice := concat_ws('; ', v_twice,
                                 format('%s log %s on %s (nodes %s and %s)', v_paid.tx_hash, v_paid.log_index,
                                        v_paid.chain_key,
                                        (SELECT w.node_id FROM withdrawal_transfers w
                                          WHERE (w.chain_key, w.tx_hash, w.log_index)
                                                = (v_paid.chain_key, v_paid.tx_hash, v_paid.log_index)),
                                        v_paid.node_id));
        END IF;
    END LOOP;
    IF v_twice IS NOT NULL THEN
        RAISE EXCEPTION 'network %: withdraw nodes completed on one transfer twice: %', current_schema(), v_twice
            USING ERRCODE = 'QT032',
                  HINT = 'One transfer settles one withdrawal: read both withdrawals at the venue and on the chain. '
                         'The node that does not own the transfer was not paid by it: settle that with the venue '
                         'and correct its evidence, then migrate again.';
    END IF;
END
$fill$;
$ddl$);
