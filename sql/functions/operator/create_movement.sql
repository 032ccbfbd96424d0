-- create_movement: (none) -> PENDING_APPROVAL, its nodes PENDING.
--
-- The plan is either inline (p_plan) or a named template (p_template) whose
-- {"$param": name} placeholders are filled from p_params. A plan is
--   {"nodes": [{"key": "burn", "executor": "cctp", "config": {...}, "depends_on": []}, ...]}
-- It is compiled here into nodes and edges; a plan with no nodes, a duplicate
-- or unknown key, a depends_on that is not a list of node keys, a cycle, an
-- unknown executor, a config that fails its executor's schema (its ranges
-- included), or a lane without a row in lane_baselines is rejected (QT001,
-- check_plan). A non-positive amount, an expiry not in the future,
-- params that are not an object, or an unknown template raise QT002/QT003;
-- an amount that is NaN, infinite or beyond engine_limits' max_amount, an
-- infinite expiry, or a plan beyond its limits raise QT005.
--
-- Idempotent on p_external_id: the same request again (every argument: the
-- plan or the template and its params, amount, asset, expiry, callback url and
-- priority) returns the existing movement with created = false, whoever asks;
-- a request that differs in any of them under the same id raises QT004.
-- Concurrent duplicates are serialised by the unique index. The body is
-- create_movement_rows, the one set-based step create_movements also takes.
CREATE OR REPLACE FUNCTION create_movement(
    p_external_id  text,
    p_amount       numeric,
    p_plan         jsonb DEFAULT NULL,
    p_template     text DEFAULT NULL,
    p_params       jsonb DEFAULT NULL,
    p_asset        text DEFAULT 'USDC',
    p_expires_at   timestamptz DEFAULT NULL,
    p_callback_url text DEFAULT NULL,
    p_priority     integer DEFAULT 0
) RETURNS TABLE (movement_id bigint, created boolean)
LANGUAGE sql
AS $$
    -- the rules and the writes are create_movement_rows', shared with create_movements
    SELECT c.movement_id, c.created
      FROM create_movement_rows(false, ARRAY[p_external_id], ARRAY[p_amount], ARRAY[p_plan], ARRAY[p_template],
                                ARRAY[p_params], ARRAY[p_asset], ARRAY[p_expires_at], ARRAY[p_callback_url],
                                ARRAY[p_priority]) c;
$$;
