-- rehearsal_status: what an approver reads of a movement's rehearsals, one
-- row a movement rehearsed or asked to be (none for the others): the
-- rehearsal that counts for its approval (counted_rehearsals: the latest, but
-- never the creator's own over another login's failure; rehearsal_id,
-- outcome, who recorded it and when, its summary's lines: what `qtg
-- movement show` and the operator page print; registry_changed: true when
-- the registry has changed since the rehearsal read it (registry_revision),
-- so that its outcome speaks of another route than the one that will run,
-- NULL when not known: recorded before revisions were kept) and the
-- latest request of one (request_rehearsal: who asked and when, the service
-- that claimed it and when, and once finished when, with the rehearsal it
-- gave or its problem; open while request_finished_at is NULL). NULL
-- columns where there is no rehearsal, or no request. Read by the
-- movement's key (`WHERE movement_id = 8`): the movement ids come from the
-- two tables' own rows, then each one's rows by their (movement_id, id) index.
CREATE OR REPLACE VIEW rehearsal_status AS
SELECT m.movement_id,
       r.request_state AS state,
       h.id AS rehearsal_id,
       h.outcome,
       h.recorded_by,
       h.recorded_at,
       CASE WHEN jsonb_typeof(h.summary -> 'lines') = 'array' THEN h.summary -> 'lines' END AS lines,
       h.registry_revision <> (SELECT v.revision FROM registry_revision v) AS registry_changed,
       q.id AS request_id,
       q.requested_by,
       q.requested_at,
       q.claimed_by,
       q.claimed_at,
       q.finished_at AS request_finished_at,
       q.rehearsal_id AS request_rehearsal_id,
       q.problem AS request_problem
  FROM (SELECT x.movement_id FROM movement_rehearsals x
        UNION
        SELECT y.movement_id FROM rehearsal_requests y) m
  JOIN movement_requests r ON r.id = m.movement_id
  LEFT JOIN counted_rehearsals h ON h.movement_id = m.movement_id
  LEFT JOIN LATERAL (SELECT y.id, y.requested_by, y.requested_at, y.claimed_by, y.claimed_at, y.finished_at,
                            y.rehearsal_id, y.problem
                       FROM rehearsal_requests y
                      WHERE y.movement_id = m.movement_id
                      ORDER BY y.id DESC
                      LIMIT 1) q ON true;
