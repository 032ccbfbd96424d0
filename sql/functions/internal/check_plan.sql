-- check_plan: the one validation of a plan, for create_movement (a plan or a
-- template's plan with its params filled in) and for templates (register_template,
-- propose_template, approve_proposal). Raises, and nothing changes:
--   QT001  not an object with a non-empty "nodes" array; a node without a
--          key of 1-64 letters, digits, _ . or -; a key twice; an unknown
--          executor; a config that fails its executor's schema; depends_on
--          not an array, naming an unknown node or the node itself; a cycle
--   QT005  the plan beyond engine_limits (its size, its number of nodes)
-- With p_template, a node's config value that is a placeholder
-- {"$param": name} is not checked against the schema (create_movement checks
-- what it is filled with) and counts as present for "required"; a config
-- that is itself a placeholder is not checked. Placeholders anywhere else
-- (a key, an executor, depends_on) fail as what they are not.
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
    v_keys       text[] := '{}';
    v_parents    text[] := '{}';
    v_children   text[] := '{}';
    v_key        text;
    v_dep        text;
    v_executor   executors;
    v_problem    text;
    v_node_count integer;
BEGIN
    -- IS DISTINCT FROM: a plan without "nodes" gives NULL, which must not pass
    IF jsonb_typeof(p_plan) IS DISTINCT FROM 'object' OR jsonb_typeof(p_plan -> 'nodes') IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION '%: % must be an object with a "nodes" array', p_call, v_what USING ERRCODE = 'QT001';
    END IF;
    v_node_count := jsonb_array_length(p_plan -> 'nodes');
    IF v_node_count = 0 THEN
        RAISE EXCEPTION '%: % must have at least one node', p_call, v_what USING ERRCODE = 'QT001';
    END IF;
    PERFORM check_limits(p_call, p_json => ARRAY[p_plan], p_nodes => v_node_count);

    FOR v_node IN SELECT value FROM jsonb_array_elements(p_plan -> 'nodes') LOOP
        v_key := v_node ->> 'key';
        IF jsonb_typeof(v_node) <> 'object' OR v_key IS NULL OR v_key !~ '^[A-Za-z0-9_.-]{1,64}$' THEN
            RAISE EXCEPTION 'every node needs a "key" of 1-64 letters, digits, _ . or -: %', v_node
                USING ERRCODE = 'QT001';
        END IF;
        IF v_key = ANY (v_keys) THEN
            RAISE EXCEPTION 'node key % appears twice', v_key USING ERRCODE = 'QT001';
        END IF;
        v_keys := v_keys || v_key;

        SELECT * INTO v_executor FROM executors WHERE executor_key = v_node ->> 'executor';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'node %: unknown executor %', v_key, coalesce(v_node ->> 'executor', 'NULL')
                USING ERRCODE = 'QT001', HINT = 'SELECT executor_key FROM executors lists the registered executors.';
        END IF;
        v_config := coalesce(v_node -> 'config', '{}');
        v_schema := v_executor.node_config_schema;
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
        END IF;
        v_problem := validate_node_config(v_schema, v_config);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'node %: config for executor %: %', v_key, v_executor.executor_key, v_problem
                USING ERRCODE = 'QT001';
        END IF;
        IF v_node ? 'depends_on' AND jsonb_typeof(v_node -> 'depends_on') <> 'array' THEN
            RAISE EXCEPTION 'node %: depends_on must be an array of node keys', v_key USING ERRCODE = 'QT001';
        END IF;
    END LOOP;

    FOR v_key, v_dep IN
        SELECT n.value ->> 'key', d.value
          FROM jsonb_array_elements(p_plan -> 'nodes') n,
               jsonb_array_elements_text(coalesce(n.value -> 'depends_on', '[]')) d
    LOOP
        IF NOT v_dep = ANY (v_keys) THEN
            RAISE EXCEPTION 'node % depends on unknown node %', v_key, v_dep USING ERRCODE = 'QT001';
        END IF;
        IF v_dep = v_key THEN
            RAISE EXCEPTION 'node % depends on itself', v_key USING ERRCODE = 'QT001';
        END IF;
        v_parents := v_parents || v_dep;
        v_children := v_children || v_key;
    END LOOP;

    -- a cycle: some node reaches itself (over arrays, so the planner sizes the
    -- walk by the plan's real edge count; a plan without edges has none)
    IF cardinality(v_parents) > 0 THEN
        WITH RECURSIVE edge(parent, child) AS (
            SELECT DISTINCT parent, child FROM unnest(v_parents, v_children) AS e(parent, child)
        ), reach(source, target) AS (
            SELECT parent, child FROM edge
            UNION
            SELECT reach.source, edge.child FROM reach JOIN edge ON edge.parent = reach.target
        )
        SELECT source INTO v_key FROM reach WHERE source = target ORDER BY source LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'plan has a cycle through node %', v_key USING ERRCODE = 'QT001';
        END IF;
    END IF;
    RETURN v_node_count;
END
$$;
