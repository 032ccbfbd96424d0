-- prune_callbacks: the callbacks done with more than the network's
-- callback_settings.keep_days ago deleted, oldest first (by
-- callback_outbox_done_idx), up to p_max a call: SENT ones by when they were
-- sent, NO_TARGET ones (earlier versions wrote them for a movement that named
-- no receiver) by when they were written. Kept whatever their age: PENDING (being delivered), DEAD and
-- REFUSED (an operator's to replay) rows. keep_days 0 deletes nothing. The
-- callback_dispatcher calls it after each tick, as p_worker. Audited (entity
-- 'callback', action 'callbacks_pruned') with how many of each state and the
-- range of ids and times, when something was deleted. Returns how many rows
-- were deleted. QT002 no worker name or p_max outside 1..10000.
-- Locks: the rows deleted (SKIP LOCKED; no one else changes a SENT or
-- NO_TARGET row, a replay takes only DEAD and REFUSED ones).
CREATE OR REPLACE FUNCTION prune_callbacks(p_worker text, p_max integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := clock();
    v_days integer;
    v_gone record;
BEGIN
    PERFORM check_read_committed('prune_callbacks');
    PERFORM check_worker('prune_callbacks', p_worker);
    PERFORM check_args('prune_callbacks', p_max => p_max, p_max_limit => 10000);
    SELECT s.keep_days INTO STRICT v_days FROM callback_settings s;
    IF v_days = 0 THEN
        RETURN 0;
    END IF;

    WITH old AS (
        SELECT c.id
          FROM callback_outbox c
         WHERE c.delivery_state IN ('SENT', 'NO_TARGET')
           AND coalesce(c.sent_at, c.created_at) < v_now - make_interval(days => v_days)
         ORDER BY coalesce(c.sent_at, c.created_at)
         LIMIT p_max
           FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM callback_outbox c USING old WHERE c.id = old.id
        RETURNING c.id, c.delivery_state, coalesce(c.sent_at, c.created_at) AS done_at
    )
    SELECT count(*) AS n, count(*) FILTER (WHERE deleted.delivery_state = 'SENT') AS sent,
           min(deleted.id) AS first_id, max(deleted.id) AS last_id,
           min(deleted.done_at) AS first_at, max(deleted.done_at) AS last_at
      INTO v_gone
      FROM deleted;

    IF v_gone.n > 0 THEN
        PERFORM write_audit(ARRAY[(p_worker, 'callback', 'outbox', NULL, 'callbacks_pruned', NULL, NULL,
                                   jsonb_build_object('callbacks', v_gone.n, 'sent', v_gone.sent,
                                                      'no_target', v_gone.n - v_gone.sent,
                                                      'first_id', v_gone.first_id, 'last_id', v_gone.last_id,
                                                      'first_done_at', v_gone.first_at,
                                                      'last_done_at', v_gone.last_at,
                                                      'keep_days', v_days))::qtg.audit_event]);
    END IF;
    RETURN v_gone.n;
END
$$;
