-- lease_endpoints: a runner process's leases on the outside endpoints it
-- calls (endpoint_leases), renewed every few seconds, and what the other
-- processes sharing each endpoint say. No state of a movement or a node is
-- read or written: this is the pacing the runners' request budgets share.
--
-- For element i of the arrays (endpoint p_endpoints[i], a 429's Retry-After
-- p_slowed_until[i] or NULL):
--   1. the lease (p_endpoints[i], p_instance) is written: leased_until =
--      clock() + p_ttl_seconds; slowed_until = the later of the row's and
--      p_slowed_until[i] (NULL keeps the row's)
--   2. the expired leases of the endpoints given (leased_until < clock(),
--      whatever their instance: a process that stopped renewing) are deleted
--   3. one row per endpoint, in input order:
--        sharers       the live leases of the endpoint (leased_until >=
--                      clock()), this one included: at least 1
--        slowed_until  the latest slowed_until of a live lease that is still
--                      after clock(); NULL when none is
-- Refused whole (QT002), and nothing changes: p_instance NULL or not an
-- instance id (a letter or digit, then letters, digits and _ . : -, at most
-- 200 characters: host:pid:id); p_endpoints or p_slowed_until NULL, not of
-- one dimension, or of different lengths; more than 100 endpoints; an
-- endpoint NULL or not an endpoint's name (a lower-case letter, then
-- lower-case letters, digits and _ . : -, at most 200: rpc:base-sepolia);
-- an endpoint twice; p_ttl_seconds NULL or not positive. QT005, nothing
-- changes: a text beyond engine_limits.max_text_bytes; p_ttl_seconds NaN,
-- infinite or outside 1 to 600 s; a slowed_until not finite or more than an
-- hour after clock() (a Retry-After longer than that is not a budget's to
-- keep: the runner waits on its own).
-- Locks: the lease rows of the endpoints given, in endpoint order (the
-- arrays are sorted here, so two processes naming the same endpoints in
-- different orders do not deadlock): its own leases first (insert or update),
-- then the expired leases of other instances, skipping one another call holds
-- (it is deleting it, or its instance is renewing it). Nothing else is locked.
-- A crash (of the call or of the runner) leaves the leases as the last
-- committed call wrote them: each expires by itself ttl seconds after its
-- renewal, and the next call naming its endpoint deletes it; until then the
-- others count one sharer too many (they pace a little slower, never faster).
CREATE OR REPLACE FUNCTION lease_endpoints(
    p_instance     text,
    p_endpoints    text[],
    p_slowed_until timestamptz[],
    p_ttl_seconds  numeric
) RETURNS TABLE (endpoint text, sharers integer, slowed_until timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now       timestamptz := clock();
    v_n         integer := coalesce(cardinality(p_endpoints), 0);
    c_max       constant integer := 100;
    c_max_ahead constant interval := interval '1 hour';
    v_bad       bigint;
    v_name      text;
    v_until     timestamptz;
BEGIN
    PERFORM check_read_committed('lease_endpoints');
    IF p_instance IS NULL THEN
        RAISE EXCEPTION 'lease_endpoints needs the runner process''s instance id' USING ERRCODE = 'QT002',
            HINT = 'Pass the instance id the process''s workers beat with (host:pid:id).';
    END IF;
    IF p_endpoints IS NULL OR p_slowed_until IS NULL THEN
        RAISE EXCEPTION 'lease_endpoints needs the endpoints and their slowed_until (NULL elements for none), not NULL'
            USING ERRCODE = 'QT002';
    END IF;
    IF v_n > c_max THEN
        RAISE EXCEPTION 'lease_endpoints: at most % endpoints a call, got %', c_max, v_n USING ERRCODE = 'QT002',
            HINT = 'Lease the endpoints in several calls.';
    END IF;
    IF coalesce(array_ndims(p_endpoints), 1) <> 1 OR coalesce(array_ndims(p_slowed_until), 1) <> 1
       OR cardinality(p_slowed_until) <> v_n THEN
        RAISE EXCEPTION 'lease_endpoints: p_slowed_until must have one element per endpoint (% endpoints, % given)',
                        v_n, cardinality(p_slowed_until)
            USING ERRCODE = 'QT002', HINT = 'Pass one-dimensional arrays of one length; NULL: not slowed.';
    END IF;
    PERFORM check_limits('lease_endpoints', p_text => ARRAY[p_instance] || p_endpoints);
    IF p_instance !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$' THEN
        RAISE EXCEPTION 'lease_endpoints: % is not an instance id', quote_literal(left(p_instance, 80))
            USING ERRCODE = 'QT002',
                  HINT = 'A letter or digit, then letters, digits and _ . : - (at most 200), as the runners '
                         'name their process: host:4242:1a2b3c.';
    END IF;
    SELECT u.ord, u.name INTO v_bad, v_name
      FROM unnest(p_endpoints) WITH ORDINALITY AS u(name, ord)
     WHERE u.name IS NULL OR u.name !~ '^[a-z][a-z0-9_.:-]{0,199}$'
     ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'lease_endpoints: endpoint % (%) is not an endpoint''s name', v_bad,
                        coalesce(quote_literal(left(v_name, 80)), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'A lower-case letter, then lower-case letters, digits and _ . : - (at most 200): '
                         'rpc:base-sepolia, iris, venue:bybit.';
    END IF;
    IF (SELECT count(DISTINCT e) FROM unnest(p_endpoints) AS e) <> v_n THEN
        RAISE EXCEPTION 'lease_endpoints: an endpoint is named twice' USING ERRCODE = 'QT002',
            HINT = 'Name each endpoint once, with the latest slowed_until it has.';
    END IF;
    IF p_ttl_seconds IS NULL OR p_ttl_seconds <= 0 THEN
        RAISE EXCEPTION 'lease_endpoints: p_ttl_seconds must be positive, got %', coalesce(p_ttl_seconds::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Pass how long the leases live without a renewal: 1 to 600 s.';
    END IF;
    PERFORM check_number('lease_endpoints', 'p_ttl_seconds', p_ttl_seconds, 1, 600);
    SELECT u.ord, u.name, u.until INTO v_bad, v_name, v_until
      FROM unnest(p_endpoints, p_slowed_until) WITH ORDINALITY AS u(name, until, ord)
     WHERE NOT isfinite(u.until) OR u.until > v_now + c_max_ahead
     ORDER BY u.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'lease_endpoints: slowed_until % (%) of endpoint % is not a finite time at most an hour after the clock (%)',
                        v_bad, v_until, v_name, v_now
            USING ERRCODE = 'QT005',
                  HINT = 'Pass a finite time within the hour, or NULL: a longer Retry-After is the runner''s own wait.';
    END IF;

    IF v_n = 0 THEN
        RETURN;
    END IF;

    -- its own leases, in endpoint order
    INSERT INTO endpoint_leases AS l (endpoint, instance_id, leased_until, slowed_until)
    SELECT u.name, p_instance, v_now + make_interval(secs => p_ttl_seconds::double precision), u.until
      FROM unnest(p_endpoints, p_slowed_until) AS u(name, until)
     ORDER BY u.name
    ON CONFLICT ON CONSTRAINT endpoint_leases_pkey DO UPDATE
       SET leased_until = EXCLUDED.leased_until,
           slowed_until = greatest(l.slowed_until, EXCLUDED.slowed_until);  -- greatest skips a NULL

    -- the expired ones of the same endpoints, in endpoint order; one another
    -- call holds is skipped (deleted there, or renewed by its instance)
    DELETE FROM endpoint_leases l
     USING (SELECT e.endpoint, e.instance_id
              FROM endpoint_leases e
             WHERE e.endpoint = ANY (p_endpoints) AND e.leased_until < v_now
             ORDER BY e.endpoint, e.instance_id
               FOR UPDATE SKIP LOCKED) x
     WHERE l.endpoint = x.endpoint AND l.instance_id = x.instance_id;

    RETURN QUERY
    SELECT u.name,
           count(l.instance_id)::integer,
           max(l.slowed_until) FILTER (WHERE l.slowed_until > v_now)
      FROM unnest(p_endpoints) WITH ORDINALITY AS u(name, ord)
      LEFT JOIN endpoint_leases l ON l.endpoint = u.name AND l.leased_until >= v_now
     GROUP BY u.name, u.ord
     ORDER BY u.ord;
END
$$;
