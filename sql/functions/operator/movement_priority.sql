-- movement_priority: set_priority as a procedure, for CALL in psql: a movement
-- not finished and its unfinished nodes take a new priority (higher: claimed
-- sooner), on one operator's word, with a reason.
--   CALL movement_priority(21, 10, 'payroll is due at noon');
-- Answers the movement's priority in the INOUT parameter priority. The rules,
-- the refusals and the writes are set_priority's.
CREATE OR REPLACE PROCEDURE movement_priority(
    p_movement_id bigint,
    p_priority    integer,
    p_reason      text,
    INOUT priority integer DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT set_priority(p_movement_id, p_priority, p_reason);
$$;
