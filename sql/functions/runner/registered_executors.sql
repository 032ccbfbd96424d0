-- registered_executors: the executor registry as a runner may read it, so that
-- a runner refuses to start when an executor it carries is not registered, or
-- is registered with another has_side_effect or node config schema (the admin
-- registers them: `qtg executors register`, register_executor). Reads only.
CREATE OR REPLACE FUNCTION registered_executors()
RETURNS TABLE (executor_key text, has_side_effect boolean, node_config_schema jsonb)
LANGUAGE sql STABLE
AS $$
    SELECT e.executor_key, e.has_side_effect, e.node_config_schema
      FROM executors e
     ORDER BY e.executor_key
$$;
