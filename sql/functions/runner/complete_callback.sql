-- complete_callback: the callback_dispatcher's report of one POST.
--   PENDING (claimed) -> SENT          the receiver answered 2xx
--   PENDING (claimed) -> PENDING       anything else (another status, a timeout,
--                                      no connection, an address refused): due
--                                      again after an exponential backoff with
--                                      jitter, backoff_base_seconds * 2^(attempts-1)
--                                      capped at backoff_cap_seconds, times a random
--                                      factor in [0.5, 1)
--   PENDING (claimed) -> DEAD          the same, after max_attempts attempts or
--                                      past max_age_seconds (callback_settings);
--                                      the dead_callbacks view lists it
-- p_status_code: the HTTP status, or NULL when no response came (p_error then
-- says why). The claim secret claim_callbacks handed out proves the claim: a
-- dispatcher whose lease ran out and whose row was claimed again gets QT030
-- and changes nothing. Refused: QT002 a malformed secret, a status outside
-- 100-599, no status and no error; QT005 an error beyond engine_limits; QT070
-- no such callback; QT030 not the row's current claim. A SENT row is audited
-- (entity 'callback': the status, the target and url, the webhook-id, the
-- attempt and the dispatcher, under the reporting login), so the word of the
-- login that said a receiver has it outlives the row's pruning; so is a DEAD
-- one. Returns the row's new delivery_state. Locks: the row.
CREATE OR REPLACE FUNCTION complete_callback(
    p_callback_id  bigint,
    p_claim_secret text,
    p_status_code  integer,
    p_error        text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock();
    v_set   callback_settings;
    v_row   callback_outbox;
    v_state text;
    v_error text;
    v_wait  numeric;
BEGIN
    PERFORM check_read_committed('complete_callback');
    IF claim_hash(p_claim_secret) IS NULL THEN
        RAISE EXCEPTION 'complete_callback: the claim secret must be the 64 characters claim_callbacks handed out'
            USING ERRCODE = 'QT002';
    END IF;
    IF p_status_code IS NOT NULL AND p_status_code NOT BETWEEN 100 AND 599 THEN
        RAISE EXCEPTION 'complete_callback: an HTTP status is 100 to 599, got %', p_status_code
            USING ERRCODE = 'QT002';
    END IF;
    IF p_status_code IS NULL AND (p_error IS NULL OR btrim(p_error) = '') THEN
        RAISE EXCEPTION 'complete_callback: without a status, say why no response came'
            USING ERRCODE = 'QT002', HINT = 'Give the error: a timeout, a refused connection, an address refused.';
    END IF;
    PERFORM check_limits('complete_callback', p_text => ARRAY[p_error]);

    SELECT * INTO v_row FROM callback_outbox WHERE id = p_callback_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'callback % does not exist', p_callback_id USING ERRCODE = 'QT070',
            HINT = 'Check the callback id and the network (schema) you are connected to.';
    END IF;
    IF v_row.delivery_state <> 'PENDING' OR v_row.claim_hash IS DISTINCT FROM claim_hash(p_claim_secret) THEN
        RAISE EXCEPTION 'callback %: not the current claim', p_callback_id USING ERRCODE = 'QT030',
            HINT = 'The lease ran out and the row was claimed again, or it was never this claim''s: drop the result.';
    END IF;
    SELECT * INTO STRICT v_set FROM callback_settings;

    IF p_status_code BETWEEN 200 AND 299 THEN
        UPDATE callback_outbox
           SET delivery_state = 'SENT', sent_at = v_now, last_status = p_status_code, last_error = NULL,
               claim_hash = NULL
         WHERE id = p_callback_id;
        PERFORM write_audit(ARRAY[(NULL, 'callback', p_callback_id::text, v_row.request_id, 'callback_sent',
                                   'PENDING', 'SENT',
                                   jsonb_build_object('status', p_status_code, 'target', v_row.target_name,
                                                      'url', v_row.target_url, 'webhook_id', v_row.idempotency_key,
                                                      'event', v_row.event_type, 'attempt', v_row.attempts,
                                                      'by', v_row.claimed_by))::qtg.audit_event]);
        RETURN 'SENT';
    END IF;

    v_error := coalesce(nullif(btrim(p_error), ''), format('HTTP %s', p_status_code));
    IF v_row.attempts >= v_set.max_attempts
       OR coalesce(v_row.replayed_at, v_row.created_at)
              <= v_now - make_interval(secs => v_set.max_age_seconds::double precision) THEN
        v_state := 'DEAD';
    ELSE
        v_state := 'PENDING';
        v_wait := least(v_set.backoff_cap_seconds,
                        v_set.backoff_base_seconds * power(2::numeric, least(v_row.attempts - 1, 30)))
                  * (0.5 + random()::numeric / 2);
    END IF;
    UPDATE callback_outbox
       SET delivery_state  = v_state,
           last_status     = p_status_code,
           last_error      = v_error,
           claim_hash      = NULL,
           next_attempt_at = CASE WHEN v_state = 'PENDING'
                                  THEN v_now + make_interval(secs => v_wait::double precision)
                                  ELSE next_attempt_at END,
           dead_at         = CASE WHEN v_state = 'DEAD' THEN v_now END
     WHERE id = p_callback_id;
    IF v_state = 'DEAD' THEN
        PERFORM write_audit(ARRAY[(NULL, 'callback', p_callback_id::text, v_row.request_id, 'callback_dead',
                                   'PENDING', 'DEAD',
                                   jsonb_build_object('attempts', v_row.attempts, 'last_status', p_status_code,
                                                      'why', v_error))::qtg.audit_event]);
    END IF;
    RETURN v_state;
END
$$;
