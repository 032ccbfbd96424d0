-- set_callback_settings: the network's callback delivery and retention rules.
-- An admin step (SECURITY INVOKER, no grant), audited, as set_balance_settings.
--   p_max_attempts          POSTs before a callback is DEAD (12; 1..1000)
--   p_max_age_seconds       age past which an undelivered callback is DEAD
--                           (259200: 3 days; above 0, at most 100 years)
--   p_backoff_base_seconds  the first retry's wait, doubled each attempt
--                           (5; above 0, at most 3600)
--   p_backoff_cap_seconds   the longest wait between attempts (3600; at least
--                           the base, at most 86400)
--   p_lease_seconds         how long a claim holds a callback (60; 40..3600:
--                           the dispatcher starts no POST that could outlast
--                           its claim, and one may take 35 s)
--   p_keep_days             days a SENT or NO_TARGET callback is kept before
--                           prune_callbacks deletes it (90; 0 keeps them all,
--                           at most 36500)
-- NULL keeps a setting as it is. QT005 a number that is NaN, Infinity or
-- beyond its bound, or a cap below the base; nothing changes then. Audited
-- (entity 'callback', id 'settings', action 'callback_settings_changed', the
-- values before and after) when something changed. Takes effect at the next
-- claim, report or prune.
CREATE OR REPLACE FUNCTION set_callback_settings(
    p_max_attempts         integer DEFAULT NULL,
    p_max_age_seconds      numeric DEFAULT NULL,
    p_backoff_base_seconds numeric DEFAULT NULL,
    p_backoff_cap_seconds  numeric DEFAULT NULL,
    p_lease_seconds        numeric DEFAULT NULL,
    p_keep_days            integer DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_before callback_settings;
    v_after  callback_settings;
BEGIN
    PERFORM check_number('set_callback_settings', 'the attempts', p_max_attempts, 1, 1000);
    PERFORM check_number('set_callback_settings', 'the largest age in seconds', p_max_age_seconds, 0, 3153600000, true);
    PERFORM check_number('set_callback_settings', 'the first wait in seconds', p_backoff_base_seconds, 0, 3600, true);
    PERFORM check_number('set_callback_settings', 'the longest wait in seconds', p_backoff_cap_seconds, 0, 86400, true);
    PERFORM check_number('set_callback_settings', 'the lease in seconds', p_lease_seconds, 40, 3600);
    PERFORM check_number('set_callback_settings', 'the days a callback is kept', p_keep_days, 0, 36500);
    SELECT * INTO STRICT v_before FROM callback_settings FOR UPDATE;
    IF coalesce(p_backoff_cap_seconds, v_before.backoff_cap_seconds)
       < coalesce(p_backoff_base_seconds, v_before.backoff_base_seconds) THEN
        RAISE EXCEPTION 'set_callback_settings: the longest wait (% s) is below the first wait (% s)',
                        coalesce(p_backoff_cap_seconds, v_before.backoff_cap_seconds),
                        coalesce(p_backoff_base_seconds, v_before.backoff_base_seconds)
            USING ERRCODE = 'QT005', HINT = 'Give a longest wait at least the first one, or both.';
    END IF;
    UPDATE callback_settings
       SET max_attempts = coalesce(p_max_attempts, max_attempts),
           max_age_seconds = coalesce(p_max_age_seconds, max_age_seconds),
           backoff_base_seconds = coalesce(p_backoff_base_seconds, backoff_base_seconds),
           backoff_cap_seconds = coalesce(p_backoff_cap_seconds, backoff_cap_seconds),
           lease_seconds = coalesce(p_lease_seconds, lease_seconds),
           keep_days = coalesce(p_keep_days, keep_days)
    RETURNING * INTO v_after;
    IF v_before IS DISTINCT FROM v_after THEN
        PERFORM write_audit(ARRAY[(NULL, 'callback', 'settings', NULL, 'callback_settings_changed', NULL, NULL,
                                   jsonb_build_object('before', to_jsonb(v_before) - 'only_row',
                                                      'after', to_jsonb(v_after) - 'only_row'))::qtg.audit_event]);
    END IF;
END
$$;
