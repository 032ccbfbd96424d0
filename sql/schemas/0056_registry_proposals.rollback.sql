-- The registry's proposals go, and the kind with them (an enum value cannot
-- be dropped: the type is made again without it, as 0029's rollback does).
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DELETE FROM config_proposals WHERE kind = 'registry';
$ddl$);
ALTER TYPE qtg.proposal_kind RENAME TO proposal_kind_0056;
CREATE TYPE qtg.proposal_kind AS ENUM ('lane_baseline', 'template', 'executor_config', 'callback_target');
SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE config_proposals ALTER COLUMN kind TYPE qtg.proposal_kind USING kind::text::qtg.proposal_kind;
$ddl$);
DROP TYPE qtg.proposal_kind_0056;
