-- depends: 0032_observable_index_order
--
-- The audit outbox holds one row per write_audit call, not one per event.
--
-- audit_batches  the events one call of write_audit hands in (every procedure
--     builds its events a set at a time: a claim of 200 nodes audits 200
--     transitions), in the transaction of the change they record, as one row:
--       base         the events' ids are base + 1 .. base + n, in the order
--                    given; bases come from audit_batch_base_seq, 65,536 apart,
--                    so ids grow in the order the calls were made, as the
--                    outbox's identity did
--       occurred_at  the clock at the call
--       login        the session's login (session_user)
--       events       the events, qtg.audit_event values (at most 65,535; a
--                    larger call is split by write_audit)
--       promoted_at  when audit_outbox_promoter chained them into audit_log
--     One row (and one entry in each index) a call instead of one an event:
--     the audit of a step costs a movement a fraction of a row write.
-- audit_outbox   becomes a view over audit_batches (sql/functions/views), one
--     row per event with the columns and ids the table had, so every reader
--     of the audit trail reads it as before.
-- The rows the table held move into single-event batches with their ids kept
-- (base = id - 1), so audit_log's outbox_id still names them.

SET LOCAL ROLE qtg_owner;

-- the events' shape, checked on every batch: an entity of the engine's,
-- and an actor, an entity id, an action and a detail on every event
CREATE FUNCTION qtg_admin.audit_events_valid(p_events qtg.audit_event[]) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT cardinality(p_events) BETWEEN 1 AND 65535
       AND coalesce(bool_and(e.entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                                          'callback', 'callback_target', 'limit', 'breaker', 'balance')
                             AND e.actor IS NOT NULL AND e.entity_id IS NOT NULL
                             AND e.action IS NOT NULL AND e.detail IS NOT NULL), false)
      FROM unnest(p_events) AS e;
$$;
REVOKE ALL ON FUNCTION qtg_admin.audit_events_valid(qtg.audit_event[]) FROM PUBLIC;

SELECT qtg_admin.apply_per_network($ddl$
CREATE SEQUENCE audit_batch_base_seq AS bigint INCREMENT BY 65536 MINVALUE 0;

CREATE TABLE audit_batches (
    base        bigint PRIMARY KEY CHECK (base >= 0),
    occurred_at timestamptz NOT NULL,
    login       text NOT NULL DEFAULT session_user,
    events      qtg.audit_event[] NOT NULL CHECK (qtg_admin.audit_events_valid(events)),
    promoted_at timestamptz
);
CREATE INDEX audit_batches_unpromoted_idx ON audit_batches (base) WHERE promoted_at IS NULL;
-- the table's own sequence: dropped with it, reset by TRUNCATE ... RESTART IDENTITY
ALTER SEQUENCE audit_batch_base_seq OWNED BY audit_batches.base;

INSERT INTO audit_batches (base, occurred_at, login, events, promoted_at)
SELECT o.id - 1, o.occurred_at, o.login,
       ARRAY[(o.actor, o.entity, o.entity_id, o.request_id, o.action, o.from_state, o.to_state, o.detail)::qtg.audit_event],
       o.promoted_at
  FROM audit_outbox o;

-- the next base lies above every id the table gave out, on a 65,536 boundary
SELECT setval('audit_batch_base_seq', ((coalesce(max(id), 0) / 65536) + 1) * 65536, false) FROM audit_outbox;

DROP TABLE audit_outbox;
$ddl$);
