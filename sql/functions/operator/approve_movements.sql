-- approve_movements: PENDING_APPROVAL -> APPROVED for up to 1,000 movements in
-- one call and one transaction, by the login that calls (session_user).
--
-- Every rule of approve_movement holds for each movement, through the same
-- step (approve_movement_rows): four eyes per movement, the creator's own
-- refused, left PENDING_APPROVAL and the refusal kept as an
-- `approval_refused` audit row, reported in its row (error_code QT022,
-- no WARNING: the others are approved); the approver's own repeat answers
-- with the state as it is now, nothing written. A movement approved whose
-- latest rehearsal failed, or ran on a registry that has changed since: a
-- WARNING with SQLSTATE QT025 each (advice: it is approved). An unknown movement
-- (QT010), one not PENDING_APPROVAL for another login's approval or past
-- it, or one past its expiry (QT020) refuses the whole batch, and nothing
-- changes. QT002: p_movement_ids NULL, empty, over 1000, with a NULL or a
-- movement twice. Locks: the movements in id order.
-- Returns one row per movement, in input order: its state after the call,
-- and error_code / error_message where it was refused.
CREATE OR REPLACE FUNCTION approve_movements(p_movement_ids bigint[])
RETURNS TABLE (movement_id bigint, request_state qtg.request_state, error_code text, error_message text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    IF coalesce(cardinality(p_movement_ids), 0) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'approve_movements: p_movement_ids must hold 1 to 1000 movements, got %',
                        coalesce(cardinality(p_movement_ids), 0)
            USING ERRCODE = 'QT002', HINT = 'Split a larger batch into calls of at most 1000 movements.';
    END IF;
    IF array_position(p_movement_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'approve_movements: p_movement_ids[%] is NULL', array_position(p_movement_ids, NULL)
            USING ERRCODE = 'QT002';
    END IF;
    IF (SELECT count(DISTINCT i) FROM unnest(p_movement_ids) i) <> cardinality(p_movement_ids) THEN
        RAISE EXCEPTION 'approve_movements: a movement appears twice in p_movement_ids' USING ERRCODE = 'QT002',
            HINT = 'Name each movement once.';
    END IF;
    RETURN QUERY
        SELECT a.movement_id, a.request_state, a.error_code, a.error_message
          FROM approve_movement_rows(p_movement_ids, false) a
         ORDER BY a.item;
END
$$;
