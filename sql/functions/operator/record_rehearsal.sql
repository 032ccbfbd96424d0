-- record_rehearsal: a rehearsal of a movement recorded on it, for its
-- approver: PENDING_APPROVAL -> PENDING_APPROVAL, a row of
-- movement_rehearsals (the outcome, the summary, the login that recorded it,
-- the clock, the registry's revision) and an audit row (rehearsal_recorded,
-- with the outcome, the rehearsal's id and the revision). Any operator may record one, the movement's creator too:
-- a rehearsal moves nothing, it advises the approval (the movements view
-- shows the one that counts; approve_movement approves a movement whose
-- rehearsal failed with a QT025 WARNING). A movement may be rehearsed again:
-- counted_rehearsals says which counts (the latest, but never the creator's
-- own over another login's failure).
--   p_outcome  'passed' or 'failed'
--   p_summary  the rehearsing tool's report, a JSON object (its "outcome"
--              and "lines", which `qtg movement show` prints)
--   p_registry_revision  the registry_revision rehearsal_input gave the
--              rehearsal (`qtg rehearse` passes it); rehearsal_status says
--              when the registry has changed since (registry_changed), and
--              approve_movement advises so (QT025). Without it, the
--              registry the rehearsal ran on is not known: it is kept NULL
--              and nothing is said either way
-- Refused, and nothing changes: QT002 an outcome that is not 'passed' or
-- 'failed', a summary that is not a JSON object, "lines" that are not a list
-- of texts of at most 1000 characters free of control characters (they are
-- printed to the approver's terminal: no escape may rewrite it); QT005 a summary beyond
-- engine_limits.max_json_bytes (64 KiB); QT010 an unknown movement; QT020 a
-- movement that is not PENDING_APPROVAL (its approval is decided: too late
-- to advise it); QT024 a p_registry_revision that is not the registry's now
-- (it changed while the movement was rehearsed: rehearse again). Locks: the
-- movement (FOR SHARE: an approval waits for the record to commit, a record
-- for an approval), then the registry's revision (FOR SHARE: a registry
-- change waits for the record, or the record for it).
-- Returns the rehearsal's id.
CREATE OR REPLACE FUNCTION record_rehearsal(
    p_movement_id       bigint,
    p_outcome           text,
    p_summary           jsonb,
    p_registry_revision bigint DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_id       bigint;
    v_revision bigint;
BEGIN
    IF p_outcome IS NULL OR p_outcome NOT IN ('passed', 'failed') THEN
        RAISE EXCEPTION 'record_rehearsal: the outcome is passed or failed, got %',
                        coalesce(quote_literal(left(p_outcome, 80)), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Pass the rehearsal''s outcome: passed or failed.';
    END IF;
    IF jsonb_typeof(p_summary) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'record_rehearsal: the summary must be a JSON object, got %',
                        coalesce(jsonb_typeof(p_summary), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Pass the rehearsal''s report, e.g. {"outcome": "passed", "lines": [...]}.';
    END IF;
    PERFORM check_limits('record_rehearsal', p_json => ARRAY[p_summary]);
    -- the lines are printed to the approver's terminal and page: text only
    IF p_summary ? 'lines' AND (jsonb_typeof(p_summary -> 'lines') <> 'array' OR EXISTS (
           SELECT 1 FROM jsonb_array_elements(p_summary -> 'lines') AS l(line)
            WHERE jsonb_typeof(l.line) <> 'string'
               OR length(l.line #>> '{}') > 1000
               OR unprintable(l.line #>> '{}'))) THEN
        RAISE EXCEPTION 'record_rehearsal: the summary''s lines must be a list of texts of at most 1000 printable characters'
            USING ERRCODE = 'QT002',
                  HINT = 'Leave out control characters (terminal escapes, tabs, line breaks): one line a text.';
    END IF;

    PERFORM lock_rehearsable(p_movement_id, 'recorded');
    SELECT v.revision INTO STRICT v_revision FROM registry_revision v FOR SHARE;
    IF p_registry_revision IS NOT NULL AND p_registry_revision <> v_revision THEN
        RAISE EXCEPTION 'record_rehearsal: movement %: the registry changed while it was rehearsed (revision % then, % now)',
                        p_movement_id, p_registry_revision, v_revision
            USING ERRCODE = 'QT024',
                  HINT = 'Rehearse the movement again: the rehearsal ran on a registry that is no longer the one its route is read from.';
    END IF;

    INSERT INTO movement_rehearsals (movement_id, outcome, summary, recorded_by, recorded_at, registry_revision)
    VALUES (p_movement_id, p_outcome, p_summary, session_user, clock(), p_registry_revision)
    RETURNING id INTO v_id;
    PERFORM write_audit(ARRAY[(session_user, 'request', p_movement_id::text, p_movement_id, 'rehearsal_recorded',
                               'PENDING_APPROVAL', 'PENDING_APPROVAL',
                               jsonb_build_object('rehearsal_id', v_id, 'outcome', p_outcome,
                                                  'registry_revision', p_registry_revision))::qtg.audit_event]);
    RETURN v_id;
END
$$;
