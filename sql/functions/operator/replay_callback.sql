-- replay_callback: an operator sends a dead callback again.
--   DEAD | REFUSED -> PENDING, due at once, its attempts counted from 0 and
--   its age (callback_settings.max_age_seconds) from now (replayed_at)
-- The same row, payload and idempotency key (the receiver sees the same
-- webhook-id: a replay is a repeat, never a new event). A REFUSED row is sent
-- only once its url is a registered target (upsert_callback_target), else it
-- is refused again. One operator suffices: a replay moves no money and weakens
-- no rule. Audited 'callback_replayed' with the reason and what it ended.
-- Refused (nothing changes): QT002 no reason; QT005 a reason beyond
-- engine_limits; QT070 no such callback; QT071 the callback is not DEAD or
-- REFUSED. Locks: the row.
CREATE OR REPLACE FUNCTION replay_callback(p_callback_id bigint, p_reason text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock();
    v_row callback_outbox;
BEGIN
    PERFORM check_reason('replay_callback', p_reason,
                         'Say what was wrong and why it may be sent now, e.g. the receiver is back.');

    SELECT * INTO v_row FROM callback_outbox WHERE id = p_callback_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'callback % does not exist', p_callback_id USING ERRCODE = 'QT070',
            HINT = 'The dead_callbacks view lists the callbacks to replay.';
    END IF;
    IF v_row.delivery_state NOT IN ('DEAD', 'REFUSED') THEN
        RAISE EXCEPTION 'callback % is %: only a DEAD or REFUSED callback is replayed', p_callback_id, v_row.delivery_state
            USING ERRCODE = 'QT071', HINT = 'The dead_callbacks view lists the callbacks to replay.';
    END IF;

    UPDATE callback_outbox
       SET delivery_state = 'PENDING', attempts = 0, next_attempt_at = v_now, dead_at = NULL, claim_hash = NULL,
           replayed_at = v_now
     WHERE id = p_callback_id;
    PERFORM write_audit(ARRAY[(session_user, 'callback', p_callback_id::text, v_row.request_id, 'callback_replayed',
                               v_row.delivery_state, 'PENDING',
                               jsonb_build_object('reason', p_reason, 'attempts', v_row.attempts,
                                                  'last_error', v_row.last_error, 'dead_at', v_row.dead_at)
                              )::qtg.audit_event]);
    RETURN 'PENDING';
END
$$;
