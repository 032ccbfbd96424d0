-- depends: 0038_callback_retention
--
-- pipeline_counts counted every movement and node ever made: 0.25-0.7 s at a
-- million nodes, on every /metrics scrape, operator page and `qtg status`, and
-- growing with the history. A finished row (finished_at set: COMPLETED, FAILED,
-- SKIPPED, CANCELLED, EXPIRED) never changes state again, so a count of
-- finished rows stays true once made:
--
-- pipeline_rollups, one row per entity ('movement', 'node'):
--   below_id     every row of the entity with an id under it is either counted
--                in pipeline_rollup_totals or listed in open_ids
--   open_ids     the ids under below_id that were not finished when last
--                rolled up (the open rows: in flight, awaiting approval, held)
--   fence_id     the entity's identity sequence as the last roll-up saw it ...
--   fence_xacts  ... and the transactions running then (virtual ids): once
--                none of them runs, every id up to fence_id is committed or
--                gone, and the next roll-up may count up to it (then '{}')
--   rolled_at    the last roll-up
-- pipeline_rollup_totals: the finished rows under below_id (and not in
--   open_ids), per entity and state.
--
-- roll_up_pipeline_counts (the pipeline_rollup sidecar, every minute) moves
-- below_id up; the view adds the rows from it to the newest and the open_ids,
-- read by key. So a read costs the rows made since the last roll-up and those
-- still open, whatever the history. The migration rolls up the history there
-- is: with the writers of both tables held off by its triggers' locks, it
-- counts every row without a fence.
--
-- That a finished row never changes state again was a rule each procedure
-- kept; it is now the tables' (movement_requests_final, ..._nodes_final): an
-- UPDATE that moves a finished movement or node out of its state is refused
-- (QT020, QT021), to the owner too. A COMPLETED node made READY again could be
-- dispatched again: this guards the side effect as much as the counts. The
-- trigger's WHEN reads the old row only for an UPDATE naming the state
-- column, and calls its function only to refuse. Its function lives in
-- qtg_admin, as the audit log's does. (Deleting finished rows, which the
-- engine never does, would leave their totals counted.)

SET LOCAL ROLE qtg_owner;

CREATE FUNCTION qtg_admin.refuse_reopening() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_refusal text := format('%s %s is %s, a final state: it cannot become %s', TG_ARGV[0], OLD.id,
                             to_jsonb(OLD) ->> TG_ARGV[1], to_jsonb(NEW) ->> TG_ARGV[1]);
    v_hint    text := 'A finished movement or node stays as it finished; start a new movement for more.';
BEGIN
    IF TG_ARGV[0] = 'node' THEN
        RAISE EXCEPTION '%', v_refusal USING ERRCODE = 'QT021', HINT = v_hint;
    END IF;
    RAISE EXCEPTION '%', v_refusal USING ERRCODE = 'QT020', HINT = v_hint;
END
$$;
REVOKE ALL ON FUNCTION qtg_admin.refuse_reopening() FROM PUBLIC;

SELECT qtg_admin.apply_per_network($ddl$
-- first: each CREATE TRIGGER holds its table against every writer until this
-- migration commits (and waited for the writers before it), so the counts
-- below are of every row there is, and no id under below_id comes later
CREATE TRIGGER movement_requests_final BEFORE UPDATE OF request_state ON movement_requests
    FOR EACH ROW WHEN (OLD.finished_at IS NOT NULL AND NEW.request_state IS DISTINCT FROM OLD.request_state)
    EXECUTE FUNCTION qtg_admin.refuse_reopening('movement', 'request_state');
CREATE TRIGGER movement_request_nodes_final BEFORE UPDATE OF node_state ON movement_request_nodes
    FOR EACH ROW WHEN (OLD.finished_at IS NOT NULL AND NEW.node_state IS DISTINCT FROM OLD.node_state)
    EXECUTE FUNCTION qtg_admin.refuse_reopening('node', 'node_state');

CREATE TABLE pipeline_rollups (
    entity      text PRIMARY KEY CHECK (entity IN ('movement', 'node')),
    below_id    bigint NOT NULL CHECK (below_id >= 1),
    open_ids    bigint[] NOT NULL,
    fence_id    bigint CHECK (fence_id >= below_id - 1),
    fence_xacts text[],
    rolled_at   timestamptz,
    CHECK ((fence_id IS NULL) = (fence_xacts IS NULL))
);

CREATE TABLE pipeline_rollup_totals (
    entity text NOT NULL REFERENCES pipeline_rollups,
    state  text NOT NULL,
    total  bigint NOT NULL CHECK (total > 0),
    PRIMARY KEY (entity, state)
);

-- the history there is, rolled up now: the view is cheap from the start
INSERT INTO pipeline_rollups (entity, below_id, open_ids)
SELECT 'movement', coalesce(max(m.id), 0) + 1,
       coalesce(array_agg(m.id ORDER BY m.id) FILTER (WHERE m.finished_at IS NULL), '{}')
  FROM movement_requests m
UNION ALL
SELECT 'node', coalesce(max(n.id), 0) + 1,
       coalesce(array_agg(n.id ORDER BY n.id) FILTER (WHERE n.finished_at IS NULL), '{}')
  FROM movement_request_nodes n;
INSERT INTO pipeline_rollup_totals (entity, state, total)
SELECT 'movement', m.request_state::text, count(*)
  FROM movement_requests m WHERE m.finished_at IS NOT NULL GROUP BY m.request_state
UNION ALL
SELECT 'node', n.node_state::text, count(*)
  FROM movement_request_nodes n WHERE n.finished_at IS NOT NULL GROUP BY n.node_state;
$ddl$);
