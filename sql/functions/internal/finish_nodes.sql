-- finish_nodes: what the new states of some nodes mean for the rest of their
-- movements: the one DAG step and the one settle, for every path that moves a
-- node (submit, observe, recovery, a failed submit, a release, cancel and
-- expiry). Internal. The caller has moved each node of p_node_ids (from-state
-- guarded) and audited it, holds the locks of their movements and then of the
-- nodes, and names who acted on node i (p_actors[i]).
--
--   COMPLETED  each PENDING child loses one pending parent per completed
--              parent; at 0 it becomes READY, or SKIPPED when its movement has
--              a stop requested. Only these nodes' edges are read: no scan of
--              history. An evm_transfer into a venue's deposit address gets
--              its followup (follow_capital_transfers). A bybit_withdraw
--              settles its Transfer (settle_withdrawal_transfers), a
--              cctp_mint its message (settle_mint_messages): QT032 when it
--              may not, which refuses the whole call (a batch call's
--              per-node fallback refuses that node alone: QT050 with the
--              QT032 message).
--   FAILED     every PENDING descendant is SKIPPED: it can never run; and
--              repeated failures trip a breaker (trip_breakers).
--   SKIPPED    nothing more (a stop skips every waiting node itself).
--   READY      back in the dispatch queue: runners are woken, unless a due
--              expiry now applies (recheck_expiry), which skips it.
--   others     nothing.
-- A node moved here is audited by the actor of the node that moved it (for a
-- child of several completed parents, the last of them by id). Each movement's
-- open_nodes and failed_nodes move with its nodes, and every movement left with
-- nothing open settles (settle_movements), by the actor of its last node (by id).
-- Plans: one per statement, kept for the session (force_generic_plan): every
-- statement goes from the given nodes through indexes, whatever the batch's
-- size (a batch of 64 took half the time it took planned per call), and a
-- plan made while the edges and nodes were few is made again when
-- PostgreSQL's statistics of them change (ANALYZE, autovacuum's included).
CREATE OR REPLACE FUNCTION finish_nodes(p_node_ids bigint[], p_actors text[]) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now       timestamptz := clock();
    v_failed    bigint[];           -- the FAILED nodes given
    v_completed bigint[];           -- the COMPLETED nodes given
    v_transfers bigint[];           -- of those, the evm_transfer nodes
    v_withdrawals bigint[];         -- and the bybit_withdraw nodes
    v_mints     bigint[];           -- and the cctp_mint nodes
    v_children  bigint[];           -- their children, by id, each with
    v_parents_done bigint[];        --   how many of its parents completed here
    v_last_parents bigint[];        --   and the last of them (by id)
    v_skipped   bigint[] := '{}';   -- the movement of each node the DAG step skipped
    v_more      bigint[];
    v_readied   boolean := false;
    v_ready     boolean;            -- a node given is back in READY
    v_settle    bigint[];
    v_settle_by text[];
    v_settle_closed integer[];
    v_settle_failed integer[];
    v_movement  bigint;
    v_actor     text;
BEGIN
    SELECT array_agg(n.id ORDER BY n.id) FILTER (WHERE n.node_state = 'FAILED'),
           array_agg(n.id ORDER BY n.id) FILTER (WHERE n.node_state = 'COMPLETED'),
           array_agg(n.id ORDER BY n.id) FILTER (WHERE n.node_state = 'COMPLETED'
                                                   AND n.executor_key = 'evm_transfer'),
           array_agg(n.id ORDER BY n.id) FILTER (WHERE n.node_state = 'COMPLETED'
                                                   AND n.executor_key = 'bybit_withdraw'),
           array_agg(n.id ORDER BY n.id) FILTER (WHERE n.node_state = 'COMPLETED'
                                                   AND n.executor_key = 'cctp_mint'),
           coalesce(bool_or(n.node_state = 'READY'), false)
      INTO v_failed, v_completed, v_transfers, v_withdrawals, v_mints, v_ready
      FROM movement_request_nodes n
     WHERE n.id = ANY (p_node_ids);

    -- repeated failures trip their lane's or venue's breaker (value_limits)
    IF v_failed IS NOT NULL THEN
        PERFORM trip_breakers(v_failed, p_actors[array_position(p_node_ids, v_failed[1])]);
    END IF;

    -- every PENDING descendant of a failed node: SKIPPED
    IF v_failed IS NOT NULL THEN
        WITH RECURSIVE doomed(node_id, failed_node) AS (
            SELECT e.child_node_id, e.parent_node_id
              FROM movement_plan_edges e
             WHERE e.parent_node_id = ANY (v_failed)
            UNION
            SELECT e.child_node_id, d.failed_node
              FROM doomed d
              JOIN movement_plan_edges e ON e.parent_node_id = d.node_id
        ), skipped AS (
            UPDATE movement_request_nodes node
               SET node_state = 'SKIPPED', finished_at = v_now, updated_at = v_now
              FROM (SELECT node_id, min(failed_node) AS failed_node FROM doomed GROUP BY node_id) d
             WHERE node.id = d.node_id
               AND node.node_state = 'PENDING'
            RETURNING node.id, node.request_id, d.failed_node
        ), audited AS (
            SELECT write_audit(array_agg((a.actor, 'node', s.id::text, s.request_id, 'state_changed', 'PENDING',
                                          'SKIPPED', jsonb_build_object('ancestor_failed', s.failed_node)
                                         )::qtg.audit_event ORDER BY s.failed_node, s.id))
              FROM skipped s
              JOIN unnest(p_node_ids, p_actors) AS a(node_id, actor) ON a.node_id = s.failed_node
        )
        SELECT coalesce(array_agg(s.request_id), '{}') INTO v_more
          FROM skipped s, audited;
        v_skipped := v_skipped || v_more;
    END IF;

    -- what a withdrawal or a mint completed on is its own
    IF v_withdrawals IS NOT NULL THEN
        PERFORM settle_withdrawal_transfers(v_withdrawals);
    END IF;
    IF v_mints IS NOT NULL THEN
        PERFORM settle_mint_messages(v_mints);
    END IF;

    -- a transfer that landed in a venue's deposit address: followed from now
    IF v_transfers IS NOT NULL THEN
        PERFORM follow_capital_transfers(v_transfers);
    END IF;

    -- each PENDING child of a completed node loses its completed parents; the
    -- last of them (by id) moves it to READY, or to SKIPPED under a stop. The
    -- children are read from the edges first, and a node with none (the last
    -- step of every movement) ends the step there; the update then reaches
    -- each child by its key (planned from the whole table, a network of a
    -- few thousand nodes read every node to find the PENDING ones)
    IF v_completed IS NOT NULL THEN
        SELECT array_agg(h.child_id ORDER BY h.child_id), array_agg(h.parents_done ORDER BY h.child_id),
               array_agg(h.last_parent ORDER BY h.child_id)
          INTO v_children, v_parents_done, v_last_parents
          FROM (SELECT e.child_node_id AS child_id, count(*) AS parents_done,
                       max(e.parent_node_id) AS last_parent
                  FROM movement_plan_edges e
                 WHERE e.parent_node_id = ANY (v_completed)
                 GROUP BY e.child_node_id) h;
    END IF;
    IF v_children IS NOT NULL THEN
        WITH children AS (
            UPDATE movement_request_nodes child
               SET pending_parents = child.pending_parents - h.parents_done,
                   node_state = CASE
                                    WHEN child.pending_parents > h.parents_done THEN 'PENDING'
                                    WHEN r.stop_reason IS NOT NULL THEN 'SKIPPED'
                                    ELSE 'READY'
                                END::qtg.node_state,
                   finished_at = CASE WHEN child.pending_parents = h.parents_done AND r.stop_reason IS NOT NULL
                                      THEN v_now END,
                   updated_at = v_now
              FROM unnest(v_children, v_parents_done, v_last_parents) AS h(child_id, parents_done, last_parent),
                   movement_requests r
             WHERE child.id = h.child_id
               AND child.node_state = 'PENDING'
               AND r.id = child.request_id
            RETURNING child.id, child.request_id, child.node_state, h.last_parent
        ), audited AS (
            SELECT write_audit(array_agg((a.actor, 'node', c.id::text, c.request_id, 'state_changed', 'PENDING',
                                          c.node_state::text, jsonb_build_object('parent_completed', c.last_parent)
                                         )::qtg.audit_event ORDER BY c.last_parent, c.id))
              FROM children c
              JOIN unnest(p_node_ids, p_actors) AS a(node_id, actor) ON a.node_id = c.last_parent
             WHERE c.node_state <> 'PENDING'
        )
        SELECT coalesce(array_agg(c.request_id) FILTER (WHERE c.node_state = 'SKIPPED'), '{}'),
               coalesce(bool_or(c.node_state = 'READY'), false)
          INTO v_more, v_readied
          FROM children c, audited;
        v_skipped := v_skipped || v_more;
    END IF;

    -- the counters: each node given that finished, and each node the DAG step
    -- skipped, is one open node fewer; each failed one is one failed node more.
    -- A movement left with nothing open settles below, by the actor of its
    -- last node given (by id), its counters written with its new state (one
    -- row write); the others' counters are written here.
    WITH given AS (
        SELECT n.request_id, n.id, a.actor, n.node_state
          FROM unnest(p_node_ids, p_actors) AS a(node_id, actor)
          JOIN movement_request_nodes n ON n.id = a.node_id
         WHERE n.node_state IN ('COMPLETED', 'FAILED', 'SKIPPED')
    ), closed AS (
        SELECT g.request_id, (g.node_state = 'FAILED')::integer AS failed FROM given g
        UNION ALL
        SELECT s.request_id, 0 FROM unnest(v_skipped) AS s(request_id)
    ), per_movement AS (
        SELECT c.request_id, count(*)::integer AS closed, sum(c.failed)::integer AS failed,
               (SELECT g.actor FROM given g WHERE g.request_id = c.request_id ORDER BY g.id DESC LIMIT 1) AS actor,
               (r.request_state = 'EXECUTING' AND r.open_nodes = count(*)) AS settles
          FROM closed c
          JOIN movement_requests r ON r.id = c.request_id
         GROUP BY c.request_id, r.request_state, r.open_nodes
    ), counted AS (
        UPDATE movement_requests r
           SET open_nodes = r.open_nodes - p.closed, failed_nodes = r.failed_nodes + p.failed, updated_at = v_now
          FROM per_movement p
         WHERE r.id = p.request_id
           AND NOT p.settles
    )
    SELECT array_agg(p.request_id ORDER BY p.request_id), array_agg(p.actor ORDER BY p.request_id),
           array_agg(p.closed ORDER BY p.request_id), array_agg(p.failed ORDER BY p.request_id)
      INTO v_settle, v_settle_by, v_settle_closed, v_settle_failed
      FROM per_movement p
     WHERE p.settles;

    -- a node back in READY: an expiry waived for a side effect that never
    -- happened no longer holds
    FOR v_movement, v_actor IN
        SELECT DISTINCT ON (n.request_id) n.request_id, a.actor
          FROM unnest(p_node_ids, p_actors) AS a(node_id, actor)
          JOIN movement_request_nodes n ON n.id = a.node_id
         WHERE v_ready AND n.node_state = 'READY'
         ORDER BY n.request_id, a.node_id DESC
    LOOP
        IF NOT recheck_expiry(v_movement, v_actor) THEN
            v_readied := true;
        END IF;
    END LOOP;
    IF v_readied THEN
        PERFORM notify_work('ready');
    END IF;

    IF v_settle IS NOT NULL THEN
        PERFORM settle_movements(v_settle, v_settle_by, v_settle_closed, v_settle_failed);
    END IF;
END
$$;
