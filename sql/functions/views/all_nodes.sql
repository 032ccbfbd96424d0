-- all_nodes: every node, named as the operator's views name it (node_id,
-- movement_id, the movement's external_id, node_key, executor_key, lane),
-- with the rest of its row. The node views read it so that a node is named
-- in one place; a view over it is flattened by the planner and still reads
-- the nodes through their partial indexes.
CREATE OR REPLACE VIEW all_nodes AS
SELECT node.id AS node_id,
       node.request_id AS movement_id,
       request.external_id,
       node.*
  FROM movement_request_nodes node
  JOIN movement_requests request ON request.id = node.request_id;
