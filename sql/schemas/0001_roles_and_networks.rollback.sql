-- Roles are cluster-wide and may serve other databases: they are left in place,
-- with everything they held in this database revoked.
DROP SCHEMA testnet CASCADE;
DROP SCHEMA mainnet CASCADE;
DROP SCHEMA qtg_admin CASCADE;
DROP SCHEMA qtg CASCADE;
