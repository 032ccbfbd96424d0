-- claim_secret: a new claim's secret, handed to the claimer and never stored.
-- Internal. 64 hex characters carrying 244 random bits: two gen_random_uuid()
-- (122 random bits each, drawn from pg_strong_random, the operating system's
-- cryptographic generator; core PostgreSQL, no extension). The node keeps
-- only claim_hash(secret).
CREATE OR REPLACE FUNCTION claim_secret() RETURNS text
LANGUAGE sql
VOLATILE
AS $$
    SELECT encode(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex')
$$;
