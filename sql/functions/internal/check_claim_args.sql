-- check_claim_args: the argument checks every claim shares (QT002): a worker's
-- name (check_worker), a batch size of 1 to 1000, a positive lease within
-- engine_limits (min_lease_seconds to max_lease_seconds: QT005), and an
-- instance id, when one is given, that is not blank. Internal.
CREATE OR REPLACE FUNCTION check_claim_args(
    p_call          text,
    p_worker        text,
    p_max           integer,
    p_lease_seconds numeric,
    p_instance_id   text DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM check_worker(p_call, p_worker);
    PERFORM check_args(p_call, p_max => p_max, p_max_limit => 1000);
    IF p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION '%: p_lease_seconds must be positive, got %', p_call, p_lease_seconds USING ERRCODE = 'QT002';
    END IF;
    IF p_instance_id IS NOT NULL AND btrim(p_instance_id) = '' THEN
        RAISE EXCEPTION '%: p_instance_id must name the worker''s heartbeat instance, or be NULL', p_call
            USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_limits(p_call, p_lease => p_lease_seconds, p_text => ARRAY[p_instance_id]);
END
$$;
