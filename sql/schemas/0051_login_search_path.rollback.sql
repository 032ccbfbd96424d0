-- The logins keep their search_path default (roles are shared by every
-- database of the server); the admin resets it with ALTER ROLE ... RESET
-- search_path.
SELECT 1;
