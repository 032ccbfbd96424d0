-- lock_rehearsable: the movement p_movement_id locked FOR SHARE while it waits
-- for approval, for a rehearsal's request or record (p_what: what is done,
-- 'asked for', 'recorded'): an approval waits for the caller to commit, and
-- the caller for an approval. QT010 an unknown movement; QT020 one that is
-- not PENDING_APPROVAL (its approval is decided: too late to advise it).
-- Internal.
CREATE OR REPLACE FUNCTION lock_rehearsable(p_movement_id bigint, p_what text) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_state qtg.request_state;
BEGIN
    SELECT r.request_state INTO v_state FROM movement_requests r WHERE r.id = p_movement_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'movement % does not exist', coalesce(p_movement_id::text, 'NULL') USING ERRCODE = 'QT010',
            HINT = 'Check the movement id and the network (schema) you are connected to.';
    END IF;
    IF v_state <> 'PENDING_APPROVAL' THEN
        RAISE EXCEPTION 'movement % is %: a rehearsal is % only while the movement waits for approval',
                        p_movement_id, v_state, p_what
            USING ERRCODE = 'QT020', HINT = 'Rehearse a movement before it is approved.';
    END IF;
END
$$;
