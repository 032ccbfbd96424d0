-- claim_callbacks: the callback_dispatcher's claim of due callbacks.
--   PENDING, due (next_attempt_at <= clock()) -> PENDING, leased: attempts + 1,
--     next_attempt_at = now + callback_settings.lease_seconds (a dispatcher that
--     dies holding a row loses it when the lease runs out: it is due again,
--     with the same idempotency key, so a receiver sees a repeat only ever
--     under the same webhook-id), a claim secret (the row keeps its hash)
--   PENDING, due, no enabled target registered with the row's target_url
--     -> REFUSED, never sent (last_error says why)
--   PENDING, due, max_attempts claims spent or older than max_age_seconds
--     (from its creation, or from its last replay) -> DEAD (a dispatcher that
--     kept dying on it, or a backlog too old)
-- Up to p_max rows, oldest due first, FOR UPDATE SKIP LOCKED: two dispatchers
-- never claim one row, nor wait for each other. Reads the partial index of
-- PENDING rows (callback_outbox_due_idx). Returns what the POST needs: the
-- payload, the idempotency key (webhook-id), the url the row was queued for
-- (never another: a row whose target changed its url or was disabled after
-- the first read stays leased and unsent, and is judged again when the lease
-- runs out), whether it may be private, where its secret is (never the
-- secret: it is not in the database), and the claim's lease (callback_settings.lease_seconds): a POST the
-- dispatcher starts must end within it, or another claim may send it again.
-- Locks: callback rows only.
CREATE OR REPLACE FUNCTION claim_callbacks(p_worker text, p_max integer DEFAULT 20)
RETURNS TABLE (
    callback_id     bigint,
    movement_id     bigint,
    event_type      text,
    idempotency_key text,
    payload         jsonb,
    target_name     text,
    url             text,
    allow_private   boolean,
    secret_ref      text,
    attempt         integer,
    lease_seconds   numeric,
    claim_secret    text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_set     callback_settings;
    v_events  qtg.audit_event[];
    v_ids     bigint[];
    v_targets text[];
BEGIN
    PERFORM check_read_committed('claim_callbacks');
    PERFORM check_worker('claim_callbacks', p_worker);
    PERFORM check_args('claim_callbacks', p_max => p_max, p_max_limit => 1000);
    SELECT * INTO STRICT v_set FROM callback_settings;

    -- the due rows, locked; those that will never be sent end here
    WITH due AS (
        SELECT o.id, o.attempts, coalesce(o.replayed_at, o.created_at) AS aged_from, t.target_name AS target
          FROM callback_outbox o
          LEFT JOIN callback_targets t ON t.url = o.target_url AND t.enabled
         WHERE o.delivery_state = 'PENDING' AND o.next_attempt_at <= v_now
         ORDER BY o.next_attempt_at, o.id
         LIMIT p_max
           FOR UPDATE OF o SKIP LOCKED
    ), decided AS (
        SELECT d.id, d.target,
               CASE WHEN d.target IS NULL THEN 'REFUSED'
                    WHEN d.attempts >= v_set.max_attempts
                      OR d.aged_from <= v_now - make_interval(secs => v_set.max_age_seconds::double precision)
                    THEN 'DEAD'
                    ELSE 'CLAIM' END AS verdict
          FROM due d
    ), ended AS (
        UPDATE callback_outbox o
           SET delivery_state = d.verdict,
               claim_hash     = NULL,
               dead_at        = v_now,
               last_error     = CASE d.verdict
                   WHEN 'REFUSED' THEN format('%s is not the url of an enabled callback target: never sent',
                                              left(o.target_url, 200))
                   ELSE format('dead: %s attempts made%s; the last: %s', o.attempts,
                               CASE WHEN o.attempts >= v_set.max_attempts THEN ''
                                    ELSE ', older than callback_settings.max_age_seconds' END,
                               coalesce(left(o.last_error, 1000), 'no answer recorded')) END
          FROM decided d
         WHERE o.id = d.id AND d.verdict <> 'CLAIM'
        RETURNING o.id, o.request_id, o.delivery_state, o.last_error
    )
    SELECT (SELECT array_agg((NULL, 'callback', e.id::text, e.request_id, 'callback_' || lower(e.delivery_state),
                              'PENDING', e.delivery_state, jsonb_build_object('why', e.last_error)
                             )::qtg.audit_event ORDER BY e.id) FROM ended e),
           (SELECT array_agg(d.id ORDER BY d.id) FROM decided d WHERE d.verdict = 'CLAIM'),
           (SELECT array_agg(d.target ORDER BY d.id) FROM decided d WHERE d.verdict = 'CLAIM')
      INTO v_events, v_ids, v_targets;
    IF v_events IS NOT NULL THEN
        PERFORM write_audit(v_events);
    END IF;

    RETURN QUERY
    WITH secrets AS (
        SELECT c.id, c.target, claim_secret() AS secret FROM unnest(v_ids, v_targets) AS c(id, target)
    ), claimed AS (
        UPDATE callback_outbox o
           SET attempts        = o.attempts + 1,
               next_attempt_at = v_now + make_interval(secs => v_set.lease_seconds::double precision),
               claim_hash      = claim_hash(s.secret),
               claimed_by      = p_worker,
               target_name     = s.target,
               last_attempt_at = v_now
          FROM secrets s
         WHERE o.id = s.id
        RETURNING o.id, o.request_id, o.event_type, o.idempotency_key, o.payload, o.attempts, o.target_url,
                  s.target, s.secret
    )
    SELECT c.id, c.request_id, c.event_type, c.idempotency_key, c.payload, c.target,
           c.target_url, t.allow_private, t.secret_ref, c.attempts, v_set.lease_seconds, c.secret
      FROM claimed c
      JOIN callback_targets t ON t.target_name = c.target AND t.url = c.target_url AND t.enabled
     ORDER BY c.id;
END
$$;
