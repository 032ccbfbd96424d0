-- check_worker: the worker's name a runner procedure is called with (the actor
-- of its audit rows, the claimer it records): refused with QT002 when missing
-- or blank, with QT005 when beyond engine_limits, and nothing changes.
-- Internal.
CREATE OR REPLACE FUNCTION check_worker(p_call text, p_worker text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_worker IS NULL OR btrim(p_worker) = '' THEN
        RAISE EXCEPTION '% needs the worker''s name', p_call USING ERRCODE = 'QT002',
            HINT = 'Name the worker that calls it: it is the actor of the audit rows.';
    END IF;
    PERFORM check_limits(p_call, p_text => ARRAY[p_worker]);
END
$$;
