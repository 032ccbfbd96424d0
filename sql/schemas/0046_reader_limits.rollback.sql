-- The readers' limits stay (roles are cluster-wide, and a looser limit is not
-- a state to return to); the admin lifts them with ALTER ROLE ... CONNECTION
-- LIMIT -1 / RESET ALL.
SELECT 1;
