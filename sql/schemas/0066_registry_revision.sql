-- depends: 0065_observe_claim_proof
--
-- A rehearsal is advice to the approver about the movement as the registry
-- had it when the rehearsal read it (rehearsal_input). The route a node signs
-- is read from the registry again before every send, so a registry change
-- after the rehearsal (a contract, a recipient's allow-listing, a fee cap)
-- makes its 'passed' speak of another route than the one that will run.
-- Nothing said so. Each network now counts the registry's changes:
--   registry_revision  one row: the revision, bumped by every row inserted
--                      into, deleted from or changed in a table of
--                      rehearsal_registry_tables(), and by a TRUNCATE of
--                      one (a change of its updated_at, created_at,
--                      updated_by or created_by alone is not one: a deploy
--                      step registering the same executor again, another
--                      admin setting the same values, changes nothing),
--                      and when it last was
--   movement_rehearsals.registry_revision
--                      the revision the rehearsal read (NULL for those
--                      recorded before this migration: not known)
-- The triggers run qtg_admin.bump_registry_revision, as the login that
-- writes the registry (the admin, or the owner in a SECURITY DEFINER
-- routine); their function is the migration's, not re-installed.

SET LOCAL ROLE qtg_owner;

CREATE FUNCTION qtg_admin.bump_registry_revision() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE format('UPDATE %I.registry_revision SET revision = revision + 1, changed_at = qtg.clock()',
                   TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION qtg_admin.bump_registry_revision() FROM PUBLIC;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE registry_revision (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    revision   bigint NOT NULL DEFAULT 1 CHECK (revision >= 1),
    changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO registry_revision DEFAULT VALUES;

ALTER TABLE movement_rehearsals ADD COLUMN registry_revision bigint CHECK (registry_revision >= 1);

DO $tables$
DECLARE
    v_table    text;
    v_who_when text := '{updated_at,created_at,updated_by,created_by}';
BEGIN
    FOREACH v_table IN ARRAY ARRAY['chains', 'chain_tokens', 'treasury_accounts', 'allowed_destinations',
                                   'chain_protocols', 'ccip_lanes', 'exchange_venues', 'venue_chains',
                                   'venue_deposit_addresses', 'executors', 'lane_baselines',
                                   'movement_templates', 'value_limits', 'engine_limits', 'balance_settings'] LOOP
        EXECUTE format('CREATE TRIGGER registry_rows AFTER INSERT OR DELETE ON %I'
                       ' FOR EACH ROW EXECUTE FUNCTION qtg_admin.bump_registry_revision()', v_table);
        EXECUTE format('CREATE TRIGGER registry_changes AFTER UPDATE ON %I FOR EACH ROW'
                       ' WHEN (to_jsonb(OLD) - %L::text[] IS DISTINCT FROM to_jsonb(NEW) - %L::text[])'
                       ' EXECUTE FUNCTION qtg_admin.bump_registry_revision()',
                       v_table, v_who_when, v_who_when);
        EXECUTE format('CREATE TRIGGER registry_emptied AFTER TRUNCATE ON %I'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION qtg_admin.bump_registry_revision()', v_table);
    END LOOP;
END
$tables$;
$ddl$);
