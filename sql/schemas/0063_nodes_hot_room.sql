-- depends: 0062_failed_node_retries
--
-- Room for heap-only updates of movement_request_nodes. An update that
-- changes no indexed column, and finds room on its row's page, writes no
-- index entry (HOT): the observer's claim of a node (its claim token, hash,
-- claimer and time: none indexed) is such an update, and a node row is
-- written many times in its life. Two changes give it the chance:
--   fillfactor 85   new pages keep 15% free for the next versions of their
--                   rows (pages written before keep as they are until
--                   rewritten: VACUUM FULL or pg_repack, off hours)
--   the CCIP stranded-send index no longer names evidence in its predicate:
--                   any column an index's predicate reads counts as indexed,
--                   so every update that changed a node's evidence wrote
--                   every index; it now holds the OBSERVING ccip nodes (few:
--                   those in flight) and ccip_stranded_sends and stuck_nodes
--                   read their evidence.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_request_nodes SET (fillfactor = 85);
DROP INDEX movement_request_nodes_ccip_stranded;
CREATE INDEX movement_request_nodes_ccip_stranded ON movement_request_nodes (id)
 WHERE executor_key = 'ccip' AND node_state = 'OBSERVING';
$ddl$);
