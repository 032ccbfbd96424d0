-- check_reason: the reason an operator's action must give (reject_proposal,
-- release_quarantine, replay_callback, requeue_node, set_priority, trip_breaker,
-- acknowledge_drift_alert, confirm_balance_baseline): QT002 when it is NULL or
-- blank (the message p_blank, by default '<p_call> needs a reason'; HINT
-- p_hint: what the call's reason should say), QT002 when it holds a
-- character not printed as itself (unprintable: a terminal escape, a line
-- break, a bidirectional override: the reason is shown to other operators),
-- then QT005 when it, or any text
-- of p_text (the call's texts, the reason among them; by default the reason
-- alone), is beyond engine_limits (check_limits). Internal; nothing changes.
CREATE OR REPLACE FUNCTION check_reason(
    p_call   text,
    p_reason text,
    p_hint   text,
    p_blank  text DEFAULT NULL,
    p_text   text[] DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_reason IS NULL OR btrim(p_reason) = '' THEN
        RAISE EXCEPTION '%', coalesce(p_blank, p_call || ' needs a reason') USING ERRCODE = 'QT002', HINT = p_hint;
    END IF;
    IF unprintable(p_reason) THEN
        RAISE EXCEPTION '%: the reason holds a control character or a bidirectional override', p_call
            USING ERRCODE = 'QT002',
                  HINT = 'Give the reason as one line of printable text: it is shown to other operators as it is.';
    END IF;
    PERFORM check_limits(p_call, p_text => coalesce(p_text, ARRAY[p_reason]));
END
$$;
