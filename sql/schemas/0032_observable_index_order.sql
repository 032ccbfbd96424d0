-- depends: 0031_learned_pacing
--
-- The observer's candidate list reads its index in its own order.
--
-- movement_request_nodes_observable_idx  (next_observe_at) becomes
--     (next_observe_at, id), over the same nodes in flight (SUBMITTED or
--     OBSERVING, not quarantined). observe_candidates lists the longest
--     overdue first, ties by id: with the id in the index the list is read
--     from the index's due end and stops after p_max entries, with no sort of
--     the nodes that share a next_observe_at (many do when a batch of nodes
--     was submitted or paced together). Its cost then does not grow with the
--     nodes in flight nor with how many are due (benchmark case 6).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX movement_request_nodes_observable_idx;
CREATE INDEX movement_request_nodes_observable_idx ON movement_request_nodes (next_observe_at, id)
    WHERE node_state IN ('SUBMITTED', 'OBSERVING') AND quarantined_at IS NULL;
$ddl$);
