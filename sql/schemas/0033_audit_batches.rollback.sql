-- audit_batches back into one audit_outbox row per event, ids kept.
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP VIEW IF EXISTS audit_outbox;
CREATE TABLE audit_outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at timestamptz NOT NULL,
    actor       text NOT NULL,
    entity      text NOT NULL,
    entity_id   text NOT NULL,
    request_id  bigint,
    action      text NOT NULL,
    from_state  text,
    to_state    text,
    detail      jsonb NOT NULL DEFAULT '{}',
    promoted_at timestamptz,
    login       text NOT NULL DEFAULT session_user,
    CONSTRAINT audit_outbox_entity_check
        CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                          'callback', 'callback_target', 'limit', 'breaker', 'balance'))
);
CREATE INDEX audit_outbox_unpromoted_idx ON audit_outbox (id) WHERE promoted_at IS NULL;
CREATE INDEX audit_outbox_request_idx ON audit_outbox (request_id) WHERE request_id IS NOT NULL;

INSERT INTO audit_outbox (id, occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state,
                          detail, promoted_at, login)
OVERRIDING SYSTEM VALUE
SELECT b.base + e.ord, b.occurred_at, e.actor, e.entity, e.entity_id, e.request_id, e.action, e.from_state,
       e.to_state, e.detail, b.promoted_at, b.login
  FROM audit_batches b
 CROSS JOIN LATERAL unnest(b.events) WITH ORDINALITY
       AS e(actor, entity, entity_id, request_id, action, from_state, to_state, detail, ord)
 ORDER BY b.base, e.ord;
SELECT setval(pg_get_serial_sequence('audit_outbox', 'id'), coalesce(max(id), 0) + 1, false) FROM audit_outbox;

DROP TABLE audit_batches;  -- and audit_batch_base_seq, which it owns
$ddl$);

DROP FUNCTION qtg_admin.audit_events_valid(qtg.audit_event[]);
