-- The limits stay: roles are cluster-wide, and other databases of the same
-- server may still rely on them (as 0001 keeps the roles themselves). The
-- admin lifts them with ALTER ROLE ... CONNECTION LIMIT -1 / RESET ALL.
SELECT 1;
