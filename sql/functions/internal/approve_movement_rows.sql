-- approve_movement_rows: PENDING_APPROVAL -> APPROVED for a set of movements, by
-- the login that calls (session_user): the one body of approve_movement (a set
-- of one) and approve_movements. Internal.
--
-- Locks the movements in id order, then, each movement in input order:
--   - the login that approved it asks again: its state as it is now, nothing
--     written (an approval is idempotent for its approver)
--   - unknown (QT010), not PENDING_APPROVAL (QT020: approved by another
--     login, or past it) or past its expiry (QT020, by decision_clock once
--     the locks are held, which is also the approval's recorded time): an
--     error, and nothing changes for any movement of the set
--   - over a per-movement value limit of a scope one of its side-effect
--     steps falls under (QT062), its amount counted once for each step that
--     pays it there (the network: each step that starts a payment): it could
--     never be claimed; an error, and nothing changes
--   - created by the caller (four eyes): refused, left as it is, and the
--     refusal kept as an `approval_refused` audit row; reported in its row
--     (error_code QT022) and, with p_warn, as a WARNING with SQLSTATE QT022
--     (approve_movement's contract: an error would roll the audit row back)
--   - otherwise APPROVED, through set_movement_states (its audit row and
--     callback), the approver and the time recorded; a movement approved
--     whose rehearsal that counts (counted_rehearsals: the latest, but never
--     the creator's own over another login's failure) failed, or ran on a
--     registry that has changed since (registry_revision), is approved all
--     the same, with a WARNING with SQLSTATE QT025 each (advice, not a
--     refusal: clients report it and carry on), with or without p_warn; one
--     never rehearsed, or rehearsed with success on today's registry (or
--     before revisions were kept), says nothing
-- Returns one row per movement, in input order: its state after the call,
-- and the refusal's code and message where it was refused.
CREATE OR REPLACE FUNCTION approve_movement_rows(p_movement_ids bigint[], p_warn boolean)
RETURNS TABLE (item integer, movement_id bigint, request_state qtg.request_state, error_code text,
               error_message text)
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_actor    text := session_user;
    v_now      timestamptz := clock();
    v_id       bigint;
    v_state    qtg.request_state;
    v_amount   numeric;
    v_payers   bigint;
    v_scope    text;
    v_name     text;
    v_limit    numeric;
    v_expires  timestamptz;
    v_approve  bigint[];
    v_refuse   bigint[];
    v_failed   record;
BEGIN
    PERFORM 1 FROM movement_requests r WHERE r.id = ANY (p_movement_ids) ORDER BY r.id FOR UPDATE;
    -- the decision's time, once the locks are held: an approval that waited
    -- past the expiry is late, and none is recorded before its movement existed
    v_now := decision_clock();

    SELECT i.id INTO v_id
      FROM unnest(p_movement_ids) WITH ORDINALITY AS i(id, ord)
     WHERE NOT EXISTS (SELECT 1 FROM movement_requests r WHERE r.id = i.id)
     ORDER BY i.ord
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'movement % does not exist', v_id USING ERRCODE = 'QT010',
            HINT = 'Check the movement id and the network (schema) you are connected to.';
    END IF;

    -- the first movement that cannot be approved (its approver's own repeat aside)
    SELECT r.id, r.request_state, r.expires_at INTO v_id, v_state, v_expires
      FROM unnest(p_movement_ids) WITH ORDINALITY AS i(id, ord)
      JOIN movement_requests r ON r.id = i.id
     WHERE NOT (r.request_state <> 'PENDING_APPROVAL' AND r.approved_by IS NOT DISTINCT FROM v_actor)
       AND (r.request_state <> 'PENDING_APPROVAL' OR r.expires_at <= v_now)
     ORDER BY i.ord
     LIMIT 1;
    IF FOUND AND v_state <> 'PENDING_APPROVAL' THEN
        RAISE EXCEPTION 'movement % is %, only PENDING_APPROVAL can be approved', v_id, v_state
            USING ERRCODE = 'QT020';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'movement % expired at %', v_id, v_expires USING ERRCODE = 'QT020',
            HINT = 'Create a new movement with a later expiry.';
    END IF;

    -- a movement a per-movement limit of one of its steps' scopes can never let pass
    -- (each movement by its key: sql/README.md, "Statistics lag the work"; none
    -- read at all while no per-movement limit is set). Every side-effect step
    -- pays the movement's amount: a scope's share is the amount times its steps
    -- there (a lane's, a venue's), and the network's the amount times the steps
    -- that start a payment (no side-effect step before them: a mint after its
    -- burn, a withdrawal after its deposit move the same money on), so that
    -- three parallel transfers of 100 are 300 against the limit, not 100
    SELECT r.id, r.amount, o.payers, l.scope, l.name, l.max_per_movement
      INTO v_id, v_amount, v_payers, v_scope, v_name, v_limit
      FROM unnest(p_movement_ids) WITH ORDINALITY AS i(id, ord)
     CROSS JOIN LATERAL (SELECT m.* FROM movement_requests m WHERE m.id = i.id OFFSET 0) r
     CROSS JOIN LATERAL (
           SELECT s.scope, s.name, count(*) AS payers
             FROM movement_request_nodes n
            CROSS JOIN LATERAL (
                  VALUES ('lane', n.lane), ('venue', n.executor_key),
                         ('network', CASE WHEN NOT EXISTS (
                              WITH RECURSIVE up(id) AS (
                                  SELECT e.parent_node_id FROM movement_plan_edges e WHERE e.child_node_id = n.id
                                  UNION
                                  SELECT e.parent_node_id FROM movement_plan_edges e JOIN up ON e.child_node_id = up.id)
                              SELECT 1 FROM up JOIN movement_request_nodes p ON p.id = up.id WHERE p.has_side_effect)
                              THEN '*' END)) AS s(scope, name)
            WHERE n.request_id = r.id AND n.has_side_effect AND s.name IS NOT NULL
            GROUP BY s.scope, s.name) o
      JOIN value_limits l ON l.scope = o.scope AND l.name = o.name AND r.amount * o.payers > l.max_per_movement
     WHERE r.request_state = 'PENDING_APPROVAL'
       AND EXISTS (SELECT 1 FROM value_limits x WHERE x.max_per_movement IS NOT NULL)
     ORDER BY i.ord
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'movement %: its % USDC% pass the per-movement limit of % of % %: it could never start',
                        v_id, trim_scale(v_amount),
                        CASE WHEN v_payers > 1
                             THEN format(', paid by %s steps (%s USDC in all),', v_payers,
                                         trim_scale(v_amount * v_payers))
                             ELSE '' END,
                        trim_scale(v_limit), v_scope, v_name
            USING ERRCODE = 'QT062',
                  HINT = 'Cancel it and create smaller movements, or have the admin raise the limit (set_value_limit).';
    END IF;

    SELECT array_agg(r.id ORDER BY i.ord) FILTER (WHERE r.created_by <> v_actor),
           array_agg(r.id ORDER BY i.ord) FILTER (WHERE r.created_by = v_actor)
      INTO v_approve, v_refuse
      FROM unnest(p_movement_ids) WITH ORDINALITY AS i(id, ord)
     -- each by its key: sql/README.md, "Statistics lag the work"
     CROSS JOIN LATERAL (SELECT m.* FROM movement_requests m WHERE m.id = i.id OFFSET 0) r
     WHERE r.request_state = 'PENDING_APPROVAL';

    IF v_refuse IS NOT NULL THEN
        PERFORM write_audit(array_agg((v_actor, 'request', i.id::text, i.id, 'approval_refused',
                                       'PENDING_APPROVAL', 'PENDING_APPROVAL',
                                       jsonb_build_object('reason', 'the creator cannot approve'))::qtg.audit_event
                                      ORDER BY i.ord))
          FROM unnest(v_refuse) WITH ORDINALITY AS i(id, ord);
        IF p_warn THEN
            RAISE WARNING '%', CASE WHEN cardinality(v_refuse) = 1
                THEN format('movement %s was created by %s, who cannot also approve it; the refusal is recorded in the audit log',
                            v_refuse[1], v_actor)
                ELSE format('movements %s were created by %s, who cannot also approve them; the refusals are recorded in the audit log',
                            array_to_string(v_refuse, ', '), v_actor) END
                USING ERRCODE = 'QT022', HINT = 'A second operator, logged in as themselves, must approve.';
        END IF;
    END IF;
    IF v_approve IS NOT NULL THEN
        PERFORM set_movement_states(v_approve, 'PENDING_APPROVAL',
                                    array_fill('APPROVED'::qtg.request_state, ARRAY[cardinality(v_approve)]),
                                    array_fill(v_actor, ARRAY[cardinality(v_approve)]), p_at => v_now);
        PERFORM notify_work('approved');
        -- advice: the movements approved whose rehearsal that counts failed, or
        -- ran on a registry that has changed since
        FOR v_failed IN
            SELECT a.id AS movement_id, h.id, h.recorded_by, h.recorded_at, h.outcome,
                   h.registry_revision <> v.revision AS changed
              FROM unnest(v_approve) WITH ORDINALITY AS a(id, ord)
             JOIN counted_rehearsals h ON h.movement_id = a.id
             CROSS JOIN registry_revision v
             WHERE h.outcome = 'failed' OR h.registry_revision <> v.revision
             ORDER BY a.ord
        LOOP
            RAISE WARNING 'movement %: its last rehearsal (id %, recorded by % at %) %; approved anyway',
                          v_failed.movement_id, v_failed.id, v_failed.recorded_by, v_failed.recorded_at,
                          CASE WHEN v_failed.outcome = 'failed' AND v_failed.changed
                               THEN 'failed, and the registry has changed since it ran'
                               WHEN v_failed.outcome = 'failed' THEN 'failed'
                               ELSE 'passed on a registry that has changed since' END
                USING ERRCODE = 'QT025',
                      HINT = format('qtg movement show %s prints what the rehearsal found; rehearse it again on '
                                    'today''s registry, or cancel the movement if it must not run.',
                                    v_failed.movement_id);
        END LOOP;
    END IF;

    RETURN QUERY
        SELECT i.ord::integer, r.id, r.request_state,
               CASE WHEN r.id = ANY (v_refuse) THEN 'QT022' END,
               CASE WHEN r.id = ANY (v_refuse)
                    THEN format('movement %s was created by %s, who cannot also approve it; the refusal is recorded in the audit log',
                                r.id, v_actor) END
          FROM unnest(p_movement_ids) WITH ORDINALITY AS i(id, ord)
          JOIN movement_requests r ON r.id = i.id
         ORDER BY i.ord;
END
$$;
