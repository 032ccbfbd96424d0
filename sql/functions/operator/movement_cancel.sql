-- movement_cancel: cancel_movement as a procedure, for CALL in psql:
-- PENDING_APPROVAL | APPROVED -> CANCELLED at once; EXECUTING -> CANCELLED once
-- its in-flight nodes settle (stop requested, waiting nodes SKIPPED).
--   CALL movement_cancel(21, 'sent twice');
-- Answers the movement's state in the INOUT parameter movement_state. The
-- rules, the refusals and the writes are cancel_movement's.
CREATE OR REPLACE PROCEDURE movement_cancel(
    p_movement_id bigint,
    p_reason      text DEFAULT NULL,
    INOUT movement_state qtg.request_state DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT cancel_movement(p_movement_id, p_reason);
$$;
