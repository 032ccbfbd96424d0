-- movement_approve: approve_movement as a procedure, for CALL in psql:
-- PENDING_APPROVAL -> APPROVED, by another login than the creator's.
--   CALL movement_approve(21);
-- Answers the movement's state in the INOUT parameter movement_state: the
-- creator's own approval is approve_movement's QT022 WARNING (audited) and
-- answers PENDING_APPROVAL, nothing else changed. The rules, the refusals
-- and the writes are approve_movement's.
CREATE OR REPLACE PROCEDURE movement_approve(
    p_movement_id bigint,
    INOUT movement_state qtg.request_state DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT approve_movement(p_movement_id);
$$;
