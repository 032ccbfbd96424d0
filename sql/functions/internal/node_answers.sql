-- node_answers: the answer of a call that reports on each of its nodes
-- (release_nodes, quarantine_nodes): one row per element of p_node_ids, in
-- input order, with the node's state as it is now where the element was not
-- refused (p_codes[i] NULL), else the refusal's code and message (p_codes,
-- p_messages: element i for node i). Internal. Reads the nodes by key; takes
-- no lock (the caller holds them).
CREATE OR REPLACE FUNCTION node_answers(p_node_ids bigint[], p_codes text[], p_messages text[])
RETURNS TABLE (node_id bigint, node_state qtg.node_state, error_code text, error_message text)
LANGUAGE sql STABLE
AS $$
    SELECT u.node_id, CASE WHEN u.code IS NULL THEN n.node_state END, u.code, u.message
      FROM unnest(p_node_ids, p_codes, p_messages) WITH ORDINALITY AS u(node_id, code, message, ord)
      LEFT JOIN movement_request_nodes n ON n.id = u.node_id
     ORDER BY u.ord;
$$;
