-- endpoint_budgets: per outside endpoint a runner calls (a chain's RPC URL,
-- Iris, an exchange venue), the runner processes sharing its rate limit now
-- (the live leases of endpoint_leases: leased_until not past, renewed by
-- lease_endpoints every few seconds), how many, and until when the endpoint
-- asked them to slow down (the latest slowed_until of a live lease still in
-- the future; NULL when none is). Each process paces its calls at the
-- endpoint's rate divided by sharers. An endpoint with no live lease is not
-- listed (its expired leases wait for the next call naming it).
CREATE OR REPLACE VIEW endpoint_budgets AS
SELECT lease.endpoint,
       count(*)::integer AS sharers,
       array_agg(lease.instance_id ORDER BY lease.instance_id) AS instances,
       max(lease.slowed_until) FILTER (WHERE lease.slowed_until > clock()) AS slowed_until
  FROM endpoint_leases lease
 WHERE lease.leased_until >= clock()
 GROUP BY lease.endpoint;
