SET LOCAL ROLE qtg_owner;

DROP TABLE qtg.schema_migrations;

-- an enum value cannot be dropped: the type is made again without it (the
-- function layer, which uses it, is dropped before a rollback)
SELECT qtg_admin.apply_per_network($ddl$
DELETE FROM config_proposals WHERE kind = 'callback_target';
$ddl$);
ALTER TYPE qtg.proposal_kind RENAME TO proposal_kind_0029;
CREATE TYPE qtg.proposal_kind AS ENUM ('lane_baseline', 'template', 'executor_config');
SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE config_proposals ALTER COLUMN kind TYPE qtg.proposal_kind USING kind::text::qtg.proposal_kind;
$ddl$);
DROP TYPE qtg.proposal_kind_0029;
