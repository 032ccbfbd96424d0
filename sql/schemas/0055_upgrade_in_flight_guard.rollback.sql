-- 0055 changes nothing (a check before the upgrade): nothing to undo.
SELECT 1;
