-- check_claim_args: the argument checks every claim shares (QT002). Internal.
CREATE OR REPLACE FUNCTION check_claim_args(p_call text, p_worker text, p_max integer, p_lease_seconds numeric)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_worker IS NULL OR btrim(p_worker) = '' THEN
        RAISE EXCEPTION '% needs the worker''s name', p_call USING ERRCODE = 'QT002';
    END IF;
    IF p_max IS NULL OR p_max < 1 OR p_max > 1000 THEN
        RAISE EXCEPTION '%: p_max must be between 1 and 1000, got %', p_call, p_max USING ERRCODE = 'QT002';
    END IF;
    IF p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION '%: p_lease_seconds must be positive, got %', p_call, p_lease_seconds USING ERRCODE = 'QT002';
    END IF;
END
$$;
