-- raise_node_error: raises a batch call's per-node refusal (QT011, QT021,
-- QT030, QT002) as the single-node procedures do, with the hint an operator
-- needs. Does nothing when p_code is NULL. Internal.
CREATE OR REPLACE FUNCTION raise_node_error(p_code text, p_message text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_code IS NULL THEN
        RETURN;
    END IF;
    CASE p_code
        WHEN 'QT011' THEN
            RAISE EXCEPTION '%', p_message USING ERRCODE = p_code,
                HINT = 'Check the node id and the network (schema) you are connected to.';
        WHEN 'QT030' THEN
            RAISE EXCEPTION '%', p_message USING ERRCODE = p_code,
                HINT = 'Present the claim secret your claim returned. If you did, another worker (or recovery) '
                       'owns the node now: do not broadcast, drop this result.';
        WHEN 'QT002' THEN
            RAISE EXCEPTION '%', p_message USING ERRCODE = p_code,
                HINT = 'Correct the argument the message names and call again; a claim secret is the '
                       'claim_secret the node''s claim returned.';
        ELSE
            RAISE EXCEPTION '%', p_message USING ERRCODE = p_code;
    END CASE;
END
$$;
