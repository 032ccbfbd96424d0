-- The reader roles stay (roles are cluster-wide; other databases of the
-- server may use them); the installer's grants went with the functions.
SELECT 1;
