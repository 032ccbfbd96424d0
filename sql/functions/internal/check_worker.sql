-- check_worker: the worker's name a runner procedure is called with (the actor
-- of its audit rows, the claimer it records, a heartbeat's worker). Refused,
-- and nothing changes:
--   QT002  missing or blank
--   QT005  beyond engine_limits' text bound
--   QT002  not a worker's name: the worker (letters, digits, '_', '.', '-', at
--          most 64), then optionally '@' and its instance (letters, digits and
--          '_', '.', ':', '-'), as the runners send it: node_dispatcher,
--          node_dispatcher@host:4242:1a2b3c
--   QT002  the name of a person: a role that is a member of a network's
--          operator or reader role or of qtg_owner (every operator's,
--          reader's and admin's login; a superuser is a member of every
--          role), compared without case, whole or before its '@': a runner
--          login cannot write 'alice' as the actor of what it did (pg_roles
--          is read whole to compare without case: about 40 us a call with a
--          few dozen roles, beside a claim's milliseconds)
-- Internal.
CREATE OR REPLACE FUNCTION check_worker(p_call text, p_worker text) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_person text;
BEGIN
    IF p_worker IS NULL OR btrim(p_worker) = '' THEN
        RAISE EXCEPTION '% needs the worker''s name', p_call USING ERRCODE = 'QT002',
            HINT = 'Name the worker that calls it: it is the actor of the audit rows.';
    END IF;
    PERFORM check_limits(p_call, p_text => ARRAY[p_worker]);
    IF p_worker !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(@[A-Za-z0-9_.:-]{1,255})?$' THEN
        RAISE EXCEPTION '%: % is not a worker''s name', p_call, quote_literal(left(p_worker, 80))
            USING ERRCODE = 'QT002',
                  HINT = 'Name the worker as the runners do: letters, digits, _ . - (at most 64), then optionally @ and '
                         'its instance, e.g. node_dispatcher@host:4242:1a2b3c.';
    END IF;
    SELECT r.rolname INTO v_person
      FROM pg_roles r
     WHERE lower(r.rolname) IN (lower(p_worker), lower(split_part(p_worker, '@', 1)))
       AND EXISTS (SELECT 1
                     FROM pg_roles g
                    WHERE g.rolname ~ '^qtg_([a-z0-9_]+_(operator|reader)|owner)$'
                      AND pg_has_role(r.oid, g.oid, 'MEMBER'))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%: the worker name % is the name of a person''s login (an operator, a reader or the admin)', p_call,
                        quote_literal(p_worker)
            USING ERRCODE = 'QT002',
                  HINT = 'A worker is named after the worker (node_dispatcher, ...), never after a person: '
                         'the name is the actor of its audit rows.';
    END IF;
END
$$;
