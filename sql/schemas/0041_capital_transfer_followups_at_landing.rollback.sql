-- Nothing to undo: the followups made by the migration stay, and the
-- sidecar's search of the earlier function layer skips a transfer followed
-- already.
SELECT 1;
