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
-- Concurrent duplicates are serialised by the unique index.
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
LANGUAGE plpgsql
AS $$
DECLARE
    v_now        timestamptz := clock();
    v_actor      text := session_user;  -- the login is the creator: no parameter names a person
    v_plan       jsonb;
    v_node_count integer;
    v_request_id bigint;
    v_existing   movement_requests;
BEGIN
    -- arguments
    IF p_external_id IS NULL OR btrim(p_external_id) = '' OR length(p_external_id) > 200 THEN
        RAISE EXCEPTION 'external id must be 1 to 200 characters' USING ERRCODE = 'QT002',
            HINT = 'Pass the caller''s own id for this movement; it makes creation idempotent.';
    END IF;
    IF p_amount IS NULL OR p_amount <= 0 THEN
        RAISE EXCEPTION 'amount must be positive, got %', coalesce(p_amount::text, 'NULL') USING ERRCODE = 'QT002',
            HINT = 'Pass the amount to move in units of the asset, e.g. 250000.5.';
    END IF;
    -- NaN passes "<= 0"; NaN, Infinity and an amount beyond max_amount are QT005
    PERFORM check_number('create_movement', 'amount', p_amount, 0, (SELECT max_amount FROM engine_limits), true);
    IF p_amount <> round(p_amount, 6) THEN
        RAISE EXCEPTION 'amount % has more than 6 decimal places', p_amount USING ERRCODE = 'QT002',
            HINT = 'Round the amount to at most 6 decimal places (USDC''s precision).';
    END IF;
    IF p_asset IS NULL OR p_asset !~ '^[A-Z0-9]{2,16}$' THEN
        RAISE EXCEPTION 'asset must be an upper-case symbol such as USDC, got %', coalesce(p_asset, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;
    IF NOT isfinite(p_expires_at) THEN
        RAISE EXCEPTION 'expiry must be a finite time, got %', p_expires_at USING ERRCODE = 'QT005',
            HINT = 'Pass a time in the future, or no expiry at all.';
    END IF;
    IF p_expires_at IS NOT NULL AND p_expires_at <= v_now THEN
        RAISE EXCEPTION 'expiry % is not in the future (now %)', p_expires_at, v_now USING ERRCODE = 'QT002';
    END IF;
    IF (p_plan IS NULL) = (p_template IS NULL) THEN
        RAISE EXCEPTION 'give exactly one of an inline plan or a template name' USING ERRCODE = 'QT002';
    END IF;
    IF p_params IS NOT NULL AND jsonb_typeof(p_params) <> 'object' THEN
        RAISE EXCEPTION 'template params must be a JSON object, got %', jsonb_typeof(p_params) USING ERRCODE = 'QT002',
            HINT = 'Pass the parameters by name, e.g. {"lane": "cctp_fast"}.';
    END IF;

    -- resolve the plan
    IF p_template IS NOT NULL THEN
        SELECT substitute_params(plan, coalesce(p_params, '{}')) INTO v_plan
          FROM movement_templates WHERE template_name = p_template;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'template % does not exist', p_template USING ERRCODE = 'QT003',
                HINT = 'SELECT template_name FROM movement_templates lists the templates of this network.';
        END IF;
    ELSE
        v_plan := p_plan;
    END IF;

    -- idempotency: the same external id returns the movement it already names
    SELECT * INTO v_existing FROM movement_requests WHERE external_id = p_external_id;
    IF FOUND THEN
        IF v_existing.plan = v_plan AND v_existing.amount = p_amount AND v_existing.asset = p_asset
           AND v_existing.template_name IS NOT DISTINCT FROM p_template
           AND v_existing.template_params IS NOT DISTINCT FROM p_params
           AND v_existing.expires_at IS NOT DISTINCT FROM p_expires_at
           AND v_existing.callback_url IS NOT DISTINCT FROM p_callback_url
           AND v_existing.priority = coalesce(p_priority, 0) THEN
            movement_id := v_existing.id;
            created := false;
            RETURN NEXT;
            RETURN;
        END IF;
        RAISE EXCEPTION 'external id % already names movement % with a different request (plan, amount, asset, template and its params, expiry, callback url or priority)',
                        p_external_id, v_existing.id
            USING ERRCODE = 'QT004', HINT = 'Use a new external id for a different movement.';
    END IF;

    -- validate the plan (check_plan: the one validation of a plan)
    v_node_count := check_plan('create_movement', v_plan);
    PERFORM check_limits('create_movement', p_json => ARRAY[p_params], p_text => ARRAY[p_callback_url]);

    -- compile: request, nodes, edges
    INSERT INTO movement_requests (external_id, request_state, template_name, template_params, plan, amount,
                                   asset, priority, callback_url, created_by, open_nodes, expires_at,
                                   created_at, updated_at)
    VALUES (p_external_id, 'PENDING_APPROVAL', p_template, p_params, v_plan, p_amount, p_asset,
            coalesce(p_priority, 0), p_callback_url, v_actor, v_node_count, p_expires_at, v_now, v_now)
    ON CONFLICT (external_id) DO NOTHING
    RETURNING id INTO v_request_id;
    IF v_request_id IS NULL THEN
        -- a concurrent call with the same external id committed first: answer as a repeat
        RETURN QUERY SELECT * FROM create_movement(p_external_id, p_amount, p_plan, p_template, p_params, p_asset,
                                                   p_expires_at, p_callback_url, p_priority);
        RETURN;
    END IF;

    INSERT INTO movement_request_nodes (request_id, node_key, executor_key, has_side_effect, node_config, lane,
                                        node_state, pending_parents, priority, created_at, updated_at)
    SELECT v_request_id,
           n.value ->> 'key',
           e.executor_key,
           e.has_side_effect,
           coalesce(n.value -> 'config', '{}'),
           coalesce(n.value -> 'config' ->> 'lane', e.executor_key),
           'PENDING',
           (SELECT count(DISTINCT d) FROM jsonb_array_elements_text(coalesce(n.value -> 'depends_on', '[]')) d),
           coalesce(p_priority, 0),
           v_now, v_now
      FROM jsonb_array_elements(v_plan -> 'nodes') WITH ORDINALITY n
      JOIN executors e ON e.executor_key = n.value ->> 'executor'
     ORDER BY n.ordinality;

    INSERT INTO movement_plan_edges (request_id, parent_node_id, child_node_id)
    SELECT DISTINCT v_request_id, parent.id, child.id
      FROM jsonb_array_elements(v_plan -> 'nodes') n
     CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(n.value -> 'depends_on', '[]')) d
      JOIN movement_request_nodes child ON child.request_id = v_request_id AND child.node_key = n.value ->> 'key'
      JOIN movement_request_nodes parent ON parent.request_id = v_request_id AND parent.node_key = d.value;

    PERFORM write_audit(ARRAY[(v_actor, 'request', v_request_id::text, v_request_id, 'created', NULL, 'PENDING_APPROVAL',
                               jsonb_build_object('external_id', p_external_id, 'amount', p_amount, 'asset', p_asset,
                                                  'template', p_template, 'nodes', v_node_count))::qtg.audit_event]);
    PERFORM enqueue_callbacks(ARRAY[v_request_id], ARRAY[NULL::qtg.request_state], ARRAY['{}'::jsonb]);

    movement_id := v_request_id;
    created := true;
    RETURN NEXT;
END
$$;
