-- depends: 0066_registry_revision
--
-- A rehearsal request is finished by the service that holds its claim. The
-- holder was known by its login alone (claimed_by = session_user), so two
-- rehearsal services sharing one login could each finish a request the
-- other had taken over after 30 minutes: the slow one's outcome replaced
-- the rehearsal the one now holding it was running. Each claim of a request
-- is now counted:
--   rehearsal_requests.claims  how many times the request was claimed: the
--                              claim's number, which claim_rehearsal_request
--                              hands to the service and finish_rehearsal_request
--                              takes back (an older claim's finish is
--                              refused, QT026)

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE rehearsal_requests ADD COLUMN claims integer NOT NULL DEFAULT 0 CHECK (claims >= 0);
-- a request claimed before this migration counts as claimed once
UPDATE rehearsal_requests SET claims = 1 WHERE claimed_by IS NOT NULL;
ALTER TABLE rehearsal_requests ADD CHECK ((claimed_by IS NULL) = (claims = 0));
$ddl$);
