-- limit_refusals: a batch call's per-element refusals (p_codes, p_messages,
-- element i for node i) with QT005 added for each element whose document
-- (p_json[i]) or texts (p_text_a[i], p_text_b[i]) are beyond engine_limits,
-- so that one oversized element is refused in its own row while the rest of
-- the batch goes on. Internal. An earlier refusal of an element stands. One
-- look at the whole batch first: the element by element pass runs only when
-- something is beyond a limit.
CREATE OR REPLACE FUNCTION limit_refusals(
    p_call     text,
    p_node_ids bigint[],
    p_json     jsonb[],
    p_text_a   text[],
    p_text_b   text[],
    p_codes    text[],
    p_messages text[]
) RETURNS TABLE (error_codes text[], error_messages text[])
LANGUAGE plpgsql STABLE
ROWS 1
AS $$
DECLARE
    v_n integer := cardinality(p_node_ids);
BEGIN
    IF limit_problem(p_json => p_json, p_text => coalesce(p_text_a, '{}') || coalesce(p_text_b, '{}')) IS NULL THEN
        RETURN QUERY SELECT p_codes, p_messages;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT array_agg(coalesce(u.code, CASE WHEN x.problem IS NOT NULL THEN 'QT005' END) ORDER BY u.ord),
           array_agg(coalesce(u.message, format('%s: node %s: %s', p_call, u.node_id, x.problem)) ORDER BY u.ord)
      FROM unnest(p_node_ids,
                  coalesce(p_json, array_fill(NULL::jsonb, ARRAY[v_n])),
                  coalesce(p_text_a, array_fill(NULL::text, ARRAY[v_n])),
                  coalesce(p_text_b, array_fill(NULL::text, ARRAY[v_n])),
                  p_codes, p_messages) WITH ORDINALITY AS u(node_id, doc, text_a, text_b, code, message, ord)
     CROSS JOIN LATERAL limit_problem(p_json => ARRAY[u.doc], p_text => ARRAY[u.text_a, u.text_b]) AS x(problem);
END
$$;
