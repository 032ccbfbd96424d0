-- depends: 0004_audit_events_and_retry_delays
--
-- qtg.test_database   one row when the owner has marked this database a test
--                     database; none in production. qtg.clock() honours a
--                     pinned clock (SET qtg.now) only when the row is there,
--                     and refuses it otherwise (QT040), so that no caller can
--                     move the time that leases, expiry, approvals and audit
--                     timestamps read. Only the owner writes it (`qtg db
--                     mark-test`); every network's roles may read it, because
--                     the clock also runs inside their views.

SET LOCAL ROLE qtg_owner;

CREATE TABLE qtg.test_database (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    marked_by text NOT NULL DEFAULT session_user,
    marked_at timestamptz NOT NULL DEFAULT statement_timestamp()
);

DO $$
DECLARE
    v_net qtg_admin.networks;
BEGIN
    FOR v_net IN SELECT * FROM qtg_admin.networks LOOP
        EXECUTE format('GRANT SELECT ON qtg.test_database TO %I, %I', v_net.runner_role, v_net.operator_role);
    END LOOP;
END
$$;
