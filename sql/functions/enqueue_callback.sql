-- enqueue_callback: one callback_outbox row per request state change, keyed so a
-- state is reported once (a request enters each state at most once). Internal.
CREATE OR REPLACE FUNCTION enqueue_callback(
    p_request movement_requests,
    p_from    qtg.request_state,
    p_detail  jsonb DEFAULT '{}'
) RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    INSERT INTO callback_outbox (request_id, event_type, idempotency_key, target_url, payload,
                                 delivery_state, next_attempt_at, created_at)
    VALUES (
        p_request.id,
        'movement.' || lower(p_request.request_state::text),
        format('%s-%s-%s', current_schema(), p_request.id, lower(p_request.request_state::text)),
        p_request.callback_url,
        jsonb_build_object(
            'network', current_schema(),
            'movement_id', p_request.id,
            'external_id', p_request.external_id,
            'from_state', p_from,
            'to_state', p_request.request_state,
            'amount', p_request.amount,
            'asset', p_request.asset,
            'occurred_at', clock(),
            'detail', coalesce(p_detail, '{}')),
        CASE WHEN p_request.callback_url IS NULL THEN 'NO_TARGET' ELSE 'PENDING' END,
        clock(),
        clock());
$$;
