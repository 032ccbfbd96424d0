-- lock_node_batch: the common start of every batch completion call. Internal.
-- Checks the node ids (at most 1000, each once, none NULL: QT002), then locks
-- their requests, then the nodes, each in id order (the documented lock
-- order; id order keeps two batches from deadlocking each other).
CREATE OR REPLACE FUNCTION lock_node_batch(p_call text, p_node_ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF cardinality(p_node_ids) > 1000 THEN
        RAISE EXCEPTION '%: at most 1000 nodes a call, got %', p_call, cardinality(p_node_ids)
            USING ERRCODE = 'QT002';
    END IF;
    IF array_position(p_node_ids, NULL) IS NOT NULL
       OR (SELECT count(DISTINCT id) FROM unnest(p_node_ids) id) <> cardinality(p_node_ids) THEN
        RAISE EXCEPTION '%: node ids must be given once each and not be NULL', p_call
            USING ERRCODE = 'QT002';
    END IF;

    PERFORM 1 FROM movement_requests r
     WHERE r.id IN (SELECT n.request_id FROM movement_request_nodes n WHERE n.id = ANY (p_node_ids))
     ORDER BY r.id
       FOR UPDATE;
    PERFORM 1 FROM movement_request_nodes n WHERE n.id = ANY (p_node_ids) ORDER BY n.id FOR UPDATE;
END
$$;
