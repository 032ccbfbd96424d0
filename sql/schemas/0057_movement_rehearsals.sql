-- depends: 0056_registry_proposals
--
-- movement_rehearsals: what a rehearsal of a movement found, recorded on the
-- movement before it is approved, so that its approver sees it. A rehearsal
-- (`qtg rehearse`) reads the movement's plan and the network's registry
-- (rehearsal_input), replays the movement in a throwaway engine database
-- against forks of its chains, and records its outcome here
-- (record_rehearsal); the movements view shows the latest, and an approval
-- of a movement whose latest rehearsal failed goes ahead with a QT025
-- WARNING (approve_movement_rows):
--   id           the rehearsal, in the order recorded (the latest: the highest)
--   movement_id  the movement rehearsed
--   outcome      'passed' or 'failed'
--   summary      the rehearsing tool's report, a JSON object (at most
--                engine_limits.max_json_bytes, checked by record_rehearsal):
--                its "outcome" and "lines" (what `qtg movement show` prints)
--   recorded_by  the login that recorded it (session_user)
--   recorded_at  the clock when it was recorded (set by record_rehearsal:
--                a column default may not name qtg.clock(), which every
--                migrate re-creates)
-- Only record_rehearsal writes it (as the owner); the reader role, and so
-- every operator, SELECTs it like every table (granted by the installer).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE movement_rehearsals (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    movement_id bigint NOT NULL REFERENCES movement_requests ON DELETE CASCADE,
    outcome     text NOT NULL CHECK (outcome IN ('passed', 'failed')),
    summary     jsonb NOT NULL CHECK (jsonb_typeof(summary) = 'object'),
    recorded_by text NOT NULL DEFAULT session_user,
    recorded_at timestamptz NOT NULL
);
-- a movement's latest rehearsal, by its key (the movements view, approvals)
CREATE INDEX movement_rehearsals_movement_idx ON movement_rehearsals (movement_id, id);
$ddl$);
