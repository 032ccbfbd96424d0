-- depends: 0061_observe_holds
--
-- A requeue (node_requeues, requeue_node) takes a node back to READY on two
-- operators' word. It was for an UNKNOWN node whose prepared side effect
-- can never land; it now also retries a FAILED node of which nothing can
-- have happened (no intent of it was ever prepared: nothing was signed or
-- sent), at most three times a node; the movement's callbacks after a
-- retry carry its number in their keys (enqueue_callbacks). from_state says
-- which:
--   UNKNOWN  a fresh side effect for a node whose prepared one never landed
--   FAILED   a retry of a node that provably did nothing

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE node_requeues
    ADD COLUMN from_state text NOT NULL DEFAULT 'UNKNOWN' CHECK (from_state IN ('UNKNOWN', 'FAILED'));
-- a movement's retries, read by each callback it enqueues (their keys)
CREATE INDEX node_requeues_retries_idx ON node_requeues (request_id)
    WHERE state = 'APPLIED' AND from_state = 'FAILED';
$ddl$);

-- A finished row never changes state again (0039_pipeline_rollups), save the
-- one reopening two operators sanction: a FAILED node's retry, which
-- requeue_node applies with the movement's id in the transaction's setting
-- qtg.reopening (set for those statements alone, a savepoint's too) and a
-- node_requeues row APPLIED from FAILED for the movement. It moves the node
-- FAILED -> READY, the descendants its failure skipped SKIPPED -> PENDING,
-- and its movement FAILED -> EXECUTING; any other reopening is refused as
-- before. (No login may write the tables: the trigger guards the engine's
-- own procedures, none of which reopens a row otherwise. reopen_after_retry
-- takes the reopened rows out of the pipeline roll-up's totals.)
CREATE OR REPLACE FUNCTION qtg_admin.refuse_reopening() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_from     text := to_jsonb(OLD) ->> TG_ARGV[1];
    v_to       text := to_jsonb(NEW) ->> TG_ARGV[1];
    v_refusal  text := format('%s %s is %s, a final state: it cannot become %s', TG_ARGV[0], OLD.id, v_from, v_to);
    v_hint     text := 'A finished movement or node stays as it finished; start a new movement for more.';
    v_movement bigint;
    v_retried  boolean := false;
BEGIN
    IF (TG_ARGV[0] = 'node' AND (v_from, v_to) IN (('FAILED', 'READY'), ('SKIPPED', 'PENDING')))
       OR (TG_ARGV[0] = 'movement' AND (v_from, v_to) = ('FAILED', 'EXECUTING')) THEN
        v_movement := CASE WHEN TG_ARGV[0] = 'node' THEN (to_jsonb(OLD) ->> 'request_id')::bigint ELSE OLD.id END;
        IF current_setting('qtg.reopening', true) = v_movement::text THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.node_requeues r
                                            WHERE r.request_id = $1 AND r.state = ''APPLIED''
                                              AND r.from_state = ''FAILED'')', TG_TABLE_SCHEMA)
               INTO v_retried USING v_movement;
        END IF;
        IF v_retried THEN
            RETURN NEW;
        END IF;
    END IF;
    IF TG_ARGV[0] = 'node' THEN
        RAISE EXCEPTION '%', v_refusal USING ERRCODE = 'QT021', HINT = v_hint;
    END IF;
    RAISE EXCEPTION '%', v_refusal USING ERRCODE = 'QT020', HINT = v_hint;
END
$$;
REVOKE ALL ON FUNCTION qtg_admin.refuse_reopening() FROM PUBLIC;
