-- enqueue_callbacks: one callback_outbox row per movement state change, keyed so
-- a state is reported once (a movement enters each state at most once; a
-- movement reopened by a retry of its FAILED nodes, requeue_node, enters them
-- again, and its keys from then on end in -retryN, N the FAILED nodes
-- retried so far, each node of a retry counted (so N grows with every retry,
-- by the nodes it retried): testnet-42-failed, then
-- testnet-42-executing-retry1, testnet-42-completed-retry1; two nodes
-- retried together, -retry2). The one
-- INSERT into callback_outbox and the one definition of a callback's payload.
-- Reads each movement as it is now, in its new state: call it in a statement
-- after the one that moved them. p_from[i] is the state movement i left (NULL
-- at creation), p_details[i] what the callback says about it.
-- A movement that names no receiver (callback_url NULL) gets no row: nobody is
-- told, and its state changes are in the audit log. Earlier versions wrote it
-- a NO_TARGET row per state, five index entries each and kept 90 days, which
-- prune_callbacks still deletes; none is written now.
CREATE OR REPLACE FUNCTION enqueue_callbacks(
    p_movement_ids bigint[],
    p_from         qtg.request_state[],
    p_details      jsonb[]
) RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO callback_outbox (request_id, event_type, idempotency_key, target_url, payload,
                                 delivery_state, next_attempt_at, created_at)
    SELECT r.id,
           'movement.' || lower(r.request_state::text),
           format('%s-%s-%s', current_schema(), r.id, lower(r.request_state::text))
               || coalesce('-retry' || (SELECT nullif(count(*), 0) FROM node_requeues q
                                         WHERE q.request_id = r.id AND q.state = 'APPLIED'
                                           AND q.from_state = 'FAILED'), ''),
           r.callback_url,
           jsonb_build_object(
               'network', current_schema(),
               'movement_id', r.id,
               'external_id', r.external_id,
               'from_state', c.from_state,
               'to_state', r.request_state,
               'amount', r.amount,
               'asset', r.asset,
               'occurred_at', now.at,
               'detail', coalesce(c.detail, '{}')),
           'PENDING',
           now.at,
           now.at
      FROM unnest(p_movement_ids, p_from, p_details) WITH ORDINALITY AS c(id, from_state, detail, ord)
      JOIN movement_requests r ON r.id = c.id
     CROSS JOIN (SELECT clock() AS at) now   -- once, not once a row
     WHERE r.callback_url IS NOT NULL
     ORDER BY c.ord;
$$;
