SET LOCAL ROLE qtg_owner;

CREATE OR REPLACE FUNCTION qtg_admin.audit_events_valid(p_events qtg.audit_event[]) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT cardinality(p_events) BETWEEN 1 AND 65535
       AND coalesce(bool_and(e.entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                                          'callback', 'callback_target', 'limit', 'breaker', 'balance')
                             AND e.actor IS NOT NULL AND e.entity_id IS NOT NULL
                             AND e.action IS NOT NULL AND e.detail IS NOT NULL), false)
      FROM unnest(p_events) AS e;
$$;

-- qtg_owner keeps pg_read_all_stats and pg_signal_backend: roles are shared by
-- every database of the server, and another database of it may be at 0047.
