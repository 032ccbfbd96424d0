-- audit_outbox: every audited event, one row each, as write_audit handed it in
-- (audit_batches holds one row per call): its id (the batch's base plus its
-- place in the call), the clock and the login of the call, the event's
-- fields, and when the audit_outbox_promoter chained it into audit_log.
-- Ordered by id, the events of an entity are in the order they happened.
-- A read of one movement's trail should go to audit_log for what has been
-- promoted (indexed by request_id) and here only for what has not
-- (promoted_at IS NULL, indexed): this view unnests every batch it reads.
CREATE VIEW audit_outbox AS
SELECT b.base + e.ord AS id,
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
       AS e(actor, entity, entity_id, request_id, action, from_state, to_state, detail, ord);
COMMENT ON VIEW audit_outbox IS
    'access: reader: the audit trail, for readers and operators (as the table it was); runners do not read it';
