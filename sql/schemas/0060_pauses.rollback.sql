SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DELETE FROM breakers WHERE scope NOT IN ('lane', 'venue');
ALTER TABLE breakers DROP COLUMN by_operator;
ALTER TABLE breakers DROP COLUMN expires_at;
ALTER TABLE breakers DROP CONSTRAINT breakers_scope_check;
ALTER TABLE breakers ADD CONSTRAINT breakers_scope_check CHECK (scope IN ('lane', 'venue'));
$ddl$);
