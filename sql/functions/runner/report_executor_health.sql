-- report_executor_health: records an executor's latest health check.
-- Refused, changing nothing: a status other than HEALTHY, DEGRADED or DOWN,
-- or a reporter that is not a worker's name (check_worker: QT002); a detail
-- or a name beyond engine_limits (QT005); an executor not registered (QT012).
CREATE OR REPLACE FUNCTION report_executor_health(
    p_executor_key text,
    p_status       text,
    p_detail       jsonb DEFAULT '{}',
    p_reported_by  text DEFAULT 'executor_health'
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM check_read_committed('report_executor_health');
    PERFORM check_worker('report_executor_health', p_reported_by);
    PERFORM check_limits('report_executor_health', p_json => ARRAY[p_detail]);
    IF p_status IS NULL OR p_status NOT IN ('HEALTHY', 'DEGRADED', 'DOWN') THEN
        RAISE EXCEPTION 'executor health must be HEALTHY, DEGRADED or DOWN, got %', coalesce(p_status, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM executors WHERE executor_key = p_executor_key) THEN
        RAISE EXCEPTION 'executor % is not registered', p_executor_key USING ERRCODE = 'QT012',
            HINT = 'Call register_executor first.';
    END IF;
    INSERT INTO executor_health (executor_key, status, detail, reported_by, checked_at)
    VALUES (p_executor_key, p_status, coalesce(p_detail, '{}'), p_reported_by, clock())
    ON CONFLICT (executor_key) DO UPDATE
       SET status = excluded.status, detail = excluded.detail,
           reported_by = excluded.reported_by, checked_at = excluded.checked_at;
END
$$;
