-- rehearsal_input: what a rehearsal of a movement needs, as one JSON object
-- read in one snapshot (the function is STABLE: every statement in it reads
-- the snapshot of the call, so no registry change is half seen), for
-- `qtg rehearse` to replay the movement in a throwaway database:
--   movement  {id, external_id, amount (a string: exact), asset, state,
--             priority, expires_at}
--   plan      {"nodes": [{key, executor, config, depends_on}, ...]}: the plan
--             the movement was created from (a template's, its params filled
--             in), each node with its four fields, in plan order: what
--             create_movement takes again to make the same nodes, configs
--             and edges. Rebuilt from the nodes and edges when the stored
--             plan has no "nodes" array (create_movement always stores one)
--   registry  {table: [row, ...]}: every row of each table of
--             rehearsal_registry_tables(), as to_jsonb gives it, in its
--             primary key's order (an exchange venue without its
--             request_salt: each database has its own, the throwaway one
--             makes its own); what load_rehearsal_registry takes
--   registry_revision  the registry's revision those rows are (0066): what
--             record_rehearsal is given back, so that a rehearsal is
--             recorded against the registry it ran on
-- Movements, nodes, intents, nonces, audit, heartbeats, proposals,
-- callbacks and their targets are not in it, nor anything secret (the
-- registry holds the NAMES of environment variables and signer ids, never
-- a URL or a key). Any operator of the network may call it, the movement's
-- creator too; it writes nothing. QT010 an unknown movement. No lock.
CREATE OR REPLACE FUNCTION rehearsal_input(p_movement_id bigint) RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_movement movement_requests;
    v_plan     jsonb;
    v_registry jsonb := '{}';
    v_table    text;
    v_order    text;
    v_rows     jsonb;
BEGIN
    SELECT * INTO v_movement FROM movement_requests r WHERE r.id = p_movement_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'movement % does not exist', p_movement_id USING ERRCODE = 'QT010',
            HINT = 'Check the movement id and the network (schema) you are connected to.';
    END IF;

    -- the stored plan, each node with its four fields as create_movement reads them
    SELECT jsonb_build_object('nodes', jsonb_agg(jsonb_build_object(
               'key', n.value -> 'key',
               'executor', n.value -> 'executor',
               'config', coalesce(n.value -> 'config', '{}'),
               'depends_on', coalesce(n.value -> 'depends_on', '[]')) ORDER BY n.ordinality))
      INTO v_plan
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(v_movement.plan -> 'nodes') = 'array'
                                     THEN v_movement.plan -> 'nodes' ELSE '[]' END) WITH ORDINALITY n
    HAVING count(*) > 0;
    IF v_plan IS NULL THEN
        -- rebuilt from the nodes (in the order they were made) and their edges
        SELECT jsonb_build_object('nodes', jsonb_agg(jsonb_build_object(
                   'key', n.node_key,
                   'executor', n.executor_key,
                   'config', n.node_config,
                   'depends_on', (SELECT coalesce(jsonb_agg(p.node_key ORDER BY p.id), '[]')
                                    FROM movement_plan_edges e
                                    JOIN movement_request_nodes p ON p.id = e.parent_node_id
                                   WHERE e.child_node_id = n.id)) ORDER BY n.id))
          INTO v_plan
          FROM movement_request_nodes n
         WHERE n.request_id = p_movement_id;
    END IF;

    FOREACH v_table IN ARRAY rehearsal_registry_tables() LOOP
        SELECT string_agg(format('t.%I', a.attname), ', ' ORDER BY k.ord) INTO v_order
          FROM pg_index i
         CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE i.indrelid = v_table::regclass AND i.indisprimary;
        EXECUTE format('SELECT coalesce(jsonb_agg(to_jsonb(t) - ''request_salt'' ORDER BY %s), ''[]'') FROM %I t',
                       coalesce(v_order, 't::text'), v_table)
           INTO v_rows;
        v_registry := v_registry || jsonb_build_object(v_table, v_rows);
    END LOOP;

    RETURN jsonb_build_object(
        'movement', jsonb_build_object(
            'id', v_movement.id,
            'external_id', v_movement.external_id,
            'amount', trim_scale(v_movement.amount)::text,
            'asset', v_movement.asset,
            'state', v_movement.request_state,
            'priority', v_movement.priority,
            'expires_at', v_movement.expires_at),
        'plan', v_plan,
        'registry', v_registry,
        'registry_revision', (SELECT v.revision FROM registry_revision v));
END
$$;
