-- depends: 0069_nonce_skip_budget
--
-- A bybit_deposit step waits for the transfer into the venue's deposit
-- address that its paying parent's evidence shows. That evidence is the
-- runner's word: a runner login could name another movement's transfer,
-- already credited, and the venue's credit would then release a second
-- withdrawal on one deposit. One transfer now credits one deposit step:
--   node_intents_deposit_tx_key  unique: the chain and transaction a
--                                deposit step's prepared or submitted
--                                intent names (its payload holds
--                                deposit_address); intent_payload_problem
--                                refuses a second one by name (QT032), the
--                                index when two records race
-- A database where two deposit steps already name one transfer is not
-- migrated: the migration says which, for an operator to settle first.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DO $check$
DECLARE
    v_twice text;
BEGIN
    SELECT string_agg(format('%s on %s (nodes %s)', tx, chain, nodes), '; ')
      INTO v_twice
      FROM (SELECT lower(prepared_payload ->> 'tx_hash') AS tx, lower(prepared_payload ->> 'chain_key') AS chain,
                   string_agg(node_id::text, ', ' ORDER BY node_id) AS nodes
              FROM node_intents
             WHERE prepared_payload ? 'deposit_address' AND intent_state IN ('PREPARED', 'SUBMITTED')
             GROUP BY 1, 2
            HAVING count(*) > 1) twice;
    IF v_twice IS NOT NULL THEN
        RAISE EXCEPTION 'network %: deposit steps name one transfer twice: %', current_schema(), v_twice
            USING ERRCODE = 'QT032',
            HINT = 'One transfer credits one deposit step: requeue_node or cancel the step that does not own it, '
                   'then migrate again.';
    END IF;
END
$check$;
CREATE UNIQUE INDEX node_intents_deposit_tx_key
    ON node_intents (lower(prepared_payload ->> 'chain_key'), lower(prepared_payload ->> 'tx_hash'))
 WHERE prepared_payload ? 'deposit_address' AND intent_state IN ('PREPARED', 'SUBMITTED');
$ddl$);
