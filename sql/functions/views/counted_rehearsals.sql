-- counted_rehearsals: for each movement rehearsed, the rehearsal that counts
-- for its approval, one row of movement_rehearsals: the latest recorded (the
-- highest id), unless the movement's creator recorded it and the latest one
-- recorded by another login warns: it failed, or it ran on a registry that
-- has changed since (its registry_revision known and not the current one).
-- A creator's word on its own movement never overrides another operator's
-- warning (four eyes): a fresh rehearsal by another login does; while a
-- failure the creator records stands. The one rule approve_movement_rows (its QT025
-- advice), the movements view and rehearsal_status read, so that all three
-- say the same. Read by the movement's key (`WHERE movement_id = 8`): each
-- part by the (movement_id, id) index.
CREATE OR REPLACE VIEW counted_rehearsals AS
SELECT latest.movement_id,
       c.id,
       c.outcome,
       c.summary,
       c.recorded_by,
       c.recorded_at,
       c.registry_revision
  FROM (SELECT DISTINCT ON (x.movement_id) x.movement_id, x.id, x.recorded_by
          FROM movement_rehearsals x
         ORDER BY x.movement_id, x.id DESC) latest
  JOIN movement_requests r ON r.id = latest.movement_id
  LEFT JOIN LATERAL (SELECT y.id, y.outcome, y.registry_revision
                       FROM movement_rehearsals y
                      WHERE y.movement_id = latest.movement_id AND y.recorded_by <> r.created_by
                      ORDER BY y.id DESC
                      LIMIT 1) other ON true
  JOIN movement_rehearsals c
    ON c.id = CASE WHEN latest.recorded_by = r.created_by
                        AND (other.outcome = 'failed'
                             OR other.registry_revision <> (SELECT v.revision FROM registry_revision v))
                   THEN other.id ELSE latest.id END;
