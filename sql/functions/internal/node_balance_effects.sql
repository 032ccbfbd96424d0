-- node_balance_effects: what each of p_node_ids does to the treasury's accounts
-- once its side effect has landed, and when that can have happened. Every
-- executor's rule lives here, and only here (verify_drift, balance_status and
-- the demo read it through balance_expectations). One row per node and account:
--
--   account      ('chain', chain_key, treasury address) or ('venue', venue_key,
--                'FUND'), and the asset (USDC; a node moving another token has none)
--   low, high    the change in the asset when landed: the amount is the
--                movement's; a fee the config caps widens the range
--   may_start_at from when the effect may have landed: the node's first claim
--                (its intent is recorded before the side effect goes out); a CCTP
--                mint's from its burn's (anyone may mint an attested message)
--   certain_at   from when it has certainly landed: the node COMPLETED
--   void_at      from when it certainly has not and will not: the node FAILED
--                or SKIPPED (the engine's record; if that record is wrong the
--                balances show it)
--   reversible   it may land and be undone before the node finishes (an exchange
--                withdrawal takes the money at once and gives it back on Fail or
--                Reject)
--
--   executor        account                    low .. high
--   evm_transfer    chain from                 -amount
--                   chain to                   +amount
--                   venue whose deposit address `to` is: +amount, certain once the
--                   venue credited it (its bybit_deposit step COMPLETED, or the
--                   capital transfer followup CREDITED / MISMATCH with the amount
--                   credited); never void while the transfer is not
--   cctp_burn       chain from                 -amount
--   cctp_mint       chain to                   +amount - maxFee .. +amount (maxFee:
--                   the burn's max_fee_bps of the amount, default 10 bps: the fee
--                   Iris executes is at most the burn's cap)
--   ccip            chain from; destination to -amount; +amount (fees in the native coin)
--   stargate        source from                -amount
--                   destination to             +min .. +amount (min: min_amount, else
--                                              the amount less max_slippage_bps, 50
--                                              by default, as stargate_send_route)
--   bybit_withdraw  venue FUND                 -(amount + venue_withdraw_fee_cap) .. -amount
--                   chain to                   +amount
--   others (sim, bybit_deposit)                none
--
-- Addresses are compared lower-case. Internal; reads only.
CREATE OR REPLACE FUNCTION node_balance_effects(p_node_ids bigint[])
RETURNS TABLE (
    node_id      bigint,
    executor_key text,
    lane         text,
    account_kind text,
    account_key  text,
    address      text,
    asset        text,
    low          numeric,
    high         numeric,
    may_start_at timestamptz,
    certain_at   timestamptz,
    void_at      timestamptz,
    reversible   boolean
)
LANGUAGE sql STABLE
AS $$
    WITH nodes AS (
        SELECT n.id, n.executor_key, n.lane, n.node_config AS c, r.amount,
               (SELECT min(i.created_at) FROM node_intents i WHERE i.node_id = n.id) AS started_at,
               CASE WHEN n.node_state = 'COMPLETED' THEN n.finished_at END AS done_at,
               CASE WHEN n.node_state IN ('FAILED', 'SKIPPED') THEN n.finished_at END AS void_at
          FROM movement_request_nodes n
          JOIN movement_requests r ON r.id = n.request_id
         WHERE n.id = ANY (p_node_ids)
    ), settings AS (
        SELECT s.venue_withdraw_fee_cap AS fee_cap FROM balance_settings s
    ), parent_burn AS (
        SELECT e.child_node_id AS id, b.node_config AS c,
               (SELECT min(i.created_at) FROM node_intents i WHERE i.node_id = b.id) AS started_at
          FROM movement_plan_edges e
          JOIN movement_request_nodes b ON b.id = e.parent_node_id AND b.executor_key = 'cctp_burn'
         WHERE e.child_node_id IN (SELECT nodes.id FROM nodes WHERE nodes.executor_key = 'cctp_mint')
    ), legs AS (
        -- each transfer's legs on its chains, the table above: the config's
        -- key naming the chain its sender is debited on and the one its
        -- recipient is credited on, and the key naming its asset (a node
        -- moving another asset than USDC has no effect here)
        SELECT nodes.*, leg.debit_chain, leg.credit_chain
          FROM nodes
          JOIN (VALUES ('evm_transfer',   'chain',  'chain',             'token', 'USDC'),
                       ('cctp_burn',      'chain',  NULL,                NULL,    'USDC'),
                       ('cctp_mint',      NULL,     'chain',             NULL,    'USDC'),
                       ('ccip',           'chain',  'destination_chain', 'token', 'USDC'),
                       ('stargate',       'source', 'destination',       'token', 'USDC'),
                       ('bybit_withdraw', NULL,     'chain',             'coin',  NULL))
               AS leg (executor_key, debit_chain, credit_chain, asset_key, default_asset)
            ON leg.executor_key = nodes.executor_key
         WHERE coalesce(nodes.c ->> leg.asset_key, leg.default_asset) = 'USDC'
    ), effects AS (
        -- the sender: the amount, on the chain it sends from
        SELECT legs.id, 'chain' AS kind, legs.c ->> legs.debit_chain AS key, lower(legs.c ->> 'from') AS addr,
               -legs.amount AS low, -legs.amount AS high, legs.started_at, legs.done_at, legs.void_at,
               false AS reversible
          FROM legs
         WHERE legs.debit_chain IS NOT NULL
        UNION ALL
        -- the recipient: the amount, on the chain it lands on; a CCTP mint's less
        -- at most its burn's fee cap (and from when its burn began), a Stargate
        -- send's at least its minimum
        SELECT legs.id, 'chain', legs.c ->> legs.credit_chain, lower(legs.c ->> 'to'),
               CASE legs.executor_key
                   WHEN 'cctp_mint' THEN legs.amount - legs.amount
                       * coalesce(pb.c ->> 'max_fee_bps', legs.c ->> 'max_fee_bps', '10')::numeric / 10000
                   WHEN 'stargate' THEN
                       CASE WHEN legs.c ? 'min_amount' THEN (legs.c ->> 'min_amount')::numeric
                            ELSE legs.amount * (10000 - coalesce(legs.c ->> 'max_slippage_bps', '50')::numeric)
                                 / 10000 END
                   ELSE legs.amount
               END,
               legs.amount,
               CASE WHEN pb.started_at IS NULL THEN legs.started_at
                    ELSE least(pb.started_at, legs.started_at) END,
               legs.done_at, legs.void_at, false
          FROM legs
          LEFT JOIN parent_burn pb ON pb.id = legs.id
         WHERE legs.credit_chain IS NOT NULL
        UNION ALL
        -- evm_transfer into a venue's deposit address: the venue, once credited
        SELECT nodes.id, 'venue', d.venue_key, 'FUND',
               coalesce(CASE WHEN f.followup_state = 'MISMATCH' THEN f.credited_amount END, nodes.amount),
               coalesce(CASE WHEN f.followup_state = 'MISMATCH' THEN f.credited_amount END, nodes.amount),
               nodes.started_at,
               least((SELECT min(k.finished_at)
                        FROM movement_plan_edges e
                        JOIN movement_request_nodes k ON k.id = e.child_node_id
                       WHERE e.parent_node_id = nodes.id AND k.executor_key = 'bybit_deposit'
                         AND k.node_state = 'COMPLETED' AND k.node_config ->> 'venue' = d.venue_key),
                     CASE WHEN f.followup_state IN ('CREDITED', 'MISMATCH') THEN f.resolved_at END),
               nodes.void_at, false
          FROM nodes
          JOIN venue_deposit_addresses d ON d.chain_key = nodes.c ->> 'chain'
                                        AND d.address = lower(nodes.c ->> 'to')
                                        AND d.coin = coalesce(nodes.c ->> 'token', 'USDC')
          LEFT JOIN capital_transfer_followups f ON f.node_id = nodes.id
         WHERE nodes.executor_key = 'evm_transfer' AND coalesce(nodes.c ->> 'token', 'USDC') = 'USDC'
        UNION ALL
        -- bybit_withdraw: the venue's FUND account, the fee on top (its recipient is a leg above)
        SELECT nodes.id, 'venue', nodes.c ->> 'venue', 'FUND',
               -(nodes.amount + settings.fee_cap), -nodes.amount, nodes.started_at, nodes.done_at, nodes.void_at, true
          FROM nodes CROSS JOIN settings
         WHERE nodes.executor_key = 'bybit_withdraw' AND nodes.c ->> 'coin' = 'USDC'
    )
    SELECT effects.id, nodes.executor_key, nodes.lane, effects.kind, effects.key, effects.addr, 'USDC',
           effects.low, effects.high, effects.started_at, effects.done_at, effects.void_at, effects.reversible
      FROM effects
      JOIN nodes ON nodes.id = effects.id;
$$;
