-- login_limits: each login of this network's runner, operator and reader roles
-- with the connection limit and session defaults it has, beside its group's
-- (which `qtg runner|operator|reader add` copied onto it), and whether they
-- differ. PostgreSQL lets a login set its own defaults (ALTER ROLE itself
-- SET statement_timeout = 0) and change its own password, and no trigger sees
-- either: this view is where a changed login shows (a password change does
-- not: the server keeps no time of it). The session_watchdog bounds what a
-- login that turned its timeouts off can hold (end_stalled_sessions); the
-- admin restores the defaults with ALTER ROLE ... RESET ALL and the group's.
CREATE OR REPLACE VIEW login_limits AS
SELECT m.rolname::text AS login,
       g.rolname::text AS group_role,
       m.rolconnlimit AS connection_limit,
       g.rolconnlimit AS group_connection_limit,
       coalesce(ms.setconfig, '{}') AS settings,
       coalesce(gs.setconfig, '{}') AS group_settings,
       m.rolconnlimit IS DISTINCT FROM g.rolconnlimit
           OR (SELECT array_agg(x ORDER BY x) FROM unnest(coalesce(ms.setconfig, '{}')) x)
              IS DISTINCT FROM (SELECT array_agg(x ORDER BY x) FROM unnest(coalesce(gs.setconfig, '{}')) x)
           AS differs
  FROM qtg_admin.networks n
 CROSS JOIN LATERAL (VALUES (n.runner_role), (n.operator_role), (format('qtg_%s_reader', n.network_name))) w(name)
  JOIN pg_roles g ON g.rolname = w.name
  JOIN pg_auth_members a ON a.roleid = g.oid
  JOIN pg_roles m ON m.oid = a.member AND m.rolcanlogin
  LEFT JOIN pg_db_role_setting gs ON gs.setrole = g.oid AND gs.setdatabase = 0
  LEFT JOIN pg_db_role_setting ms ON ms.setrole = m.oid AND ms.setdatabase = 0
 -- this view's own network: the schema its tables were bound in when it was made
 WHERE n.network_name = (SELECT c.relnamespace::regnamespace::text FROM pg_class c
                          WHERE c.oid = 'movement_requests'::regclass);
