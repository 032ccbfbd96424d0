-- movements: the movements as an operator reads them first, one row each, by
-- the names psql users guess (`SELECT * FROM movements`): its id, your
-- external id, its state and why it stopped, the amount, who created and
-- approved it, its nodes still open and failed, and when it was created,
-- approved, started, finished and expires, and the outcome of the
-- rehearsal that counts for its approval (counted_rehearsals), when and by
-- whom it was recorded (`rehearsal`, `rehearsed_at`, `rehearsed_by`: NULL
-- for a movement never rehearsed; record_rehearsal). Reads
-- movement_requests and, by each movement's key, its rehearsals (no count
-- over the nodes: movement_progress has those).
CREATE OR REPLACE VIEW movements AS
SELECT r.id AS movement_id,
       r.external_id,
       r.request_state AS state,
       r.stop_reason,
       r.amount,
       r.asset,
       r.priority,
       r.template_name,
       r.created_by,
       r.approved_by,
       r.open_nodes,
       r.failed_nodes,
       r.created_at,
       r.approved_at,
       r.started_at,
       r.finished_at,
       r.expires_at,
       h.outcome AS rehearsal,
       h.recorded_at AS rehearsed_at,
       h.recorded_by AS rehearsed_by
  FROM movement_requests r
  LEFT JOIN counted_rehearsals h ON h.movement_id = r.id;
