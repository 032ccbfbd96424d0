-- check_plan: the one validation of a plan, for create_movement (a plan or a
-- template's plan with its params filled in) and for templates (register_template,
-- propose_template, approve_proposal). Raises, and nothing changes:
--   QT001  not an object with a non-empty "nodes" array; a node without a
--          key of 1-64 letters, digits, _ . or -; a key twice; an unknown
--          executor; a config that fails its executor's schema; a config
--          "lane" that is not a string, or names a lane without a row in
--          lane_baselines (no lane falls back to another's pacing unseen);
--          depends_on not an array of node keys (a null or a number in it is
--          refused, not dropped), naming an unknown node or the node itself;
--          a bybit_deposit followed by more than one bybit_withdraw (each
--          verifies its deposit credited before it asks: one credit would let
--          both go); a cycle
--   QT005  the plan beyond engine_limits (max_plan_bytes, max_plan_nodes)
-- With p_template, a node's config value that is a placeholder
-- {"$param": name} is not checked against the schema (create_movement checks
-- what it is filled with) and counts as present for "required"; a config
-- that is itself a placeholder is not checked. Placeholders anywhere else
-- (a key, an executor, depends_on) fail as what they are not.
--
-- The walk for a cycle is Kahn's: nodes are numbered in plan order, the
-- edges kept as arrays sorted by parent (each parent's children a slice), and
-- nodes whose parents are all taken are taken in turn; a node never taken
-- lies on or after a cycle, and walking back through parents not taken finds
-- one on it. It costs one step per node and per edge: a dense plan of 200
-- nodes (19,900 edges) is checked in a few tens of milliseconds, where the
-- transitive closure it replaces took seconds.
-- Returns the number of nodes. Internal.
CREATE OR REPLACE FUNCTION check_plan(p_call text, p_plan jsonb, p_template boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_what       text := CASE WHEN p_template THEN 'template plan' ELSE 'plan' END;
    v_node       jsonb;
    v_config     jsonb;
    v_schema     jsonb;
    v_lane       jsonb;
    v_keys       text[] := '{}';
    v_key        text;
    v_dep        text;
    v_problem    text;
    v_executor   executors;
    v_node_count integer;
    -- the cycle walk
    v_index      jsonb;       -- node key -> its number (plan order)
    v_parents    integer[];   -- edge i: v_parents[i] -> v_children[i], sorted by parent
    v_children   integer[];
    v_first      integer[];   -- the edges of parent p are v_first[p] .. v_first[p + 1] - 1
    v_waiting    integer[];   -- per node: parents not yet taken
    v_queue      integer[];
    v_taken      integer := 0;
    v_next       integer := 1;
    v_at         integer;
    v_edge       integer;
BEGIN
    -- IS DISTINCT FROM: a plan without "nodes" gives NULL, which must not pass
    IF jsonb_typeof(p_plan) IS DISTINCT FROM 'object' OR jsonb_typeof(p_plan -> 'nodes') IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION '%: % must be an object with a "nodes" array', p_call, v_what USING ERRCODE = 'QT001',
            HINT = 'A plan is {"nodes": [{"key": "burn", "executor": "sim", "config": {...}, "depends_on": []}, ...]}.';
    END IF;
    v_node_count := jsonb_array_length(p_plan -> 'nodes');
    IF v_node_count = 0 THEN
        RAISE EXCEPTION '%: % must have at least one node', p_call, v_what USING ERRCODE = 'QT001';
    END IF;
    PERFORM check_limits(p_call, p_plan => p_plan, p_nodes => v_node_count);

    FOR v_node IN SELECT value FROM jsonb_array_elements(p_plan -> 'nodes') LOOP
        v_key := v_node ->> 'key';
        IF jsonb_typeof(v_node) <> 'object' OR jsonb_typeof(v_node -> 'key') IS DISTINCT FROM 'string'
           OR v_key !~ '^[A-Za-z0-9_.-]{1,64}$' THEN
            RAISE EXCEPTION 'every node needs a "key" of 1-64 letters, digits, _ . or -: %', left(v_node::text, 200)
                USING ERRCODE = 'QT001';
        END IF;
        IF v_key = ANY (v_keys) THEN
            RAISE EXCEPTION 'node key % appears twice', v_key USING ERRCODE = 'QT001';
        END IF;
        v_keys := v_keys || v_key;

        SELECT * INTO v_executor FROM executors
         WHERE jsonb_typeof(v_node -> 'executor') = 'string' AND executor_key = v_node ->> 'executor';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'node %: unknown executor %', v_key, coalesce(left(v_node ->> 'executor', 100), 'NULL')
                USING ERRCODE = 'QT001', HINT = 'SELECT executor_key FROM executors lists the registered executors.';
        END IF;
        v_config := coalesce(v_node -> 'config', '{}');
        v_schema := v_executor.node_config_schema;
        v_lane := CASE WHEN jsonb_typeof(v_config) = 'object' THEN v_config -> 'lane' END;
        IF p_template AND jsonb_typeof(v_config) = 'object' THEN
            IF v_config ? '$param' AND (SELECT count(*) FROM jsonb_object_keys(v_config)) = 1 THEN
                CONTINUE;  -- the whole config is a parameter
            END IF;
            -- a placeholder value stands for a value of the right type
            SELECT coalesce(jsonb_object_agg(key, value), '{}') INTO v_config
              FROM jsonb_each(v_config)
             WHERE NOT (jsonb_typeof(value) = 'object' AND value ? '$param'
                        AND (SELECT count(*) FROM jsonb_object_keys(value)) = 1);
            IF jsonb_typeof(v_schema -> 'required') = 'array' THEN
                v_schema := jsonb_set(v_schema, '{required}', coalesce(
                    (SELECT jsonb_agg(r) FROM jsonb_array_elements_text(v_schema -> 'required') r
                      WHERE NOT (v_node -> 'config') ? r OR v_config ? r), '[]'));
            END IF;
            v_lane := v_config -> 'lane';
        END IF;
        v_problem := validate_node_config(v_schema, v_config);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'node %: config for executor %: %', v_key, v_executor.executor_key, v_problem
                USING ERRCODE = 'QT001';
        END IF;
        IF v_node ? 'depends_on' AND jsonb_typeof(v_node -> 'depends_on') <> 'array' THEN
            RAISE EXCEPTION 'node %: depends_on must be an array of node keys', v_key USING ERRCODE = 'QT001';
        END IF;
        SELECT left(d::text, 100) INTO v_dep FROM jsonb_array_elements(v_node -> 'depends_on') d
         WHERE jsonb_typeof(d) <> 'string' LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'node %: depends_on must be an array of node keys, got %', v_key, v_dep
                USING ERRCODE = 'QT001', HINT = 'Name each parent by its "key", as a string.';
        END IF;
        -- the engine paces a node by its config's lane: one without a row would
        -- silently pace as the default lane
        IF v_lane IS NOT NULL AND jsonb_typeof(v_lane) <> 'string' THEN
            RAISE EXCEPTION 'node %: "lane" must be a lane''s name, got %', v_key, left(v_lane::text, 100)
                USING ERRCODE = 'QT001';
        END IF;
        IF v_lane IS NOT NULL AND NOT EXISTS (SELECT 1 FROM lane_baselines WHERE lane = v_lane #>> '{}') THEN
            RAISE EXCEPTION 'node %: unknown lane %', v_key, left(v_lane #>> '{}', 100) USING ERRCODE = 'QT001',
                HINT = 'SELECT lane FROM lane_baselines lists the lanes; a new lane is proposed with propose_lane_baseline.';
        END IF;
    END LOOP;

    -- the dependencies: known, not the node itself (in plan order, the first problem)
    v_index := (SELECT jsonb_object_agg(n.value ->> 'key', n.ord)
                  FROM jsonb_array_elements(p_plan -> 'nodes') WITH ORDINALITY n(value, ord));
    SELECT n.value ->> 'key', d.value INTO v_key, v_dep
      FROM jsonb_array_elements(p_plan -> 'nodes') WITH ORDINALITY n(value, ord),
           jsonb_array_elements_text(coalesce(n.value -> 'depends_on', '[]')) WITH ORDINALITY d(value, ord)
     WHERE NOT v_index ? d.value OR d.value = n.value ->> 'key'
     ORDER BY n.ord, d.ord
     LIMIT 1;
    IF FOUND AND v_dep = v_key THEN
        RAISE EXCEPTION 'node % depends on itself', v_key USING ERRCODE = 'QT001';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'node % depends on unknown node %', v_key, left(v_dep, 100) USING ERRCODE = 'QT001';
    END IF;

    -- one deposit pays one withdrawal: a bybit_withdraw reads each bybit_deposit
    -- it follows credited at the venue before it asks (verify before spending),
    -- and every node moves the movement's amount, so two withdrawals after one
    -- deposit would both be let go by one credit, the second paid from what the
    -- venue held before
    SELECT d.value ->> 'key' INTO v_key
      FROM jsonb_array_elements(p_plan -> 'nodes') d(value)
     WHERE d.value ->> 'executor' = 'bybit_deposit'
       AND (SELECT count(*) FROM jsonb_array_elements(p_plan -> 'nodes') w(value)
             WHERE w.value ->> 'executor' = 'bybit_withdraw'
               AND coalesce(w.value -> 'depends_on', '[]') ? (d.value ->> 'key')) > 1
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'node %: a bybit_deposit is followed by one bybit_withdraw at most, and % has several',
                        v_key, v_key
            USING ERRCODE = 'QT001',
                  HINT = 'Each withdrawal after a deposit verifies that deposit credited: give each its own deposit '
                         'step, or one withdrawal.';
    END IF;

    -- a cycle (Kahn's walk, see the header)
    SELECT coalesce(array_agg(e.parent ORDER BY e.parent, e.child), '{}'),
           coalesce(array_agg(e.child ORDER BY e.parent, e.child), '{}')
      INTO v_parents, v_children
      FROM (SELECT DISTINCT (v_index ->> d.value)::integer AS parent, n.ord::integer AS child
              FROM jsonb_array_elements(p_plan -> 'nodes') WITH ORDINALITY n(value, ord),
                   jsonb_array_elements_text(coalesce(n.value -> 'depends_on', '[]')) d) e;
    IF cardinality(v_parents) = 0 THEN
        RETURN v_node_count;
    END IF;
    SELECT array_agg(w.first ORDER BY w.node), array_agg(w.waiting ORDER BY w.node) FILTER (WHERE w.node <= v_node_count)
      INTO v_first, v_waiting
      FROM (SELECT i.node,
                   1 + coalesce(sum(out.edges) OVER (ORDER BY i.node ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                                0) AS first,
                   coalesce(inc.edges, 0) AS waiting
              FROM generate_series(1, v_node_count + 1) i(node)
              LEFT JOIN (SELECT p, count(*) AS edges FROM unnest(v_parents) p GROUP BY p) out ON out.p = i.node
              LEFT JOIN (SELECT c, count(*) AS edges FROM unnest(v_children) c GROUP BY c) inc ON inc.c = i.node) w;
    v_queue := array_fill(0, ARRAY[v_node_count]);
    FOR v_at IN 1 .. v_node_count LOOP
        IF v_waiting[v_at] = 0 THEN
            v_taken := v_taken + 1;
            v_queue[v_taken] := v_at;
        END IF;
    END LOOP;
    WHILE v_next <= v_taken LOOP
        v_at := v_queue[v_next];
        v_next := v_next + 1;
        FOR v_edge IN v_first[v_at] .. v_first[v_at + 1] - 1 LOOP
            v_waiting[v_children[v_edge]] := v_waiting[v_children[v_edge]] - 1;
            IF v_waiting[v_children[v_edge]] = 0 THEN
                v_taken := v_taken + 1;
                v_queue[v_taken] := v_children[v_edge];
            END IF;
        END LOOP;
    END LOOP;
    IF v_taken < v_node_count THEN
        -- every node not taken has a parent not taken: walking back through
        -- such parents as many steps as there are nodes ends on the cycle
        SELECT i INTO v_at FROM generate_series(1, v_node_count) i WHERE v_waiting[i] > 0 LIMIT 1;
        FOR v_edge IN 1 .. v_node_count LOOP
            SELECT e.parent INTO v_at FROM unnest(v_parents, v_children) e(parent, child)
             WHERE e.child = v_at AND v_waiting[e.parent] > 0 LIMIT 1;
        END LOOP;
        RAISE EXCEPTION 'plan has a cycle through node %', p_plan -> 'nodes' -> (v_at - 1) ->> 'key'
            USING ERRCODE = 'QT001', HINT = 'depends_on must not lead from a node back to itself.';
    END IF;
    RETURN v_node_count;
END
$$;
