-- movement_create: create_movement as a procedure, for CALL in psql:
-- (none) -> PENDING_APPROVAL, idempotent on p_external_id.
--   CALL movement_create('payout-7', 250, p_template => 'transfer',
--       p_params => '{"chain": "local-a", "from": "0x...", "to": "0x..."}');
-- Takes create_movement's arguments (names and defaults) and answers its row
-- in the INOUT parameters: the movement's id and whether this call created it
-- (false: the external id named it already). The rules, the refusals and the
-- writes are create_movement's.
CREATE OR REPLACE PROCEDURE movement_create(
    p_external_id  text,
    p_amount       numeric,
    p_plan         jsonb DEFAULT NULL,
    p_template     text DEFAULT NULL,
    p_params       jsonb DEFAULT NULL,
    p_asset        text DEFAULT 'USDC',
    p_expires_at   timestamptz DEFAULT NULL,
    p_callback_url text DEFAULT NULL,
    p_priority     integer DEFAULT 0,
    INOUT movement_id bigint DEFAULT NULL,
    INOUT created     boolean DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT c.movement_id, c.created
      FROM create_movement(p_external_id, p_amount, p_plan, p_template, p_params, p_asset, p_expires_at,
                           p_callback_url, p_priority) c;
$$;
