-- check_limits: raises what limit_problem finds in the inputs a call names
-- (QT005, with the call's name, what was too large and the limit), and
-- nothing changes. Internal. check_args and check_claim_args refuse what is
-- not positive, or negative, as QT002 before this. A call that names no
-- input but NULLs (a report without a retry hint) reads no limits at all.
CREATE OR REPLACE FUNCTION check_limits(
    p_call  text,
    p_lease numeric DEFAULT NULL,
    p_wait  numeric DEFAULT NULL,
    p_json  jsonb[] DEFAULT NULL,
    p_text  text[] DEFAULT NULL,
    p_nodes integer DEFAULT NULL,
    p_plan  jsonb DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_problem text;
BEGIN
    IF num_nonnulls(p_lease, p_wait, p_json, p_text, p_nodes, p_plan) = 0 THEN
        RETURN;  -- NULLs are not checked
    END IF;
    v_problem := limit_problem(p_lease, p_wait, p_json, p_text, p_nodes, p_plan);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%: %', p_call, v_problem USING ERRCODE = 'QT005',
            HINT = 'engine_limits holds the bounds; the admin login may change them.';
    END IF;
END
$$;
