-- audit_outbox: the audit trail, every audited event one row each: what the
-- audit_outbox_promoter has chained into audit_log (promoted_at set) and what
-- still waits in audit_batches (promoted_at NULL; audit_batches holds one row
-- per write_audit call). Each row: its id (the batch's base plus its place in
-- the call; audit_log's outbox_id), the clock and the login of the call, the
-- event's fields, and when it was promoted. Ordered by id, the events of an
-- entity are in the order they happened. One statement reads both halves
-- under one snapshot, so an event being promoted shows once, never twice or
-- not at all. A filter on request_id reaches audit_log's request index; the
-- waiting half unnests only the unpromoted batches (a partial index). The
-- rows promoted before 0035_audit_log_login have no login of their own: it
-- is read from their batch, kept for that.
CREATE VIEW audit_outbox AS
SELECT l.outbox_id AS id,
       l.occurred_at,
       l.actor,
       l.entity,
       l.entity_id,
       l.request_id,
       l.action,
       l.from_state,
       l.to_state,
       l.detail,
       l.promoted_at,
       coalesce(l.login, (SELECT b.login FROM audit_batches b
                           WHERE b.base < l.outbox_id
                           ORDER BY b.base DESC LIMIT 1)) AS login
  FROM audit_log l
UNION ALL
SELECT b.base + e.ord,
       b.occurred_at,
       e.actor,
       e.entity,
       e.entity_id,
       e.request_id,
       e.action,
       e.from_state,
       e.to_state,
       e.detail,
       b.promoted_at,
       b.login
  FROM audit_batches b
 CROSS JOIN LATERAL unnest(b.events) WITH ORDINALITY
       AS e(actor, entity, entity_id, request_id, action, from_state, to_state, detail, ord)
 WHERE b.promoted_at IS NULL;
COMMENT ON VIEW audit_outbox IS
    'access: reader: the audit trail, for readers and operators (as the table it was); runners do not read it';
