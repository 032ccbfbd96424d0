-- limit_problem: what in the given inputs is beyond engine_limits, as a
-- sentence (NULL when nothing is). Internal; check_limits raises it, and the
-- batch calls refuse one element with it while the rest goes on. NULLs are
-- not checked; NaN and Infinity are beyond every bound.
--   p_lease   a lease in seconds: at least min_lease_seconds, at most
--             max_lease_seconds
--   p_wait    a wait in seconds (a retry hint): at most max_wait_seconds,
--             and 0 or at least a microsecond (the clock's resolution: a
--             smaller number is not even a double)
--   p_json    documents (evidence, payloads, plans, configs): each at most
--             max_json_bytes as text
--   p_text    texts (errors, reasons, references): each at most max_text_bytes
--   p_nodes   the nodes of a plan: at most max_plan_nodes
--   p_plan    a plan (or a template's): at most max_plan_bytes as text (a
--             dense plan of 200 nodes names 19,900 parents)
CREATE OR REPLACE FUNCTION limit_problem(
    p_lease numeric DEFAULT NULL,
    p_wait  numeric DEFAULT NULL,
    p_json  jsonb[] DEFAULT NULL,
    p_text  text[] DEFAULT NULL,
    p_nodes integer DEFAULT NULL,
    p_plan  jsonb DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_limits engine_limits;
    v_size   integer;
BEGIN
    SELECT * INTO STRICT v_limits FROM engine_limits;
    IF p_lease > v_limits.max_lease_seconds THEN
        RETURN format('a lease may be at most %s seconds, got %s', v_limits.max_lease_seconds, p_lease);
    END IF;
    IF p_lease < v_limits.min_lease_seconds THEN
        RETURN format('a lease must be at least %s seconds, got %s', v_limits.min_lease_seconds, p_lease);
    END IF;
    IF p_wait > v_limits.max_wait_seconds THEN
        RETURN format('retry_after_seconds may be at most %s seconds, got %s', v_limits.max_wait_seconds, p_wait);
    END IF;
    IF p_wait > 0 AND p_wait < 0.000001 THEN
        RETURN format('retry_after_seconds must be 0 or at least 0.000001 seconds (the clock''s resolution), got %s',
                      p_wait);
    END IF;
    IF p_json IS NOT NULL THEN
        SELECT max(octet_length(j::text)) INTO v_size FROM unnest(p_json) AS j;
        IF v_size > v_limits.max_json_bytes THEN
            RETURN format('a document of %s bytes is beyond the limit of %s bytes', v_size, v_limits.max_json_bytes);
        END IF;
    END IF;
    IF p_text IS NOT NULL THEN
        SELECT max(octet_length(t)) INTO v_size FROM unnest(p_text) AS t;
        IF v_size > v_limits.max_text_bytes THEN
            RETURN format('a text of %s bytes is beyond the limit of %s bytes', v_size, v_limits.max_text_bytes);
        END IF;
    END IF;
    IF octet_length(p_plan::text) > v_limits.max_plan_bytes THEN
        RETURN format('a plan of %s bytes is beyond the limit of %s bytes', octet_length(p_plan::text),
                      v_limits.max_plan_bytes);
    END IF;
    IF p_nodes > v_limits.max_plan_nodes THEN
        RETURN format('a plan of %s nodes is beyond the limit of %s nodes', p_nodes, v_limits.max_plan_nodes);
    END IF;
    RETURN NULL;
END
$$;
