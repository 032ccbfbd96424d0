-- depends: 0054_withdrawal_refs
--
-- An upgrade past the CCIP lanes (0053) and Stargate's TokenMessaging in the
-- registry changes what a ccip or stargate node's prepared payload carries:
-- a ccip intent names its lane's version, gas limit and fee rule (the
-- observer reads the lane's events by version; every re-check derives them
-- from ccip_lanes), a stargate intent its source's TokenMessaging (where
-- BusRode and BusDriven are read). An intent prepared by an earlier version
-- has neither: the new runners could not observe, retry or recover it.
-- So the upgrade waits until no unfinished ccip or stargate node holds such
-- an intent (PREPARED or SUBMITTED): run the previous build without its
-- dispatcher (`qtg run --only node_observer --only node_recovery`: no new
-- sends) until those nodes finish (in_flight_nodes), and migrate again. Nothing is changed here; the
-- refusal (QT041, the change would weaken money safety) leaves the
-- migrations before it applied and the function layer as it was.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DO $guard$
DECLARE
    v_nodes text;
BEGIN
    SELECT string_agg(format('%s (%s, %s)', n.id, n.executor_key, n.node_state), ', ' ORDER BY n.id)
      INTO v_nodes
      FROM movement_request_nodes n
      JOIN node_intents i ON i.node_id = n.id
     WHERE n.finished_at IS NULL
       AND n.executor_key IN ('ccip', 'stargate')
       AND i.intent_state IN ('PREPARED', 'SUBMITTED')
       AND i.prepared_payload IS NOT NULL
       AND NOT i.prepared_payload ? CASE n.executor_key WHEN 'ccip' THEN 'ccip_version' ELSE 'token_messaging' END;
    IF v_nodes IS NOT NULL THEN
        RAISE EXCEPTION 'upgrade refused on network %: these ccip / stargate nodes hold a send prepared by the previous version, which this version cannot observe or recover: %',
                        current_schema(), left(v_nodes, 2000)
            USING ERRCODE = 'QT041',
                  HINT = 'Run the previous build without its dispatcher (qtg run --only node_observer --only node_recovery) until these nodes finish (in_flight_nodes), then migrate again. For ccip, record each lane first (upsert_ccip_lane).';
    END IF;
END
$guard$;
$ddl$);
