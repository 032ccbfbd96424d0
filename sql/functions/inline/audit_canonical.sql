-- audit_canonical: an audit_log row as the text its hash is taken over: a
-- jsonb object of every column but the hashes (jsonb's text is the same
-- whatever the order or spacing the object was built with; times are UTC with
-- microseconds, so the session's time zone changes nothing). The login is in
-- it when the row has one: a row promoted before 0035_audit_log_login has
-- none, and its text is what its hash was taken over then.
-- Inlined where it is called (sql/functions/inline/): STABLE, not IMMUTABLE,
-- because to_char and jsonb_build_object are, and PostgreSQL inlines an
-- IMMUTABLE function only when its body is. The result depends on nothing but
-- the row.
CREATE OR REPLACE FUNCTION audit_canonical(p_row audit_log) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT (jsonb_build_object(
               'seq', p_row.seq,
               'outbox_id', p_row.outbox_id,
               'occurred_at', to_char(p_row.occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'actor', p_row.actor,
               'entity', p_row.entity,
               'entity_id', p_row.entity_id,
               'request_id', p_row.request_id,
               'action', p_row.action,
               'from_state', p_row.from_state,
               'to_state', p_row.to_state,
               'detail', p_row.detail,
               'promoted_at', to_char(p_row.promoted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
           )
            || CASE WHEN p_row.login IS NULL THEN '{}'::jsonb
                    ELSE jsonb_build_object('login', p_row.login) END
           )::text;
$$;
