-- route_token: the chain_tokens row of token p_symbol on chain p_chain_key, as
-- a route function reads it (no lock: a route reads only). QT014 when the
-- chain has no such token (registry_row), the message p_what (the route and
-- the node), the symbol and the chain; HINT p_hint, by default where the
-- tokens are listed. Internal. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION route_token(
    p_what      text,
    p_chain_key text,
    p_symbol    text,
    p_hint      text DEFAULT 'The chain_tokens table lists the tokens of each chain.'
) RETURNS chain_tokens
LANGUAGE sql STABLE
AS $$
    SELECT registry_row((SELECT t FROM chain_tokens t WHERE t.chain_key = p_chain_key AND t.symbol = p_symbol),
                        format('%s: token %s is not registered on chain %s', p_what,
                               coalesce(quote_literal(p_symbol), '<NULL>'), coalesce(p_chain_key, '<NULL>')),
                        p_hint);
$$;
