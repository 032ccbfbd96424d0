-- settle_withdrawal_transfers: one Transfer settles one withdrawal. Each
-- bybit_withdraw node of p_node_ids, just COMPLETED, settles the chain's
-- Transfer its evidence names (tx_id, 0x and 64 hex digits, and
-- transfer.log_index, as the executor reads them, on its config's chain) in
-- withdrawal_transfers. QT032, and nothing settled, when one names no
-- Transfer, one another node settled on (two completions racing on one:
-- the later breaks the key), or one in a transaction the engine signed
-- itself (evm_transactions: an evm_transfer or a mint of the same amount to
-- the same account is no payout of the venue's). Internal: finish_nodes, on every path that
-- completes a node. Locks: the Transfers' keys it writes.
CREATE OR REPLACE FUNCTION settle_withdrawal_transfers(p_node_ids bigint[]) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_problem text;
BEGIN
    WITH paid AS (
        SELECT lower(n.node_config ->> 'chain') AS chain_key,
               CASE WHEN lower(n.evidence ->> 'tx_id') ~ '^0x[0-9a-f]{64}$'
                    THEN lower(n.evidence ->> 'tx_id') END AS tx_hash,
               CASE WHEN n.evidence -> 'transfer' ->> 'log_index' ~ '^[0-9]{1,9}$'
                    THEN (n.evidence -> 'transfer' ->> 'log_index')::integer END AS log_index,
               n.id AS node_id
          FROM movement_request_nodes n
         WHERE n.id = ANY (p_node_ids)
    ), taken AS (
        SELECT CASE
                   WHEN p.tx_hash IS NULL OR p.log_index IS NULL THEN
                       format('node %s: a bybit_withdraw completes on the chain''s Transfer its evidence names '
                              '(tx_id, and transfer.log_index), and it names none', p.node_id)
                   WHEN ours.tx_hash IS NOT NULL THEN
                       format('node %s: the transfer its withdrawal names (%s, on %s) is a transaction the engine '
                              'signed from %s (%s), not the venue''s payout: the venue''s record is not this '
                              'node''s payment', p.node_id, p.tx_hash, p.chain_key, ours.sender,
                              coalesce('node ' || (SELECT i.node_id FROM node_intents i WHERE i.id = ours.intent_id),
                                       ours.purpose))
                   ELSE
                       format('node %s: the transfer its withdrawal names (%s, log %s, on %s) settled node %s''s '
                              'withdrawal already: one transfer settles one withdrawal. The venue''s record is '
                              'not this node''s payment: read both withdrawals at the venue and on the chain',
                              p.node_id, p.tx_hash, p.log_index, p.chain_key, w.node_id)
               END AS problem
          FROM paid p
          LEFT JOIN withdrawal_transfers w USING (chain_key, tx_hash, log_index)
          LEFT JOIN evm_transactions ours ON ours.tx_hash = p.tx_hash AND ours.chain_key = p.chain_key
         WHERE p.tx_hash IS NULL OR p.log_index IS NULL OR w.node_id <> p.node_id OR ours.tx_hash IS NOT NULL
    ), settled AS (
        INSERT INTO withdrawal_transfers (chain_key, tx_hash, log_index, node_id, settled_at)
        SELECT p.chain_key, p.tx_hash, p.log_index, p.node_id, clock()
          FROM paid p
         WHERE NOT EXISTS (SELECT 1 FROM taken)
           AND NOT EXISTS (SELECT 1 FROM withdrawal_transfers w WHERE w.node_id = p.node_id)
         ORDER BY p.chain_key, p.tx_hash, p.log_index
    )
    SELECT min(t.problem) INTO v_problem FROM taken t;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = 'QT032';
    END IF;
END
$$;
