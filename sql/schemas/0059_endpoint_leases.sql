-- depends: 0058_rehearsal_requests
--
-- endpoint_leases: which runner processes call which outside endpoint (a
-- chain's RPC URL, Iris, an exchange venue) now, and whether one of them was
-- told to slow down. Each runner paces its calls to an endpoint with a
-- request budget (qtg_runner/budget.py); processes that share an endpoint
-- share its provider's rate limit, so each takes its share: the endpoint's
-- rate divided by the live leases of the endpoint. A process renews its
-- leases every few seconds (lease_endpoints), and a 429 one of them met
-- (its Retry-After) is seen by the others through slowed_until:
--   endpoint      the endpoint's name as the runners spell it (a lower-case
--                 letter, then lower-case letters, digits and _ . : -, at most
--                 200 characters: rpc:base-sepolia, iris, venue:bybit)
--   instance_id   the runner process (its workers' heartbeat instance,
--                 host:pid:id; letters, digits and _ . : -, at most 200)
--   leased_until  the lease is live until then (the clock at the renewal plus
--                 its ttl, at most 600 s): a process that dies stops renewing
--                 and its share goes back to the others once it expires
--   slowed_until  the endpoint asked this process to slow down until then (a
--                 429's Retry-After, at most an hour ahead); NULL: never
-- Only lease_endpoints writes it (as the owner), and it deletes the expired
-- leases of the endpoints it is given; the reader role, and so every
-- operator, SELECTs it like every table (granted by the installer); the
-- endpoint_budgets view reads it per endpoint. No row is anything but
-- pacing: losing the table loses no movement's state.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE endpoint_leases (
    endpoint     text NOT NULL CHECK (endpoint ~ '^[a-z][a-z0-9_.:-]{0,199}$'),
    instance_id  text NOT NULL CHECK (instance_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$'),
    leased_until timestamptz NOT NULL CHECK (isfinite(leased_until)),
    slowed_until timestamptz CHECK (isfinite(slowed_until)),
    PRIMARY KEY (endpoint, instance_id)
);
$ddl$);
