-- route_chain: the chain registry's row of p_chain_key, as a route function
-- reads it (no lock: a route reads only). QT014 when the network has no such
-- chain (registry_row), the message p_what (the route, the node and which
-- chain: 'chain', 'source chain') then the key as given, at most 80
-- characters of it. Internal. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION route_chain(p_what text, p_chain_key text) RETURNS chains
LANGUAGE sql STABLE
AS $$
    SELECT registry_row((SELECT c FROM chains c WHERE c.chain_key = p_chain_key),
                        format('%s %s is not registered on this network', p_what,
                               coalesce(quote_literal(left(p_chain_key, 80)), '<NULL>')),
                        'The chains table lists the registered chains.');
$$;
