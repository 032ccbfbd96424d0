-- Before 0077 nothing held a requeued node: one that waits for its abandoned
-- intent's nonce would be claimed and signed again at once. Refused while
-- any waits.
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DO $held$
DECLARE
    v_held text;
BEGIN
    SELECT string_agg(format('node %s (intent %s)', n.id, n.awaits_nonce_of), ', ' ORDER BY n.id) INTO v_held
      FROM movement_request_nodes n WHERE n.awaits_nonce_of IS NOT NULL;
    IF v_held IS NOT NULL THEN
        RAISE EXCEPTION 'network %: requeued nodes wait for their abandoned nonces: %', current_schema(), v_held
            USING ERRCODE = 'QT041',
                  HINT = 'Roll back once the nonce reaper has closed those nonces (the nodes are claimed again).';
    END IF;
END
$held$;
ALTER TABLE movement_request_nodes DROP COLUMN awaits_nonce_of;
$ddl$);
