-- set_quarantine: sets nodes aside, in their state. Internal; the one place a
-- node is quarantined (quarantine_nodes: a runner's report; claim_recovery_nodes:
-- claims that kept dying with their claimer). The caller holds the nodes' locks.
-- Each node of p_node_ids not already quarantined gets quarantined_at and
-- p_reasons[i]; its claim is closed (no secret proves it any more, and it names
-- no claimer), so no stale report can move it; every claim skips it until an
-- operator releases it (release_quarantine). Its state, lease and intent stay as
-- they are: once released, recovery, the observer or a dispatcher takes it up
-- where it was, under the usual rules. Audited 'quarantined' (actor:
-- p_actors[i], from and to state the node's own, the reason and the lost
-- claims in the detail). Returns how many nodes were quarantined.
CREATE OR REPLACE FUNCTION set_quarantine(p_node_ids bigint[], p_reasons text[], p_actors text[])
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock();
    v_count integer;
BEGIN
    WITH parked AS (
        UPDATE movement_request_nodes node
           SET quarantined_at    = v_now,
               quarantine_reason = u.reason,
               claim_hash        = NULL,
               claimer_worker    = NULL,
               claimer_instance  = NULL,
               updated_at        = v_now
          FROM unnest(p_node_ids, p_reasons, p_actors) WITH ORDINALITY AS u(node_id, reason, actor, ord)
         WHERE node.id = u.node_id
           AND node.quarantined_at IS NULL
        RETURNING node.id, node.request_id, node.node_state, node.lost_claims, u.reason, u.actor, u.ord
    ), audited AS (
        SELECT write_audit(array_agg((p.actor, 'node', p.id::text, p.request_id, 'quarantined',
                                      p.node_state::text, p.node_state::text,
                                      jsonb_build_object('reason', p.reason, 'lost_claims', p.lost_claims)
                                     )::qtg.audit_event ORDER BY p.ord)) AS written
          FROM parked p
    )
    SELECT count(*) INTO v_count FROM parked, audited;
    RETURN v_count;
END
$$;
