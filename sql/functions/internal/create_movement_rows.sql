-- create_movement_rows: (none) -> PENDING_APPROVAL, for a set of movements:
-- the one body of create_movement (a set of one) and create_movements (up to
-- 1,000 from an upstream system). Internal. Element i of every array is item
-- i; the creator is session_user (no parameter names a person).
--
-- The rules, each checked over the whole set in this order; the first item
-- that breaks the first rule broken raises, and nothing changes:
--   1. the arguments: external id 1-200 characters, none of them a control
--      character or a bidirectional override (unprintable: the approver's
--      terminal and page show it), amount positive (QT002),
--      finite and at most engine_limits.max_amount (QT005), at most 6
--      decimals, asset an upper-case symbol (QT002), expiry finite (QT005)
--      and in the future, exactly one of a plan or a template, params an
--      object (QT002)
--   2. the templates: known (QT003), their params filled in (substitute_params,
--      QT003 for a missing one)
--   3. the external ids: one that names a movement already answers with it
--      (created = false) when the request is the same (every argument: the
--      plan or the template and its params, amount, asset, expiry, callback
--      url, priority), else QT004; an id twice in the set is one movement,
--      the later item a repeat of the first (QT004 when it differs)
--   4. the new movements' plans: check_plan, once per distinct plan (QT001,
--      QT005); their params and callback urls within engine_limits (QT005)
--   5. written, set-based: the requests (a concurrent call that committed the
--      same external id first is answered as in 3), their nodes and edges, an
--      audit row (created) and a callback (movement.pending_approval) each
-- With p_batch, a raised QT error names its item, as create_movements'
-- caller sent it: "create_movements: items[2] (external id 'x'): ...";
-- without it the messages are create_movement's own.
-- Returns one row per item, in input order: the movement, its state now,
-- and whether this call created it.
CREATE OR REPLACE FUNCTION create_movement_rows(
    p_batch         boolean,
    p_external_ids  text[],
    p_amounts       numeric[],
    p_plans         jsonb[],
    p_templates     text[],
    p_params        jsonb[],
    p_assets        text[],
    p_expires_at    timestamptz[],
    p_callback_urls text[],
    p_priorities    integer[]
) RETURNS TABLE (item integer, movement_id bigint, request_state qtg.request_state, created boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := clock();
    v_actor   text := session_user;
    v_call    text := CASE WHEN p_batch THEN 'create_movements' ELSE 'create_movement' END;
    v_n       integer := coalesce(cardinality(p_external_ids), 0);
    v_plans   jsonb[];     -- item i's plan, its template's filled in
    v_ids     bigint[];    -- item i's movement, once known
    v_created boolean[];
    v_first   integer[];   -- the first item with item i's external id
    v_at      integer;     -- the item an error is about
    v_plan    jsonb;
    v_code    text;
    v_message text;
    v_hint    text;
    v_where   text;
    v_round   integer := 0;
    v_made    jsonb;       -- external id -> the movement this call inserted
    v_rank    integer;     -- the first argument rule an item breaks
    v_max_amount numeric := (SELECT max_amount FROM engine_limits);
BEGIN
    BEGIN
        -- 1. the arguments: the first rule each item breaks (cheap tests over the set), then
        --    the message of the first item that breaks one
        SELECT i.ord, p.rank INTO v_at, v_rank
          FROM unnest(p_external_ids, p_amounts, p_plans, p_templates, p_params, p_assets, p_expires_at)
               WITH ORDINALITY AS i(external_id, amount, plan, template, params, asset, expires_at, ord)
         CROSS JOIN LATERAL (
            SELECT CASE
                WHEN i.external_id IS NULL OR btrim(i.external_id) = '' OR length(i.external_id) > 200
                     OR unprintable(i.external_id) THEN 1
                WHEN i.amount IS NULL OR i.amount <= 0 THEN 2
                -- NaN passes "<= 0"; NaN, Infinity and an amount beyond max_amount are QT005
                WHEN number_problem('amount', i.amount, 0, v_max_amount, true) IS NOT NULL THEN 3
                WHEN i.amount <> round(i.amount, 6) THEN 4
                WHEN i.asset IS NULL OR i.asset !~ '^[A-Z0-9]{2,16}$' THEN 5
                WHEN NOT isfinite(i.expires_at) THEN 6
                WHEN i.expires_at <= v_now THEN 7
                WHEN (i.plan IS NULL) = (i.template IS NULL) THEN 8
                WHEN jsonb_typeof(i.params) <> 'object' THEN 9
            END AS rank) p
         WHERE p.rank IS NOT NULL
         ORDER BY i.ord
         LIMIT 1;
        IF FOUND THEN
            SELECT m.code, m.message, m.hint INTO v_code, v_message, v_hint
              FROM (VALUES
                (1, 'QT002', 'external id must be 1 to 200 characters, all printable (no control character '
                             'or bidirectional override)',
                 'Pass the caller''s own id for this movement, one line of text without control characters; '
                 'it makes creation idempotent.'),
                (2, 'QT002', format('amount must be positive, got %s', coalesce(p_amounts[v_at]::text, 'NULL')),
                 'Pass the amount to move in units of the asset, e.g. 250000.5.'),
                (3, 'QT005', v_call || ': ' || number_problem('amount', p_amounts[v_at], 0, v_max_amount, true),
                 'Pass a finite number within the range; engine_limits holds the tunable bounds, which the admin login may change.'),
                (4, 'QT002', format('amount %s has more than 6 decimal places', p_amounts[v_at]),
                 'Round the amount to at most 6 decimal places (USDC''s precision).'),
                (5, 'QT002', format('asset must be an upper-case symbol such as USDC, got %s',
                                    coalesce(p_assets[v_at], 'NULL')),
                 'Pass the asset''s symbol, e.g. USDC.'),
                (6, 'QT005', format('expiry must be a finite time, got %s', p_expires_at[v_at]),
                 'Pass a time in the future, or no expiry at all.'),
                (7, 'QT002', format('expiry %s is not in the future (now %s)', p_expires_at[v_at], v_now),
                 'Pass a time in the future, or no expiry at all.'),
                (8, 'QT002', 'give exactly one of an inline plan or a template name',
                 'Pass a plan, or the name of a template (with its params), not both.'),
                (9, 'QT002', format('template params must be a JSON object, got %s', jsonb_typeof(p_params[v_at])),
                 'Pass the parameters by name, e.g. {"lane": "cctp_fast"}.')
              ) AS m(rank, code, message, hint)
             WHERE m.rank = v_rank;
            IF v_code = 'QT005' THEN
                RAISE EXCEPTION '%', v_message USING ERRCODE = 'QT005', HINT = v_hint;
            END IF;
            RAISE EXCEPTION '%', v_message USING ERRCODE = 'QT002', HINT = v_hint;
        END IF;

        -- 2. the templates, their params filled in
        v_plans := p_plans;
        IF array_remove(p_templates, NULL) <> '{}' THEN
            SELECT i.ord, i.template INTO v_at, v_where
              FROM unnest(p_templates) WITH ORDINALITY AS i(template, ord)
             WHERE i.template IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM movement_templates t WHERE t.template_name = i.template)
             ORDER BY i.ord
             LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'template % does not exist', v_where USING ERRCODE = 'QT003',
                    HINT = 'SELECT template_name FROM movement_templates lists the templates of this network.';
            END IF;
            BEGIN
                SELECT array_agg(CASE WHEN i.template IS NULL THEN i.plan
                                      ELSE substitute_params(t.plan, coalesce(i.params, '{}')) END ORDER BY i.ord)
                  INTO v_plans
                  FROM unnest(p_plans, p_templates, p_params) WITH ORDINALITY AS i(plan, template, params, ord)
                  LEFT JOIN movement_templates t ON t.template_name = i.template;
            EXCEPTION WHEN SQLSTATE 'QT003' THEN
                -- a param missing: find its item (substitute_params raises again there)
                FOR v_at IN SELECT i.ord FROM unnest(p_templates) WITH ORDINALITY AS i(template, ord)
                             WHERE i.template IS NOT NULL ORDER BY i.ord LOOP
                    PERFORM substitute_params(t.plan, coalesce(p_params[v_at], '{}'))
                       FROM movement_templates t WHERE t.template_name = p_templates[v_at];
                END LOOP;
                RAISE;
            END;
        END IF;

        -- 3. the external ids: a repeat inside the set is its first item's
        v_first := ARRAY[1];
        IF v_n > 1 THEN
            SELECT array_agg(f.first::integer ORDER BY f.ord) INTO v_first
              FROM (SELECT i.ord, min(i.ord) OVER (PARTITION BY i.external_id) AS first
                      FROM unnest(p_external_ids) WITH ORDINALITY AS i(external_id, ord)) f;
            SELECT i.ord, f.ord INTO v_at, v_where
              FROM unnest(p_external_ids, v_plans, p_amounts, p_assets, p_templates, p_params, p_expires_at,
                          p_callback_urls, p_priorities, v_first)
                   WITH ORDINALITY AS i(external_id, plan, amount, asset, template, params, expires_at, callback_url,
                                        priority, first, ord)
              JOIN unnest(v_plans, p_amounts, p_assets, p_templates, p_params, p_expires_at, p_callback_urls,
                          p_priorities)
                   WITH ORDINALITY AS f(plan, amount, asset, template, params, expires_at, callback_url, priority, ord)
                ON f.ord = i.first
             WHERE i.first <> i.ord
               AND NOT (f.plan = i.plan AND f.amount = i.amount AND f.asset = i.asset
                        AND f.template IS NOT DISTINCT FROM i.template AND f.params IS NOT DISTINCT FROM i.params
                        AND f.expires_at IS NOT DISTINCT FROM i.expires_at
                        AND f.callback_url IS NOT DISTINCT FROM i.callback_url
                        AND coalesce(f.priority, 0) = coalesce(i.priority, 0))
             ORDER BY i.ord
             LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'external id % already names items[%] of this call with a different request (plan, amount, asset, template and its params, expiry, callback url or priority)',
                                p_external_ids[v_at], v_where::integer - 1
                    USING ERRCODE = 'QT004', HINT = 'Use a new external id for a different movement.';
            END IF;
        END IF;
        v_ids := array_fill(NULL::bigint, ARRAY[v_n]);
        v_created := array_fill(false, ARRAY[v_n]);

        LOOP
            v_round := v_round + 1;
            -- ... and one already in the table answers with its movement when the request is the same
            v_at := NULL;
            FOR v_at, v_where, v_code IN
                SELECT i.ord, r.id,
                       CASE WHEN r.plan = i.plan AND r.amount = i.amount AND r.asset = i.asset
                                 AND r.template_name IS NOT DISTINCT FROM i.template
                                 AND r.template_params IS NOT DISTINCT FROM i.params
                                 AND r.expires_at IS NOT DISTINCT FROM i.expires_at
                                 AND r.callback_url IS NOT DISTINCT FROM i.callback_url
                                 AND r.priority = coalesce(i.priority, 0) THEN 'same' END
                  FROM unnest(p_external_ids, v_plans, p_amounts, p_assets, p_templates, p_params, p_expires_at,
                              p_callback_urls, p_priorities, v_first, v_ids)
                       WITH ORDINALITY AS i(external_id, plan, amount, asset, template, params, expires_at,
                                            callback_url, priority, first, id, ord)
                  JOIN movement_requests r ON r.external_id = i.external_id
                 WHERE i.first = i.ord AND i.id IS NULL
                 ORDER BY i.ord
            LOOP
                IF v_code IS NULL THEN
                    RAISE EXCEPTION 'external id % already names movement % with a different request (plan, amount, asset, template and its params, expiry, callback url or priority)',
                                    p_external_ids[v_at], v_where
                        USING ERRCODE = 'QT004', HINT = 'Use a new external id for a different movement.';
                END IF;
                v_ids[v_at] := v_where::bigint;
            END LOOP;
            v_at := NULL;

            -- 4. the new movements' plans (once per distinct plan), params and callback urls
            IF v_round = 1 THEN
                FOR v_at, v_plan IN
                    SELECT min(i.ord), i.plan
                      FROM unnest(v_plans, v_first, v_ids) WITH ORDINALITY AS i(plan, first, id, ord)
                     WHERE i.first = i.ord AND i.id IS NULL
                     GROUP BY i.plan
                     ORDER BY min(i.ord)
                LOOP
                    PERFORM check_plan(v_call, v_plan);
                END LOOP;
                v_at := NULL;
                IF limit_problem(p_json => p_params, p_text => p_callback_urls) IS NOT NULL THEN
                    -- which item (the rule is limit_problem's; this only finds the first it refuses)
                    SELECT i.ord INTO v_at
                      FROM unnest(p_params, p_callback_urls, v_first, v_ids)
                           WITH ORDINALITY AS i(params, callback_url, first, id, ord)
                     WHERE i.first = i.ord AND i.id IS NULL
                       AND limit_problem(p_json => ARRAY[i.params], p_text => ARRAY[i.callback_url]) IS NOT NULL
                     ORDER BY i.ord
                     LIMIT 1;
                    IF FOUND THEN
                        PERFORM check_limits(v_call, p_json => ARRAY[p_params[v_at]],
                                             p_text => ARRAY[p_callback_urls[v_at]]);
                    END IF;
                    v_at := NULL;
                END IF;
            END IF;

            -- 5. the requests; an external id a concurrent call committed first is skipped here
            --    and answered as a repeat on the next round
            WITH inserted AS (
                INSERT INTO movement_requests (external_id, request_state, template_name, template_params, plan,
                                               amount, asset, priority, callback_url, created_by, open_nodes,
                                               expires_at, created_at, updated_at)
                SELECT i.external_id, 'PENDING_APPROVAL', i.template, i.params, i.plan, i.amount, i.asset,
                       coalesce(i.priority, 0), i.callback_url, v_actor, jsonb_array_length(i.plan -> 'nodes'),
                       i.expires_at, v_now, v_now
                  FROM unnest(p_external_ids, v_plans, p_amounts, p_assets, p_templates, p_params, p_expires_at,
                              p_callback_urls, p_priorities, v_first, v_ids)
                       WITH ORDINALITY AS i(external_id, plan, amount, asset, template, params, expires_at,
                                            callback_url, priority, first, id, ord)
                 WHERE i.first = i.ord AND i.id IS NULL
                 ORDER BY i.ord
                ON CONFLICT (external_id) DO NOTHING
                RETURNING id, external_id
            )
            -- external id -> new movement: a lookup, not a join the planner sizes from a guess
            SELECT jsonb_object_agg(n.external_id, n.id) INTO v_made FROM inserted n;
            IF v_made IS NOT NULL THEN
                SELECT array_agg(coalesce(o.id, CASE WHEN o.first = o.ord THEN (v_made ->> o.external_id)::bigint END)
                                 ORDER BY o.ord),
                       array_agg(o.created OR (o.id IS NULL AND o.first = o.ord AND v_made ? o.external_id)
                                 ORDER BY o.ord)
                  INTO v_ids, v_created
                  FROM unnest(p_external_ids, v_ids, v_created, v_first)
                       WITH ORDINALITY AS o(external_id, id, created, first, ord);
            END IF;

            EXIT WHEN NOT EXISTS (SELECT 1 FROM unnest(v_ids, v_first) WITH ORDINALITY AS i(id, first, ord)
                                   WHERE i.id IS NULL AND i.first = i.ord);
        END LOOP;

        -- the new movements' nodes, then the edges of those whose plans have any
        INSERT INTO movement_request_nodes (request_id, node_key, executor_key, has_side_effect, node_config,
                                            lane, node_state, pending_parents, priority, created_at, updated_at)
        SELECT m.id,
               n.value ->> 'key',
               e.executor_key,
               e.has_side_effect,
               coalesce(n.value -> 'config', '{}'),
               coalesce(n.value -> 'config' ->> 'lane', e.executor_key),
               'PENDING',
               (SELECT count(DISTINCT d) FROM jsonb_array_elements_text(coalesce(n.value -> 'depends_on', '[]')) d),
               coalesce(m.priority, 0),
               v_now, v_now
          FROM unnest(v_ids, v_created, v_plans, p_priorities) WITH ORDINALITY AS m(id, created, plan, priority, ord)
         CROSS JOIN LATERAL jsonb_array_elements(m.plan -> 'nodes') WITH ORDINALITY n
          JOIN executors e ON e.executor_key = n.value ->> 'executor'
         WHERE m.created
         ORDER BY m.ord, n.ordinality;

        INSERT INTO movement_plan_edges (request_id, parent_node_id, child_node_id)
        SELECT DISTINCT m.id, parent.id, child.id
          FROM unnest(v_ids, v_created, v_plans) AS m(id, created, plan)
         CROSS JOIN LATERAL jsonb_array_elements(m.plan -> 'nodes') n
         CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(n.value -> 'depends_on', '[]')) d
          JOIN movement_request_nodes child ON child.request_id = m.id AND child.node_key = n.value ->> 'key'
          JOIN movement_request_nodes parent ON parent.request_id = m.id AND parent.node_key = d.value
         WHERE m.created AND jsonb_path_exists(m.plan, '$.nodes[*].depends_on[*]');

        PERFORM write_audit(array_agg((v_actor, 'request', i.id::text, i.id, 'created', NULL, 'PENDING_APPROVAL',
                                       jsonb_build_object('external_id', i.external_id, 'amount', i.amount,
                                                          'asset', i.asset, 'template', i.template,
                                                          'nodes', jsonb_array_length(i.plan -> 'nodes'))
                                      )::qtg.audit_event ORDER BY i.ord))
          FROM unnest(v_ids, v_created, p_external_ids, p_amounts, p_assets, p_templates, v_plans)
               WITH ORDINALITY AS i(id, created, external_id, amount, asset, template, plan, ord)
         WHERE i.created
        HAVING count(*) > 0;
        PERFORM enqueue_callbacks(array_agg(i.id ORDER BY i.ord), array_agg(NULL::qtg.request_state),
                                  array_agg('{}'::jsonb))
          FROM unnest(v_ids, v_created) WITH ORDINALITY AS i(id, created, ord)
         WHERE i.created
        HAVING count(*) > 0;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_code = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_hint = PG_EXCEPTION_HINT;
        IF NOT p_batch OR v_at IS NULL OR v_code NOT LIKE 'QT%' THEN
            RAISE;
        END IF;
        -- an unprintable id is named escaped (JSON's escapes), not as it is
        v_where := format('create_movements: items[%s]', v_at - 1)
                   || coalesce(format(' (external id %s)',
                                      CASE WHEN unprintable(p_external_ids[v_at])
                                           THEN to_jsonb(left(p_external_ids[v_at], 64))::text
                                           ELSE quote_literal(left(p_external_ids[v_at], 64)) END), '');
        v_message := v_where || ': ' || regexp_replace(v_message, '^create_movements?: ', '');
        v_hint := coalesce(nullif(v_hint, ''),
                           format('Correct items[%s] and send the batch again: nothing of it was written.', v_at - 1));
        CASE v_code
            WHEN 'QT001' THEN RAISE EXCEPTION '%', v_message USING ERRCODE = 'QT001', HINT = v_hint;
            WHEN 'QT002' THEN RAISE EXCEPTION '%', v_message USING ERRCODE = 'QT002', HINT = v_hint;
            WHEN 'QT003' THEN RAISE EXCEPTION '%', v_message USING ERRCODE = 'QT003', HINT = v_hint;
            WHEN 'QT004' THEN RAISE EXCEPTION '%', v_message USING ERRCODE = 'QT004', HINT = v_hint;
            WHEN 'QT005' THEN RAISE EXCEPTION '%', v_message USING ERRCODE = 'QT005', HINT = v_hint;
            ELSE RAISE;
        END CASE;
    END;

    RETURN QUERY
        SELECT i.ord::integer, r.id, r.request_state, i.created
          FROM unnest(v_ids, v_created) WITH ORDINALITY AS i(id, created, ord)
          JOIN movement_requests r ON r.id = coalesce(i.id, v_ids[v_first[i.ord]])
         ORDER BY i.ord;
END
$$;
