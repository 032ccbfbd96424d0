-- approve_movement: PENDING_APPROVAL -> APPROVED, by the login that calls it.
--
-- Four eyes: the approver is session_user, never a parameter, and must not be
-- the login that created the movement. Such an approval is refused and the
-- refusal is kept: an error would roll back its own audit row, so instead the
-- call writes an `approval_refused` audit row, raises a WARNING with SQLSTATE
-- QT022 and returns the unchanged state (PENDING_APPROVAL); the movement is
-- not touched. Clients treat that warning as a refusal (qtg_runner's procs
-- layer raises it as Refused).
--
-- A movement whose latest rehearsal failed (record_rehearsal), or ran on a
-- registry that has changed since, is approved all the same, with a WARNING
-- with SQLSTATE QT025 naming the rehearsal:
-- advice, not a refusal (the procs layer hands it to the caller as Advice).
--
-- Idempotent for the approver: the login that approved the movement calling
-- again gets its state as it is now (APPROVED, EXECUTING, ...), nothing
-- written. Other refusals are errors that change nothing: an unknown movement
-- (QT010), one not PENDING_APPROVAL (approved by another login, or past it)
-- or already expired (QT020). Lock: the request. The body is
-- approve_movement_rows, the one set-based step approve_movements also takes.
CREATE OR REPLACE FUNCTION approve_movement(p_movement_id bigint)
RETURNS qtg.request_state
LANGUAGE sql
AS $$
    -- the rules and the writes are approve_movement_rows', shared with approve_movements
    SELECT a.request_state FROM approve_movement_rows(ARRAY[p_movement_id], true) a;
$$;
