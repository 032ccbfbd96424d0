-- create_movements: (none) -> PENDING_APPROVAL for up to 1,000 movements in one
-- call and one transaction: the batch intake of an upstream system.
--
-- p_items is a JSON array of 1 to 1,000 objects, each create_movement's
-- arguments by name:
--   {"external_id": "pay-1", "amount": 250000.5 | "250000.5",
--    "plan": {...} | "template": "bridge", "params": {...},
--    "asset": "USDC", "expires_at": "2026-12-01T12:00:00Z",
--    "callback_url": "https://...", "priority": 0}
-- asset (default USDC), plan or template, params, expires_at, callback_url
-- and priority (default 0) may be left out or null. Every rule of
-- create_movement holds for each item, through the same step
-- (create_movement_rows): plan validation, limits, templates, the creator
-- (session_user), an audit row and a callback per movement, and idempotency
-- on the external id: an item whose external id names a movement answers
-- with it (created = false) when its request is the same, and is QT004 when
-- it differs; an external id twice in the batch is one movement.
--
-- One bad item refuses the whole batch, and nothing changes: the error names
-- it by its index in p_items (0-based) and its external id:
--   create_movements: items[2] (external id 'pay-3'): amount must be positive, got 0
-- Here, QT002: p_items not an array of 1 to 1,000 objects (split a larger
-- batch), an item with a field not listed above, or a field of the wrong JSON
-- type (external_id, template, asset, callback_url: strings; amount: a number
-- or a numeric string written plainly, digits with an optional fraction, at
-- most 64 either side: no sign, exponent or blanks, "250000.5" but not "2.5e5"
-- or " 7"; expires_at: a time as a string; priority: a whole number within
-- integer's range).
-- Returns one row per item, in p_items' order: the movement, its state now,
-- and whether this call created it.
CREATE OR REPLACE FUNCTION create_movements(p_items jsonb)
RETURNS TABLE (movement_id bigint, request_state qtg.request_state, created boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_fields     text[] := ARRAY['external_id', 'amount', 'plan', 'template', 'params', 'asset', 'expires_at',
                                 'callback_url', 'priority'];
    v_at         integer;
    v_problem    text;
    v_external   text[];
    v_amounts    numeric[];
    v_plans      jsonb[];
    v_templates  text[];
    v_params     jsonb[];
    v_assets     text[];
    v_expires_at timestamptz[];
    v_callbacks  text[];
    v_priorities integer[];
BEGIN
    IF jsonb_typeof(p_items) IS DISTINCT FROM 'array' OR jsonb_array_length(p_items) = 0 THEN
        RAISE EXCEPTION 'create_movements: p_items must be a JSON array of 1 to 1000 movements, got %',
                        coalesce(jsonb_typeof(p_items), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'Pass [{"external_id": ..., "amount": ..., "plan": {...}}, ...]; create_movement takes one.';
    END IF;
    IF jsonb_array_length(p_items) > 1000 THEN
        RAISE EXCEPTION 'create_movements: at most 1000 movements a call, got %', jsonb_array_length(p_items)
            USING ERRCODE = 'QT002', HINT = 'Split the batch into calls of at most 1000 items.';
    END IF;

    -- each item an object of known fields, each of its JSON type
    SELECT i.ord, p.problem INTO v_at, v_problem
      FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(item, ord)
     CROSS JOIN LATERAL (
        SELECT CASE
            WHEN jsonb_typeof(i.item) <> 'object' THEN
                format('an item must be a JSON object, got %s', jsonb_typeof(i.item))
            WHEN EXISTS (SELECT 1 FROM jsonb_object_keys(i.item) k WHERE k <> ALL (v_fields)) THEN
                format('unknown field %s (the fields: %s)',
                       (SELECT quote_literal(left(k, 64)) FROM jsonb_object_keys(i.item) k
                         WHERE k <> ALL (v_fields) ORDER BY k LIMIT 1), array_to_string(v_fields, ', '))
            WHEN jsonb_typeof(i.item -> 'external_id') NOT IN ('string', 'null') THEN
                format('external_id must be a string, got %s', jsonb_typeof(i.item -> 'external_id'))
            WHEN jsonb_typeof(i.item -> 'amount') NOT IN ('string', 'number', 'null') THEN
                format('amount must be a number or a numeric string, got %s', left((i.item -> 'amount')::text, 64))
            -- a numeric string only in its plain form: PostgreSQL reads "1e3" and " 7" as
            -- numbers, where the system that wrote them may have meant something else
            WHEN jsonb_typeof(i.item -> 'amount') = 'string'
             AND i.item ->> 'amount' !~ '^[0-9]{1,64}(\.[0-9]{1,64})?$' THEN
                format('amount must be a number or a numeric string written plainly, digits with an optional '
                       'fraction (no sign, exponent or blanks; at most 64 digits either side: "250000.5"), got %s',
                       left((i.item -> 'amount')::text, 64))
            WHEN jsonb_typeof(i.item -> 'template') NOT IN ('string', 'null') THEN
                format('template must be a template''s name, got %s', jsonb_typeof(i.item -> 'template'))
            WHEN jsonb_typeof(i.item -> 'asset') NOT IN ('string', 'null') THEN
                format('asset must be a string such as "USDC", got %s', jsonb_typeof(i.item -> 'asset'))
            WHEN jsonb_typeof(i.item -> 'expires_at') NOT IN ('string', 'null') THEN
                format('expires_at must be a time as a string, e.g. "2026-12-01T12:00:00Z", got %s',
                       jsonb_typeof(i.item -> 'expires_at'))
            WHEN jsonb_typeof(i.item -> 'callback_url') NOT IN ('string', 'null') THEN
                format('callback_url must be a string, got %s', jsonb_typeof(i.item -> 'callback_url'))
            WHEN jsonb_typeof(i.item -> 'priority') NOT IN ('number', 'null')
              OR (jsonb_typeof(i.item -> 'priority') = 'number'
                  AND ((i.item ->> 'priority')::numeric NOT BETWEEN -2147483648 AND 2147483647
                       OR (i.item ->> 'priority')::numeric <> trunc((i.item ->> 'priority')::numeric))) THEN
                format('priority must be a whole number within -2147483648..2147483647, got %s',
                       left((i.item -> 'priority')::text, 64))
            END AS problem) p
     WHERE p.problem IS NOT NULL
     ORDER BY i.ord
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'create_movements: items[%]%: %', v_at - 1,
                        coalesce(format(' (external id %s)',
                                        quote_literal(left(p_items -> (v_at - 1)::integer ->> 'external_id', 64))), ''),
                        v_problem
            USING ERRCODE = 'QT002', HINT = 'Each item takes create_movement''s arguments by name; see create_movements'' header.';
    END IF;

    BEGIN
        SELECT array_agg(i.item ->> 'external_id' ORDER BY i.ord),
               array_agg((i.item ->> 'amount')::numeric ORDER BY i.ord),
               array_agg(nullif(i.item -> 'plan', 'null') ORDER BY i.ord),
               array_agg(i.item ->> 'template' ORDER BY i.ord),
               array_agg(nullif(i.item -> 'params', 'null') ORDER BY i.ord),
               array_agg(coalesce(i.item ->> 'asset', 'USDC') ORDER BY i.ord),
               array_agg((i.item ->> 'expires_at')::timestamptz ORDER BY i.ord),
               array_agg(i.item ->> 'callback_url' ORDER BY i.ord),
               array_agg(coalesce((i.item ->> 'priority')::numeric::integer, 0) ORDER BY i.ord)
          INTO v_external, v_amounts, v_plans, v_templates, v_params, v_assets, v_expires_at, v_callbacks,
               v_priorities
          FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(item, ord);
    EXCEPTION WHEN data_exception THEN
        -- a time PostgreSQL cannot read: find the item
        FOR v_at IN 1 .. jsonb_array_length(p_items) LOOP
            BEGIN
                PERFORM (p_items -> (v_at - 1) ->> 'expires_at')::timestamptz;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION 'create_movements: items[%]%: expires_at % is not a time', v_at - 1,
                                coalesce(format(' (external id %s)',
                                                quote_literal(left(p_items -> (v_at - 1) ->> 'external_id', 64))), ''),
                                quote_literal(left(p_items -> (v_at - 1) ->> 'expires_at', 64))
                    USING ERRCODE = 'QT002', HINT = 'Pass an ISO 8601 time with its offset, e.g. "2026-12-01T12:00:00Z".';
            END;
        END LOOP;
        RAISE;
    END;

    RETURN QUERY
        SELECT c.movement_id, c.request_state, c.created
          FROM create_movement_rows(true, v_external, v_amounts, v_plans, v_templates, v_params, v_assets,
                                    v_expires_at, v_callbacks, v_priorities) c
         ORDER BY c.item;
END
$$;
